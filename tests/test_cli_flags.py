"""The flags every tool has: -h as --help on every command, --version, -q with a machine
format, -o - for standard output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner, Result

from frtrace.cli import app
from tests.conftest import GLOO

HANG = GLOO / "never_joins"
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_every_command_is_listed() -> None:
    assert {"analyze", "check", "collect", "compare", "export", "show", "summary"} <= set(COMMANDS)


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=lambda c: c or "frtrace")
def test_dash_h_is_help(command: list[str]) -> None:
    short, long = run(*command, "-h"), run(*command, "--help")
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.stdout == long.stdout and "Usage:" in short.stdout


def _version_lines(*prelude: str, env: dict[str, str] | None = None) -> list[str]:
    """`frtrace --version` in a fresh interpreter (after ``prelude``); then the modules it
    imported that it must not have (torch) on a last line."""
    code = "\n".join(
        (
            "import sys",
            *prelude,
            "from frtrace.cli import run",
            "sys.argv = ['frtrace', '--version']",
            "try:\n    run()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code",
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))",
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else os.environ | env,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


def test_version_says_the_reader_python_pyarrow_and_torch_without_importing_torch() -> None:
    import pyarrow

    from frtrace import __version__
    from frtrace.load.read import native

    lines = _version_lines()
    assert lines[0] == f"frtrace {__version__}"
    if native.inactive_reason() is None:
        assert lines[1] == f"C reader: active ({native.location()})"
    assert lines[2].startswith(f"Python: {sys.version.split()[0]} (CPython, ")
    assert lines[3] == f"pyarrow: {pyarrow.__version__}"
    assert lines[4].startswith("torch: ")
    assert lines[-1] == "[]"  # torch's version from its metadata: torch not imported


def test_version_without_torch_and_without_the_c_reader() -> None:
    hide = (
        "import importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())"
    )
    lines = _version_lines(hide, env={"FRTRACE_PURE_PYTHON": "1"})
    assert lines[1].startswith("C reader: off: ")
    assert lines[4] == "torch: not installed" and lines[-1] == "[]"


def test_version_names_pure_python_as_the_reason() -> None:
    lines = _version_lines(env={"FRTRACE_PURE_PYTHON": "1"})
    from frtrace.load.read import native

    if native.location() is not None:
        assert lines[1] == "C reader: off: FRTRACE_PURE_PYTHON is set"


def test_quiet_json_prints_the_json_and_nothing_else() -> None:
    result = run("analyze", HANG, "-q", "-f", "json")
    assert result.exit_code == 1 and result.stderr == ""
    assert json.loads(result.stdout)["culprit_ranks"] == [2]


def test_quiet_text_prints_the_headline() -> None:
    result = run("analyze", HANG, "-q")
    assert result.stdout.splitlines() == [result.stdout.strip()]
    assert result.stdout.startswith("HANG: culprit rank 2")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_dash_o_dash_writes_the_report_to_stdout(fmt: str, tmp_path: Path) -> None:
    to_stdout = run("analyze", HANG, "-f", fmt, "-o", "-")
    plain = run("analyze", HANG, "-f", fmt)
    assert to_stdout.exit_code == plain.exit_code == 1
    assert to_stdout.stdout == plain.stdout and "report written" not in to_stdout.stdout
    assert not (tmp_path / "-").exists() and not Path("-").exists()


def test_export_refuses_dash_o_dash() -> None:
    result = run("export", HANG, "-o", "-")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: export needs -o DIR") and not Path("-").exists()


def test_ctrl_c_during_a_command_says_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the dumps load: one line, exit code 130 (typer alone ends with the code
    and says nothing)."""
    import frtrace.pipeline

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(frtrace.pipeline, "diagnose_source", interrupted)
    result = run("analyze", HANG, "-f", "json")
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n" and result.stdout == ""
