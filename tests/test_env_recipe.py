"""`frtrace env` prints a clean recipe (issue 52, item 3).

- `--watch SECONDS` sets FRTRACE_WATCH; without it one comment says what it would add;
- a known torch (`--torch`, else the one installed here) gets only the names it reads, so
  torch 2.8+ never warns "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated";
- every backticked `frtrace ...` command in frtrace's own messages runs as written.
"""

from __future__ import annotations

import re
import shlex
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from frtrace.cli import app
from frtrace.job.env import installed_torch, parse_version, render_env

ROOT = Path(__file__).resolve().parent.parent
OLD_NAMES = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
HINT = re.compile(r"`(frtrace [a-z][^`]*)`")


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _exports(out: str) -> dict[str, str]:
    lines = [line.removeprefix("export ") for line in out.splitlines()]
    return dict(line.split("=", 1) for line in lines if re.match(r"[A-Z_]+=", line))


def test_watch_sets_frtrace_watch() -> None:
    out = run("env", "--dir", "/shared/fr", "--torch", "2.13", "--watch", "120").stdout
    assert _exports(out)["FRTRACE_WATCH"] == "120"
    assert "# torch 2.5+: frtrace's own" in out  # one version on the line
    assert "--watch 300" not in out


def test_without_watch_one_plain_comment_says_what_it_adds() -> None:
    out = run("env", "--dir", "/shared/fr", "--torch", "2.13").stdout
    assert "FRTRACE_WATCH" not in _exports(out)
    assert [line for line in out.splitlines() if "FRTRACE_WATCH" in line] == [
        "# `frtrace env --dir /shared/fr --watch 300` adds FRTRACE_WATCH=300: a stall of 300 s "
        "makes every rank dump and writes DIR/frtrace-report.html, with no code change"
    ]
    assert "# export FRTRACE_WATCH" not in out


def test_watch_for_a_torch_without_the_autoload_is_a_usage_error() -> None:
    result = run("env", "--torch", "2.4", "--watch", "60")
    assert result.exit_code == 2
    assert "--watch" in result.output and "2.5" in result.output


@pytest.mark.parametrize("torch", ["2.8", "2.13", "2.15"])
def test_a_new_torch_gets_only_the_new_names(torch: str) -> None:
    env = _exports(run("env", "--torch", torch, "--format", "env").stdout)
    assert env["TORCH_FR_BUFFER_SIZE"] == "20000"
    assert "TORCH_FR_DUMP_TEMP_FILE" in env
    assert not set(OLD_NAMES) & set(env)


def test_an_old_torch_gets_only_the_old_names() -> None:
    env = _exports(run("env", "--torch", "2.7", "--format", "env").stdout)
    assert set(OLD_NAMES) <= set(env)
    assert "TORCH_FR_BUFFER_SIZE" not in env and "TORCH_FR_DUMP_TEMP_FILE" not in env


def test_the_installed_torch_is_read_from_its_metadata_not_imported() -> None:
    try:
        expected: tuple[int, int] | None = parse_version(version("torch"))
    except PackageNotFoundError:
        expected = None
    assert installed_torch() == expected
    out = run("env", "--dir", "/shared/fr").stdout
    if expected is None:
        assert "# no torch here and no --torch: every name" in out
    else:
        assert f"# for torch {expected[0]}.{expected[1]}, installed here" in out
        assert out == render_env("/shared/fr", torch_version=expected, installed=True)


def test_no_torch_and_no_version_prints_every_name_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("frtrace.job.env.installed_torch", lambda: None)
    out = run("env", "--dir", "/shared/fr").stdout
    assert "# no torch here and no --torch: every name" in out
    assert set(OLD_NAMES) | {"TORCH_FR_BUFFER_SIZE"} <= set(_exports(out))


def _hints() -> set[str]:
    """Every backticked `frtrace ...` command in frtrace's messages and in `frtrace env`'s
    output (any torch)."""
    found: set[str] = set()
    for path in (ROOT / "frtrace").rglob("*"):
        if path.suffix in {".py", ".json"}:
            found |= {h for h in HINT.findall(path.read_text()) if "{" not in h}
    for torch in (None, (2, 4), (2, 13)):
        found |= set(HINT.findall(render_env("/shared/fr", torch_version=torch)))
    return found


# Hints with placeholders or that need a live job or dumps: the command they name, and how
# it is filled in here so that it runs.
FILLED = {"DIR": "/tmp/frtrace-hint-dir", "SECONDS": "60", "X.Y": "2.13"}


def _env_and_schema_hints() -> list[str]:
    return sorted(h for h in _hints() if h.split()[1] in {"env", "schema"})


def test_the_env_and_schema_hints_are_found() -> None:
    hints = _env_and_schema_hints()
    assert "frtrace env --dir DIR" in hints  # frtrace/job/autowatch.py
    assert "frtrace schema" in hints  # report.schema.json
    assert "frtrace env --dir /shared/fr --watch 300" in hints  # frtrace env's own
    assert "frtrace env DIR" not in hints


@pytest.mark.parametrize("hint", _env_and_schema_hints())
def test_every_env_and_schema_hint_runs_as_written(hint: str) -> None:
    args = [FILLED.get(word, word) for word in shlex.split(hint)[1:]]
    result = run(*args)
    assert result.exit_code == 0, (hint, result.output)


def test_the_schema_points_to_a_page_that_exists() -> None:
    import json

    text = run("schema").stdout
    description = json.loads(text)["description"]
    assert "README's" not in description
    for page in re.findall(r"docs/[\w-]+\.md", description):
        assert (ROOT / page).is_file(), page
