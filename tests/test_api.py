"""The public API and the layering of the package: pinned so a move cannot break users' imports."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "frtrace"

# What users import. Adding a name is a decision; removing one breaks someone.
PUBLIC = {
    "frtrace": [
        "DumpSet",
        "FrtraceError",
        "InputError",
        "Report",
        "Verdict",
        "__version__",
        "analyze",
        "analyze_dumps",
        "load_dumps",
    ],
    "frtrace.testing": ["assert_culprits", "assert_expected", "assert_healthy"],
    "frtrace.recorder": ["RecorderState", "disable", "dump", "dump_path", "enable", "state"],
    "frtrace.pipeline": ["analyze", "analyze_dumps", "analyze_loaded", "diagnose_source"],
    "frtrace.cli": ["app", "main"],
}

# Stage -> the stages it may import. Nothing imports upward; the job side imports nothing of
# the analysis (a training script pays only for what it uses).
ALLOWED = {
    "job": {"job"},
    # (``layout``: what each file of a dump folder is, one rule for the three readers)
    # (``budget``: what an untrusted file may cost, the limits every reader shares)
    "pystack": {"pystack", "job", "errors", "ranges", "printable", "layout", "budget"},
    "evidence": {"evidence", "pystack", "job", "errors", "ranges", "printable", "layout", "budget"},
    "load": {"load", "errors", "printable", "ranges", "progress", "layout", "budget"},
    # the findings' typed evidence: plain values, beside the job's failures they cite
    "detail": {"detail", "evidence", "pystack", "job", "errors", "ranges", "printable"},
    "analysis": {
        "analysis",
        "model",
        "detail",
        "load",
        "pystack",
        "evidence",
        "errors",
        "ranges",
        "printable",
    },
    "collect": {"collect", "job", "errors", "ranges", "printable"},
    # report and gate read the model (``frtrace.model``, the findings' typed evidence in
    # ``frtrace.detail``), never the analysis that made it
    "report": {
        "report",
        "model",
        "detail",
        "load",
        "pystack",
        "evidence",
        "errors",
        "ranges",
        "printable",
    },
    "gate": {
        "gate",
        "pipeline",
        "model",
        "detail",
        "load",
        "report",
        "evidence",
        "errors",
        "ranges",
        "printable",
    },
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_are_pinned(module: str) -> None:
    """Each public module's __all__ is exactly the pinned list, and every name resolves."""
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module])
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_public_names_are_the_real_objects() -> None:
    """The re-exports are the objects the stages define, not copies."""
    import frtrace
    from frtrace.gate import testing as gate_testing
    from frtrace.job import recorder as job_recorder
    from frtrace.model import Report
    from frtrace.pipeline import analyze

    assert frtrace.analyze is analyze
    assert frtrace.Report is Report
    import frtrace.recorder
    import frtrace.testing

    assert frtrace.recorder.enable is job_recorder.enable
    assert frtrace.testing.assert_culprits is gate_testing.assert_culprits


def test_importing_the_recorder_loads_no_analysis() -> None:
    """`import frtrace.recorder` in a training script loads neither the analysis nor pandas."""
    code = (
        "import sys, frtrace.recorder; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'pyarrow') "
        "or m.startswith(('frtrace.analysis', 'frtrace.load', 'frtrace.report'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def _frtrace_imports(path: Path) -> set[str]:
    """The frtrace stages a module imports (at any level, lazily or not)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "frtrace" and len(parts) > 1:
                out.add(parts[1])
    return out


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_stages_import_only_earlier_stages(stage: str) -> None:
    """Folders are pipeline stages: none imports a later stage or the CLI."""
    for path in sorted((PACKAGE / stage).glob("*.py")):
        used = _frtrace_imports(path)
        assert used <= ALLOWED[stage], f"{path.name} imports {sorted(used - ALLOWED[stage])}"


def test_every_stage_says_what_goes_in_and_out() -> None:
    """Each stage folder has a docstring saying what it takes and what it gives."""
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 20, f"{init} needs a paragraph on its stage"


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    """No module grows past 450 lines: split it along its jobs instead."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long
