"""The ``frtrace`` command: flags -> one library call -> a renderer -> an exit code.

Exit codes: 0 no problem found, 1 a hang, desync or other problem found, 2 the input cannot be
analysed (no directory, no dumps, nothing readable, bad options).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from frtrace.errors import FrtraceError

__all__ = ["app", "main"]

EXIT_OK, EXIT_PROBLEM, EXIT_INPUT = 0, 1, 2

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # a crash must never print dump contents as locals
    add_completion=False,
    help="Which rank hung the job, and why: analyse PyTorch Flight Recorder dumps.",
)

DirOption = Annotated[
    Path,
    typer.Option(
        "--dir",
        "-d",
        help="Directory holding one Flight Recorder dump per rank (searched recursively).",
        show_default=False,
    ),
]
JobsOption = Annotated[
    int | None,
    typer.Option("--jobs", "-j", help="Worker processes for loading (default: all CPUs)."),
]


class Format(StrEnum):
    """Output formats of ``analyze``."""

    TEXT = "text"
    JSON = "json"


def _fail(exc: FrtraceError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=EXIT_INPUT)


def _print_load_problems(dumps: object) -> None:
    from frtrace.tables import DumpSet

    assert isinstance(dumps, DumpSet)
    for problem in dumps.problems:
        prefix = "error" if problem.fatal else "warning"
        typer.echo(f"{prefix}: {problem.message}", err=True)


@app.command()
def analyze(
    dump_dir: DirOption,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.TEXT,
    jobs: JobsOption = None,
) -> None:
    """Name the rank(s) that hung or desynchronised the job, and why.

    Example: frtrace analyze -d /tmp/dumps --format json
    """
    from frtrace.pipeline import analyze_dumps
    from frtrace.report.json import render_json
    from frtrace.report.text import render_text
    from frtrace.tables import load_dumps

    try:
        dumps = load_dumps(dump_dir, jobs=jobs, progress=True)
        report = analyze_dumps(dumps)
    except FrtraceError as exc:
        raise _fail(exc) from None
    _print_load_problems(dumps)
    render = render_json if fmt == Format.JSON else render_text
    typer.echo(render(report), nl=False)
    raise typer.Exit(code=EXIT_PROBLEM if report.has_problems else EXIT_OK)


@app.command()
def summary(dump_dir: DirOption, jobs: JobsOption = None) -> None:
    """List the dump files: rank, format, backend, entries, problems.

    Example: frtrace summary -d tests/fixtures/gloo/never_joins
    """
    from frtrace.summary import render_summary
    from frtrace.tables import load_dumps

    try:
        dumps = load_dumps(dump_dir, jobs=jobs, progress=True)
    except FrtraceError as exc:
        raise _fail(exc) from None
    typer.echo(render_summary(dumps), nl=False)


@app.command()
def export(
    dump_dir: DirOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write Parquet files to.")],
    jobs: JobsOption = None,
) -> None:
    """Write the loaded tables (entries, stacks, groups, pg_status, files) as Parquet.

    Example: frtrace export -d dumps/ -o tables/ && duckdb -c "from 'tables/entries.parquet'"
    """
    from frtrace.export import export_parquet
    from frtrace.tables import load_dumps

    try:
        dumps = load_dumps(dump_dir, jobs=jobs, progress=True)
        written = export_parquet(dumps, out)
    except FrtraceError as exc:
        raise _fail(exc) from None
    _print_load_problems(dumps)
    for path, rows in written:
        typer.echo(f"{path}  ({rows} rows)")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
