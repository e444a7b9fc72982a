"""Every `Example:` line of every command's --help runs as written on a repository fixture.

The examples are read from the help itself (rendered wide, so none is rewrapped) and run in
order, from a directory laid out like the repository root (a copy of ``tests/fixtures``):
the examples write files (``-o report.html``, ``expect.json``, ``tables/``) that must not land
in the checkout. A line with shell syntax (a pipe, a redirection, ``$(...)``) runs in bash
through the installed console script; a plain ``frtrace ...`` line runs in process through
the same typer app (the console script's start costs a second a line on 2 cores). Each exits
with the code its comment documents (``# exit 1: a hang``), else 0.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from frtrace.cli import app

ROOT = Path(__file__).resolve().parent.parent

# Examples that need more than a fixture, by the command they run, and why they are not run.
NOT_RUNNABLE = {
    "frtrace collect": "needs a live, hung job: its rank processes on this host, or its "
    "TCPStore and torch's debug server for --store (tests/collect/ runs real ones)",
    "frtrace compare": "needs two snapshots of one job taken seconds apart (what collect "
    "--twice writes); no fixture is such a pair (tests/analysis/test_stackjoin.py makes them)",
}
SHELL = re.compile(r"[|&;<>$`()]")
EXIT = re.compile(r"#.*\bexit (\d+)")
WIDE = {"terminal_width": 10_000, "max_content_width": 10_000}


def _commands() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    return [(), *((name,) for name in sorted(root.commands))]


def _help(command: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], **WIDE)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return result.stdout


def examples(help_text: str) -> list[str]:
    """The example lines of one help text: `Example: CMD` lines, and the indented lines of an
    `Example:` block up to the next blank line."""
    found: list[str] = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        head, colon, rest = line.strip().partition(":")
        if head != "Example" or not colon:
            continue
        if rest.strip():
            found.append(rest.strip())
            continue
        for following in lines[i + 1 :]:
            if not following.strip():
                break
            found.append(following.strip())
    return found


EXAMPLES = {" ".join(("frtrace", *c)): examples(_help(c)) for c in _commands()}


def _not_runnable(line: str) -> str | None:
    return next((why for cmd, why in NOT_RUNNABLE.items() if line.startswith(cmd + " ")), None)


def expected_exit(line: str) -> int:
    match = EXIT.search(line)
    return int(match.group(1)) if match else 0


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory laid out like the repository root, for the examples' relative paths."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "tests" / "fixtures", root / "tests" / "fixtures")
    return root


def test_every_command_has_examples() -> None:
    assert set(EXAMPLES) >= {"frtrace", "frtrace analyze", "frtrace check", "frtrace env"}
    for command, lines in EXAMPLES.items():
        assert lines, f"{command} --help has no Example: line"
        for line in lines:
            assert line.startswith(("frtrace ", "eval ", "python ")), (command, line)


def test_the_examples_not_run_are_listed_with_their_reason() -> None:
    """Only collect and compare need more than a fixture, and each reason is still used."""
    lines = [line for ls in EXAMPLES.values() for line in ls]
    skipped = {cmd for cmd in NOT_RUNNABLE for line in lines if line.startswith(cmd + " ")}
    assert skipped == set(NOT_RUNNABLE)


def test_the_exit_codes_of_the_examples_are_documented() -> None:
    """Analyze and check on a hang say so (`# exit 1`): the reader is not surprised by a 1."""
    hangs = (
        "frtrace analyze tests/fixtures/gloo/never_joins",
        "frtrace analyze tests/fixtures/gloo/mesh_stall",
    )
    lines = [line for ls in EXAMPLES.values() for line in ls]
    assert [line for line in lines if line.startswith(hangs[0])]
    for line in lines:
        if line.startswith(hangs):
            assert expected_exit(line) == 1, line


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_examples_run_as_written(
    command: str, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(checkout)
    for line in EXAMPLES[command]:
        if _not_runnable(line):
            continue
        code = line.split("#", 1)[0].strip()
        if SHELL.search(code) or not code.startswith("frtrace "):
            done = subprocess.run(
                ["bash", "-c", f"set -eo pipefail\n{line}"],
                cwd=checkout,
                capture_output=True,
                text=True,
                timeout=120,
            )
            exit_code, stderr = done.returncode, done.stderr
        else:
            result = CliRunner().invoke(app, shlex.split(code)[1:])
            exit_code, stderr = result.exit_code, result.stderr
            assert result.exception is None or isinstance(result.exception, SystemExit), line
        assert exit_code == expected_exit(line), f"{line}\n{stderr}"
        assert "Traceback" not in stderr, line
        assert not [e for e in stderr.splitlines() if e.startswith("error:")], (line, stderr)


def test_one_example_runs_through_the_console_script(checkout: Path) -> None:
    """The first example of `frtrace --help`, exactly as a user types it, in bash."""
    line = EXAMPLES["frtrace"][0]
    assert line.startswith("frtrace analyze tests/fixtures/")
    done = subprocess.run(["bash", "-c", line], cwd=checkout, capture_output=True, text=True)
    assert done.returncode == expected_exit(line) == 1, done.stderr
    assert done.stdout.startswith("HANG: culprit rank"), done.stdout
