"""The ``frtrace`` command: flags -> one library call -> a renderer -> an exit code.

Exit codes (``frtrace.gate.exitcodes``): 0 no problem found, 1 a problem found (or, without
``--allow-partial``, ranks without a dump; for ``check``: the analysis differs from the
expectation), 2 the input cannot be analysed or the command line is wrong. Every error is one
line on stderr, ``error: ...``; never a traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from frtrace.base.files import write_out_file
from frtrace.base.heap import before_numpy, collect_less_often, give_large_blocks_back
from frtrace.base.printable import printable
from frtrace.cli.leave import leave
from frtrace.cli.params import (
    AttemptOption,
    DirArgument,
    DirOption,
    Format,
    JobsOption,
    NoCacheOption,
    OneLineErrors,
    OnlyOption,
    PgOption,
    RanksOption,
    SchedulerOption,
    dump_source,
    end_progress,
    progress_display,
    renderer,
    unexpected,
)
from frtrace.errors import FrtraceError, InputError
from frtrace.gate.exitcodes import EXIT_INPUT, EXIT_OK, EXIT_PROBLEM

if TYPE_CHECKING:
    from frtrace.base.progress import Progress
    from frtrace.diagnosis_cache import Diagnosis
    from frtrace.incident.problems import LoadProblem
    from frtrace.load.dumpset import DumpSet
    from frtrace.model import Report

__all__ = ["app", "main"]

app = typer.Typer(
    cls=OneLineErrors,  # usage errors are one line, like every other error
    no_args_is_help=True,
    pretty_exceptions_enable=False,  # a crash must never print dump contents as locals
    add_completion=False,
    rich_markup_mode=None,  # plain help: rewrapped to the terminal, examples kept as written
    context_settings={"help_option_names": ["-h", "--help"]},  # (every command inherits it)
    help="Which rank hung the job, and why: analyse PyTorch Flight Recorder dumps.\n\n"
    "Every command's -h ends with examples that run as written from the root of a checkout of "
    "the frtrace repository (tests/fixtures holds real dumps of hung jobs).\n\n"
    "\b\nExample:\n"
    "  frtrace analyze tests/fixtures/gloo/never_joins     # the diagnosis; exit 1: a hang\n"
    "  frtrace env --dir /shared/fr_dumps                  # how to make a job dump",
)


def _echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """typer.echo, with control characters from dumps shown as escapes (see printable)."""
    typer.echo(printable(text), err=err, nl=nl)


def _fail(message: object) -> typer.Exit:
    end_progress()  # (a terminal's live display would draw over the line)
    _echo(f"error: {message}", err=True)
    return typer.Exit(code=EXIT_INPUT)


def _print_load_problems(problems: Sequence[LoadProblem]) -> None:
    for problem in problems:
        prefix = "error" if problem.fatal else "warning"
        _echo(f"{prefix}: {problem.message}", err=True)


def _parse_ranks(text: str | None, flag: str) -> tuple[int, ...] | None:
    from frtrace.base.ranges import parse_ranks

    if text is None:
        return None
    try:
        ranks = parse_ranks(text)
    except ValueError as exc:
        raise _fail(f"{flag}: {exc}") from None
    if not ranks:
        raise _fail(f"{flag}: give at least one rank, e.g. {flag} 0-7,12")
    return ranks


def _load(
    path: Path | None,
    option: Path | None,
    jobs: int | None,
    only: str | None,
    scheduler: str | None = None,
    no_cache: bool = False,
    progress: Progress | None = None,
) -> DumpSet:
    """The dump set given as DIR or -d DIR (a directory or an archive), from the cache of an
    earlier run where the files are unchanged (not with --no-cache). ``progress``: the
    command's phases, where it has more than loading (else shown until loaded)."""
    from frtrace.load.tables import load_dumps

    with contextlib.ExitStack() as stack:
        if progress is None:
            progress = stack.enter_context(progress_display())
        try:
            return load_dumps(
                dump_source(path, option),
                jobs=jobs,
                progress=progress,
                only=only,
                scheduler=scheduler,
                cache=not no_cache,
            )
        except FrtraceError as exc:
            raise _fail(exc) from None


def _analyze(dumps: DumpSet) -> Report:
    from frtrace.pipeline import analyze_loaded

    try:
        return analyze_loaded(dumps)
    except FrtraceError as exc:
        raise _fail(exc) from None


def _diagnose(
    path: Path | None,
    option: Path | None,
    jobs: int | None,
    only: str | None,
    scheduler: str | None = None,
    no_cache: bool = False,
    progress: Progress | bool = True,
    attempt: int | None = None,
) -> Diagnosis:
    """The report and load problems of DIR or -d DIR: from the cache of an earlier run on the
    same, unchanged files (no dump or table is read then), else loaded, diagnosed and stored
    (not with --no-cache; archives are not cached)."""
    from frtrace.pipeline import diagnose_source

    with contextlib.ExitStack() as stack:
        if progress is True:
            progress = stack.enter_context(progress_display())
        try:
            return diagnose_source(
                dump_source(path, option),
                jobs=jobs,
                only=only,
                scheduler=scheduler,
                cache=not no_cache,
                progress=progress,
                attempt=attempt,
            )
        except FrtraceError as exc:
            raise _fail(exc) from None


def _write(path: Path, text: str) -> None:  # (never through another user's link: outpaths)
    try:
        write_out_file(path, printable(text).encode("utf-8"), "the report")
    except FrtraceError as exc:
        raise _fail(exc) from None


# long: a typer command declares each option, with its help, in its signature
@app.command()
def analyze(
    dump_path: DirArgument = None,
    dump_dir: DirOption = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.TEXT,
    pg: PgOption = None,
    ranks: RanksOption = None,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Accept ranks without a dump: the exit code is then the analysis' alone "
            "(without it, missing dumps make it 1).",
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the report to this file (-: standard output).",
            dir_okay=False,
            allow_dash=True,
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Nothing on stderr (no warnings, no progress); with the text format, print "
            "only the headline line.",
        ),
    ] = False,
    jobs: JobsOption = None,
    only: OnlyOption = None,
    scheduler: SchedulerOption = None,
    no_cache: NoCacheOption = False,
    attempt: AttemptOption = None,
) -> None:
    """Name the rank(s) that hung or desynchronised the job, and why.

    DIR holds one Flight Recorder dump per rank (as torch names them: comm_lib_trace_rank_0,
    rank_0.json...), or is a .tar.gz or .zip of them. The whole job is always analysed; --pg
    and --ranks only choose what is shown. Exit code 0: no problem found; 1: a hang, a desync,
    or ranks without a dump; 2: the input cannot be analysed.

    \b
    Example:
      frtrace analyze tests/fixtures/gloo/never_joins                              # exit 1: a hang
      frtrace analyze tests/fixtures/gloo/mesh_stall --format html -o report.html  # exit 1
      frtrace analyze tests/fixtures/gloo/mesh_stall --pg 2 --ranks 4-7 -f json    # exit 1
      frtrace analyze tests/fixtures/gloo/healthy -q                               # exit 0: healthy
    """
    from frtrace.base.ranges import format_ranks
    from frtrace.gate.exitcodes import analysis_exit_code, incomplete_ranks
    from frtrace.report.common import headline
    from frtrace.report.select import Selection, select

    selection = Selection(pg=pg, ranks=_parse_ranks(ranks, "--ranks"))
    with progress_display(not quiet) as progress:  # (-q: none)
        got = _diagnose(dump_path, dump_dir, jobs, only, scheduler, no_cache, progress, attempt)
        report = got.report
        try:
            shown = select(report, selection)
        except InputError as exc:
            raise _fail(exc) from None
        with progress.phase("render") as phase:
            phase.describe(f"the {fmt.value} report")
            text = renderer(fmt)(shown, selection)
    if not quiet:
        _print_load_problems(got.problems)
        for problem in report.stacks.problems if report.stacks else ():
            _echo(f"warning: {problem}", err=True)
    if output == Path("-"):
        output = None  # (-o -: standard output, as without -o)
    if output is not None:
        _write(output, text)
    if output is None and not (quiet and fmt == Format.TEXT):
        _echo(text, nl=False)  # (-q -f json: the JSON, for a script; nothing on stderr)
    else:
        _echo(headline(report))
        if output is not None and not quiet:
            _echo(f"report written to {output}")
    absent = incomplete_ranks(report)
    if absent and not allow_partial and not quiet:
        _echo(
            f"frtrace: no readable dump for {len(absent)} of {report.world_size} ranks "
            f"({format_ranks(absent)}): exit code 1 for that alone; pass --allow-partial to "
            "accept a partial set",
            err=True,
        )
    raise typer.Exit(code=analysis_exit_code(report, allow_partial=allow_partial))


# long: a typer command declares each option, with its help, in its signature
@app.command()
def check(
    dump_path: DirArgument = None,
    dump_dir: DirOption = None,
    expect: Annotated[
        Path | None,
        typer.Option(
            "--expect", "-e", help="Expectation file (JSON, as --write makes it).", dir_okay=False
        ),
    ] = None,
    expect_culprits: Annotated[
        str | None,
        typer.Option("--expect-culprits", help="Exactly these culprit ranks, e.g. 5 or 4-5; none."),
    ] = None,
    expect_healthy: Annotated[
        bool, typer.Option("--expect-healthy", help="No problem found (stragglers allowed).")
    ] = False,
    expect_verdict: Annotated[
        str | None, typer.Option("--expect-verdict", help="This verdict, e.g. hang.")
    ] = None,
    expect_stragglers: Annotated[
        str | None, typer.Option("--expect-stragglers", help="Exactly these straggler ranks.")
    ] = None,
    write: Annotated[
        bool,
        typer.Option(
            "--write", help="Write --expect FILE from this analysis instead (review, then commit)."
        ),
    ] = False,
    jobs: JobsOption = None,
    only: OnlyOption = None,
    scheduler: SchedulerOption = None,
    no_cache: NoCacheOption = False,
) -> None:
    """CI gate: exit 0 when the analysis matches the expectation, 1 with the differences.

    Keep the dumps of past incidents with an expectation next to them; the check fails the day
    your training code or an frtrace upgrade changes the answer.

    \b
    Example:
      frtrace check tests/fixtures/gloo/mesh_stall --expect expect.json --write   # record it
      frtrace check tests/fixtures/gloo/mesh_stall --expect expect.json           # exit 0: same
      frtrace check tests/fixtures/gloo/mesh_stall --expect-culprits 5            # exit 0
      frtrace check tests/fixtures/gloo/mesh_stall --expect-healthy   # exit 1: it is a hang
    """
    from frtrace.base.ranges import format_ranks
    from frtrace.gate.check import (
        compare,
        expectation_from_flags,
        expectation_from_report,
        load_expectation,
    )
    from frtrace.report.json import dumps_compact

    try:
        flags = expectation_from_flags(
            culprits=expect_culprits,
            healthy=expect_healthy,
            verdict=expect_verdict,
            stragglers=expect_stragglers,
        )
    except InputError as exc:
        raise _fail(exc) from None
    if write:
        if expect is None:
            raise _fail("--write needs --expect FILE: the file to write")
        report = _diagnose(dump_path, dump_dir, jobs, only, scheduler, no_cache).report
        _write(expect, dumps_compact(expectation_from_report(report)) + "\n")
        _echo(f"wrote {expect}: review it, remove what you do not want pinned, commit it")
        raise typer.Exit(code=EXIT_OK)
    wanted: dict[str, object] = {}
    if expect is not None:
        try:
            wanted.update(load_expectation(expect))
        except InputError as exc:
            raise _fail(exc) from None
    wanted.update(flags)
    if not wanted:
        raise _fail(
            "nothing to check: give --expect FILE or --expect-culprits/--expect-healthy/"
            "--expect-verdict/--expect-stragglers"
        )
    report = _diagnose(dump_path, dump_dir, jobs, only, scheduler, no_cache).report
    diffs = compare(report, wanted)
    culprits = format_ranks(report.culprit_ranks) if report.culprit_ranks else "none"
    if not diffs:
        _echo(f"check passed: verdict {report.verdict}, culprit ranks {culprits}")
        raise typer.Exit(code=EXIT_OK)
    _echo(f"check failed: {len(diffs)} difference{'s' if len(diffs) > 1 else ''}")
    for d in diffs:
        _echo(f"  {d}")
    from frtrace.report.wording import summary

    for f in report.findings[:5]:
        _echo(f"  [{f.code}] {summary(f)}")
    raise typer.Exit(code=EXIT_PROBLEM)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the JSON report (frtrace analyze --format json).

    Validate a report against the schema of the frtrace that wrote it, with any JSON Schema
    (draft 2020-12) validator, e.g. check-jsonschema --schemafile report.schema.json report.json

    \b
    Example:
      frtrace schema > report.schema.json
      frtrace analyze tests/fixtures/gloo/healthy -f json > report.json
    """
    from frtrace.report.json_schema import schema_text

    _echo(schema_text(), nl=False)


def run() -> None:
    """The command in this process, ending with ``SystemExit`` (tests, embedders)."""
    give_large_blocks_back()
    collect_less_often()
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:  # (OneLineErrors catches these first; this is the last net)
        unexpected(exc)
        sys.exit(EXIT_INPUT)


def main() -> NoReturn:
    """Console-script entry point: ``run``, then the process ends without its teardown."""
    before_numpy()
    try:
        run()
    except SystemExit as done:
        leave(done.code)
    leave(EXIT_OK)
