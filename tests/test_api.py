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
    "frtrace.recorder": [
        "RecorderState",
        "disable",
        "dump",
        "dump_path",
        "enable",
        "phase",
        "state",
    ],
    "frtrace.pipeline": ["analyze", "analyze_dumps", "analyze_loaded", "diagnose_source"],
    "frtrace.cli": ["app", "main", "run"],
}

# Stage -> the stages it may import. Nothing imports upward; the job side imports nothing of
# the analysis (a training script pays only for what it uses).
_GROUND = {"errors", "base"}  # what every stage stands on (``base``: files written safely,
# the process's heap, progress, printable text, rank ranges; imports nothing but ``errors``)
ALLOWED = {
    "errors": set(),
    "base": {"base", "errors"},
    "job": {"job", *_GROUND},
    # stage 0: the folder read once (what each file is, the budgets every reader shares, the
    # sets, attempts and copies); ``job``: the name of collect's manifest
    "incident": {"incident", "job", *_GROUND},
    "pystack": {"pystack", "incident", "job", *_GROUND},
    "evidence": {"evidence", "pystack", "incident", "job", *_GROUND},
    "load": {"load", "incident", *_GROUND},
    # the findings' typed evidence: plain values, beside the job's failures they cite
    "detail": {"detail", "evidence", "pystack", "job", *_GROUND},
    "model": {"detail", "evidence", "pystack", "job", *_GROUND},
    "analysis": {"analysis", "model", "detail", "load", "pystack", "evidence", *_GROUND},
    "collect": {"collect", "incident", "job", *_GROUND},
    # report and gate read the model (``frtrace.model``, the findings' typed evidence in
    # ``frtrace.detail``), never the analysis that made it
    "report": {"report", "model", "detail", "load", "pystack", "evidence", *_GROUND},
    "diagnosis_cache": {
        "analysis",
        "model",
        "detail",
        "load",
        "incident",
        "pystack",
        "evidence",
        *_GROUND,
    },
    "pipeline": {
        "analysis",
        "diagnosis_cache",
        "evidence",
        "incident",
        "load",
        "model",
        "pystack",
        *_GROUND,
    },
    # the gate, and the report a stalled job writes about itself (``job.watch`` runs
    # ``gate.watchreport`` by name, on a stall)
    "gate": {
        "gate",
        "pipeline",
        "model",
        "detail",
        "load",
        "report",
        "evidence",
        "incident",
        "job",
        *_GROUND,
    },
    "recorder": {"job"},
    "testing": {"gate"},
    "__init__": {"errors", "load", "model", "pipeline"},
    "__main__": {"cli"},
}
# Where a stage is a folder, every module in it and in its subfolders; else the one module.
TOP_LEVEL = {p.stem for p in PACKAGE.glob("*.py")}


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


def _modules_of(stage: str) -> list[Path]:
    if stage in TOP_LEVEL:
        return [PACKAGE / f"{stage}.py"]
    return sorted((PACKAGE / stage).rglob("*.py"))


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_stages_import_only_earlier_stages(stage: str) -> None:
    """Folders (with their subfolders) and top-level modules are pipeline stages: none
    imports a later stage or the CLI."""
    modules = _modules_of(stage)
    assert modules
    for path in modules:
        used = _frtrace_imports(path)
        where = path.relative_to(PACKAGE)
        assert used <= ALLOWED[stage], f"{where} imports {sorted(used - ALLOWED[stage])}"


def test_every_stage_and_top_level_module_has_its_rule() -> None:
    """A new folder or top-level module of the package gets its line in ``ALLOWED``."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert (folders | TOP_LEVEL) - {"cli"} <= set(ALLOWED)


def _module_graph() -> dict[str, set[str]]:
    """frtrace's modules (dotted names) -> the frtrace modules each imports, at any level."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        tree = ast.parse(path.read_text())
        typing_only = {  # (``if TYPE_CHECKING:`` imports: annotations, never run)
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            found |= {t for t in targets if t in names and t != name}
        graph[name] = found
    return graph


def test_no_import_circle_in_the_package() -> None:
    """No two modules of frtrace import each other, directly or through others (lazy imports
    count: they are arrows all the same; imports for annotations only do not run)."""
    import networkx as nx

    graph = nx.DiGraph([(a, b) for a, targets in _module_graph().items() for b in targets])
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles


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


def test_long_functions_are_few_and_say_why() -> None:
    """A function over 80 lines is read in parts; the few that stay long (at most 3) say why
    in a ``# long: <reason>`` comment on the line above them."""
    long: list[str] = []
    unexplained: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if (node.end_lineno or node.lineno) - node.lineno + 1 <= 80:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            name = f"{path.relative_to(PACKAGE)}:{node.name}"
            long.append(name)
            if not lines[first - 2].lstrip().startswith("# long: "):
                unexplained.append(name)
    assert not unexplained
    assert len(long) <= 3, long


# The entry points above the renderers, the gate and the CLI: what they may import is theirs
_RENDERERS_UP = ("report", "cli", "gate")
_ENTRY_POINTS = {"__main__.py", "testing.py"}


def test_nothing_below_the_renderers_imports_them() -> None:
    """No module outside report/, cli/ and gate/ (the entry points aside) imports them, at any
    depth of the tree and lazily or not: the model and the analysis hold no words."""
    below = [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[0] not in _RENDERERS_UP
        and str(p.relative_to(PACKAGE)) not in _ENTRY_POINTS
    ]
    upward = {
        str(p.relative_to(PACKAGE)): sorted(used)
        for p in below
        if (used := _frtrace_imports(p) & set(_RENDERERS_UP))
    }
    assert upward == {}
    assert len(below) > 100 and PACKAGE / "analysis" / "rules" / "hang.py" in below


def test_the_entry_points_take_a_path_as_text() -> None:
    """``frtrace.analyze("dumps/")`` and ``frtrace.load_dumps("dumps/")``, as the package's
    docstring writes them (load_dumps raised AttributeError on a str)."""
    import frtrace

    folder = str(Path(__file__).resolve().parent / "fixtures" / "gloo" / "broadcast_root")
    assert frtrace.load_dumps(folder).loaded_ranks
    assert frtrace.analyze(folder).verdict is not None


def test_the_top_level_holds_at_most_ten_modules() -> None:
    """The package's top holds the entry points and what every stage shares; a new module
    goes into the stage it belongs to."""
    assert len(TOP_LEVEL) <= 10, sorted(TOP_LEVEL)


_LOAD_ROOMS = ("read", "workers", "handover")


def test_nothing_above_the_load_imports_one_of_its_rooms() -> None:
    """``load/read``, ``load/workers`` and ``load/handover`` are the stage's own: the stages
    above take the load's face (``load/*.py``: tables, dumpset, hooks...), never a room."""
    reached: dict[str, list[str]] = {}
    graph = _module_graph()
    for name, targets in graph.items():
        if name.startswith("frtrace.load"):
            continue
        inner = sorted(
            t for t in targets if t.startswith("frtrace.load.") and t.split(".")[2] in _LOAD_ROOMS
        )
        if inner:
            reached[name] = inner
    assert reached == {}


def test_the_load_names_every_module_it_holds() -> None:
    """``load/__init__.py`` (and each room's) names every module of its folder: a newcomer
    reads one docstring to know where a thing is."""
    for init in [
        PACKAGE / "load" / "__init__.py",
        *(PACKAGE / "load" / r / "__init__.py" for r in _LOAD_ROOMS),
    ]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for path in sorted(init.parent.rglob("*.py")):
            if path.name == "__init__.py":
                continue
            assert f"``{path.stem}``" in doc, (
                f"{init.relative_to(PACKAGE)} does not name {path.stem}"
            )
        if init.parent.name == "load":
            for room in _LOAD_ROOMS:
                assert f"``{room}/``" in doc


# Who may list a folder, and which: the incident's folder only from ``incident/``
_LISTS_ITS_OWN = {
    "load/cache.py": "the cache's own folder",
    "load/cachefiles.py": "the cache's own entries (eviction)",
    "load/handover/spill.py": "the spill folder's stale entries",
    "diagnosis_cache.py": "the package's own sources (the code digest)",
    "collect/procs.py": "/proc (the job's rank processes)",
    "job/registry.py": "the recorder's registry folder",
    "base/heap.py": "/sys/bus/virtio/devices",
    "pystack/where.py": "the package's own folder (its module names)",
}
_LISTING_CALLS = ("iterdir", "scandir", "listdir", "walk", "glob", "rglob")


def test_only_the_incident_stage_lists_a_folder() -> None:
    """Stage 0 (``frtrace/incident/``) is the only code that lists the incident's folder or
    archive: the readers of dumps, stacks and logs take its listing; the few other listings
    are of frtrace's own folders, each said why above."""
    listing: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("incident/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in _LISTING_CALLS:  # type: ignore[attr-defined]
                listing.add(where)
    assert listing <= set(_LISTS_ITS_OWN), sorted(listing - set(_LISTS_ITS_OWN))


def _errors_classes() -> set[str]:
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


def test_every_user_facing_error_is_drawn_in_the_error_tree() -> None:
    """Every ``FrtraceError`` is defined in ``errors.py`` and drawn in its docstring's tree;
    no other module derives one (a reader's own error is one of these, or stays internal)."""
    import frtrace.errors as errors

    defined = _errors_classes()
    doc = errors.__doc__ or ""
    for name in defined:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.FrtraceError):
            assert f" {name} " in doc or f"{name}\n" in doc or doc.startswith(name), name
    derived: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if bases & defined:
                    derived.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert derived == []


def test_files_are_written_one_way() -> None:
    """A file frtrace names is written by ``base.files`` (a new temporary file renamed over
    it, never through a link): no other module renames a file into place."""
    renaming = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).as_posix() != "base/files.py"
        and "os.replace(" in path.read_text()
    )
    assert renaming == []
