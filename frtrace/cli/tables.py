"""``frtrace show``, ``summary`` and ``export``: what the loaded tables offer on their own.

Registered on :data:`frtrace.cli.app.app` by :mod:`frtrace.cli`; the analysis runs only where
a command needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from frtrace.cli.app import (
    _echo,
    _fail,
    _load,
    _parse_ranks,
    _print_load_problems,
    app,
)
from frtrace.cli.params import (
    DirArgument,
    DirOption,
    JobsOption,
    NoCacheOption,
    OnlyOption,
    PgOption,
    RanksOption,
    SchedulerOption,
    progress_display,
)
from frtrace.errors import FrtraceError


@app.command()
def show(
    dump_path: DirArgument = None,
    dump_dir: DirOption = None,
    pg: PgOption = None,
    ranks: RanksOption = None,
    seq: Annotated[
        str | None,
        typer.Option("--seq", help="Sequence numbers to show, e.g. 10-20 (default: the newest)."),
    ] = None,
    last: Annotated[
        int, typer.Option("--last", "-n", help="Newest sequence numbers per group.", min=1)
    ] = 8,
    stacks: Annotated[
        bool, typer.Option("--stacks", help="Show each call's Python stack.")
    ] = False,
    jobs: JobsOption = None,
    only: OnlyOption = None,
    scheduler: SchedulerOption = None,
    no_cache: NoCacheOption = False,
) -> None:
    """The raw entries side by side, one row per (group, seq), one column per rank.

    Rows line up by (group, collective sequence number), not by position in each buffer. With
    many ranks, ranks that recorded the same thing share a column.

    \b
    Example:
      frtrace show tests/fixtures/gloo/never_joins --pg 0 --ranks 0-3 --seq 10-14 --stacks
    """
    from frtrace.report.show import ShowOptions, render_show

    seq_range = _parse_ranks(seq, "--seq")
    options = ShowOptions(
        pg=pg,
        ranks=_parse_ranks(ranks, "--ranks"),
        seqs=seq_range,
        last=last,
        stacks=stacks,
    )
    with progress_display() as progress:
        dumps = _load(dump_path, dump_dir, jobs, only, scheduler, no_cache, progress)
        with progress.phase("render") as phase:
            phase.describe("the entries side by side")
            try:
                text = render_show(dumps, options)
            except FrtraceError as exc:
                raise _fail(exc) from None
    _print_load_problems(dumps.problems)
    _echo(text, nl=False)


@app.command()
def summary(
    dump_path: DirArgument = None,
    dump_dir: DirOption = None,
    jobs: JobsOption = None,
    only: OnlyOption = None,
    scheduler: SchedulerOption = None,
    no_cache: NoCacheOption = False,
) -> None:
    """List the dump files: rank, format, backend, entries, problems.

    \b
    Example:
      frtrace summary tests/fixtures/gloo/never_joins
    """
    from frtrace.load.summary import render_summary

    # (the files analyze reads besides the dumps: the same discovery's side files)
    _echo(render_summary(_load(dump_path, dump_dir, jobs, only, scheduler, no_cache)), nl=False)


@app.command()
def export(
    dump_path: DirArgument = None,
    dump_dir: DirOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Directory to write Parquet files to.")
    ] = None,
    jobs: JobsOption = None,
    only: OnlyOption = None,
    scheduler: SchedulerOption = None,
    no_cache: NoCacheOption = False,
) -> None:
    """Write the loaded tables (entries, stacks, groups, pg_status, files) as Parquet.

    \b
    Example:
      frtrace export tests/fixtures/gloo/never_joins -o tables/
      python -c "import pandas; print(pandas.read_parquet('tables/entries.parquet'))"
    """
    from frtrace.load.export import export_parquet

    if out is None or out == Path("-"):
        raise _fail(
            "export needs -o DIR: the directory to write the Parquet files to (one file per "
            "table, so not - for standard output)"
        )
    with progress_display() as progress:
        dumps = _load(dump_path, dump_dir, jobs, only, scheduler, no_cache, progress)
        with progress.phase("export") as phase:
            try:
                written = export_parquet(dumps, out)
            except FrtraceError as exc:
                raise _fail(exc) from None
            phase.describe(f"{len(written)} Parquet files, {sum(r for _, r in written):,} rows")
    _print_load_problems(dumps.problems)
    for path, rows in written:
        _echo(f"{path}  ({rows} rows)")
