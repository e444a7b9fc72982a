"""The command line's plain values coerced without pydantic (``frtrace.cli.coercion``): the
same values and the same errors as typer's own coercion, for every parameter of every
command, and no pydantic imported by a command that takes plain values."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st
from typer import _coercion

from frtrace.cli import app, coercion
from frtrace.cli.params import _click
from tests.conftest import GLOO

ROOT = Path(__file__).resolve().parents[1]

TEXTS = ["", "x", "json", "JSON", "-", " 5", "5", "a b", "é", "a\x00b", "--x", "0", "tp:0"]
NUMBERS = [
    "0", "1", "7", "007", "-1", "-0", "+5", " 5", "5 ", "1_000", "5.0", "5.", ".5", "-.5",
    "0.25", "1e3", "nan", "inf", "0x10", "１２", "", "x", "99999999999999999999", "1.2.3",
    "123456789012345678", "1234567890123456789",
]  # fmt: skip
OTHER = [None, 0, 1, 5, -1, 0.5, 2.0, True, False, ("a",), ["a", "b"], ("a", 1), b"x", Path(".")]


def _parameters() -> Iterator[tuple[str, Any, Any]]:
    """(command path, click command, parameter) for each typer parameter of each command."""
    top = typer.main.get_command(app)

    def walk(command: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
        for param in command.params:
            if hasattr(param, "type_descriptor"):
                yield path, command, param
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, f"{path} {name}")

    yield from walk(top, "frtrace")


PARAMETERS = list(_parameters())


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        got = runtime._coerce_value(value, param=param, ctx=ctx)
    except _click.exceptions.ClickException as exc:
        return type(exc).__name__, exc.format_message()
    return type(got).__name__, got


def _both(param: Any, command: Any, value: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """The outcome of coercing ``value`` here first and by typer alone."""
    descriptor = param.type_descriptor
    lean = coercion.lean_runtime_param(descriptor)
    assert lean is not None
    ctx = _click.Context(command)
    ours = _outcome(lean, value, param, ctx)
    typers = _outcome(_coercion.build_runtime_param(descriptor), value, param, ctx)
    return ours, typers


def _paths(tmp: Path) -> list[str | Path]:
    (tmp / "file").write_text("x")
    (tmp / "dir").mkdir()
    (tmp / "locked").write_text("x")
    (tmp / "locked").chmod(0)
    spelled = [
        str(tmp / "file"), str(tmp / "dir"), str(tmp / "dir") + "/", str(tmp / "missing"),
        str(tmp / "locked"), str(tmp / "file" / "under"), "", "-", ".", "./x", "a//b",
    ]  # fmt: skip
    return [*spelled, *map(Path, spelled)]


def test_every_command_has_parameters_coerced_here() -> None:
    assert coercion.installed()
    lean = [p for _, _, p in PARAMETERS if coercion.lean_runtime_param(p.type_descriptor)]
    assert len(PARAMETERS) > 40  # (every command's)
    assert len(lean) == len(PARAMETERS)  # (each of frtrace's is a plain kind)


@pytest.mark.parametrize(
    ("where", "command", "param"),
    PARAMETERS,
    ids=[f"{where} {p.name}" for where, _, p in PARAMETERS],
)
def test_a_parameter_coerces_as_typer_does(
    where: str, command: Any, param: Any, tmp_path: Path
) -> None:
    for value in [*TEXTS, *NUMBERS, *OTHER, *_paths(tmp_path)]:
        ours, typers = _both(param, command, value)
        assert ours == typers, f"{where} {param.name} {value!r}"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789-+._ eEx/"), max_size=8))
def test_numbers_and_choices_coerce_as_typer_does(value: str) -> None:
    for where, command, param in PARAMETERS:
        if param.type_descriptor.annotation in (int, float) or param.name == "fmt":
            ours, typers = _both(param, command, value)
            assert ours == typers, f"{where} {param.name} {value!r}"


def test_another_typer_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typer.core, "build_runtime_param", _coercion.build_runtime_param)
    monkeypatch.setattr(typer, "__version__", "0.30.0")
    assert not coercion.install()
    assert not coercion.installed()
    monkeypatch.setattr(typer, "__version__", "0.29.9")
    assert coercion.install()
    assert coercion.installed()


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "-q", "-d", str(GLOO / "late_rank"), "-f", "json", "--jobs", "1"],
        ["summary", str(GLOO / "late_rank"), "--no-cache"],
        ["analyze", str(GLOO / "late_rank"), "--jobs", "x"],  # (an error: typer's)
    ],
)
def test_a_command_imports_no_pydantic_for_plain_values(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from frtrace.cli import run\n"
        f"sys.argv = ['frtrace', *{args!r}]\n"
        "try:\n"
        "    run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('pydantic' in sys.modules, file=sys.stderr)\n"
    )
    env = os.environ | {"FRTRACE_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    *said, imported = done.stderr.splitlines()
    # (a value typer rejects is typer's to describe: pydantic then, for that one)
    assert imported == str("x" in args)
    if "x" in args:
        assert said[-1].startswith(
            "error: Invalid value for '--jobs' / '-j': Input should be a valid integer, unable "
            "to parse string as an integer ("
        )
    else:
        assert not any(line.startswith("error") for line in said)
