"""``frtrace collect`` and ``frtrace compare``: the commands for a job that is hung right now.

Registered on :data:`frtrace.cli.app` (kept in their own module so the CLI stays readable);
the helpers they share with the other commands (``_echo``, ``_fail``, the analysis) come
from :mod:`frtrace.cli`, imported when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from frtrace.gate.exitcodes import EXIT_OK, EXIT_PROBLEM

if TYPE_CHECKING:
    from frtrace.base.progress import Phase
    from frtrace.collect.snapshots import Snapshot
    from frtrace.detail.motion import SnapshotComparison

__all__ = ["collect", "compare"]


# long: a typer command declares each option, with its help, in its signature
def collect(
    out_dir: Annotated[
        Path, typer.Argument(help="Directory to collect into (created).", file_okay=False)
    ],
    no_analyze: Annotated[
        bool,
        typer.Option(
            "--no-analyze", help="Only collect (run it on every host, then analyse once)."
        ),
    ] = False,
    twice: Annotated[
        float | None,
        typer.Option(
            "--twice",
            help="Take two snapshots N seconds apart (DIR/snap1, DIR/snap2) and say which "
            "ranks moved: stuck or slow.",
            min=0.5,
        ),
    ] = None,
    env_match_items: Annotated[
        list[str] | None,
        typer.Option("--env", help="Only processes with this variable, e.g. MASTER_PORT=29500."),
    ] = None,
    pyspy: Annotated[
        bool, typer.Option("--pyspy/--no-pyspy", help="Take py-spy stacks (needs ptrace).")
    ] = True,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds to wait for each dump (with --store: for the store, and for all "
            "that is asked of each rank).",
            min=0.5,
        ),
    ] = 20.0,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="HOST:PORT",
            help="Every rank of the job, on every host, through torch's debug server: the "
            "job's MASTER_ADDR:MASTER_PORT (needs torch here, and "
            "torch.distributed.debug.start_debug_server() in the job).",
        ),
    ] = None,
    any_user: Annotated[
        bool,
        typer.Option(
            "--any-user",
            help="Also other users' rank processes (as root); by default only this user's. "
            "Their files are read only if they own them, never through a link.",
        ),
    ] = False,
) -> None:
    """Get every rank's dump and stacks from a live, hung job, without harming it.

    With --store HOST:PORT: every rank of the job, on every host, from torch's debug server
    (its registry in the job's TCPStore): py-spy's and faulthandler's stacks and the Flight
    Recorder dump of each rank, over HTTP, in parallel, each rank bounded by --timeout.

    Without it: the rank processes on this host (RANK in their environment): a py-spy dump of
    each, then a Flight Recorder dump asked of frtrace.recorder (through its socket), the
    NCCL debug pipe or torch's worker server. Only this user's processes unless --any-user.

    Either way: never a signal; written into DIR/<host>/ (files 0600, folders 0700), with
    frtrace-collect.json naming each rank's host, pid and dump time; a table of what was
    collected per rank and how; then DIR is analysed. See SECURITY.md.

    Example: frtrace collect incident --store node-0:29500   # every host, from anywhere

    Example: frtrace collect /shared/incident --no-analyze   # on every host, then analyze once
    """
    from frtrace.cli.app import _fail, analyze
    from frtrace.cli.params import progress_display
    from frtrace.collect.run import CollectOptions
    from frtrace.collect.snapshots import collect_incident, env_match
    from frtrace.errors import CollectError, SeveralJobs, UnsafePathError

    try:
        options = CollectOptions(
            dump_timeout_s=timeout,
            http_timeout_s=timeout,
            pyspy=pyspy,
            match_env=env_match(env_match_items or []) or None,
            any_user=any_user,
        )
        with progress_display() as shown, shown.phase("collect") as phase:
            phase.describe("the ranks' dumps and stacks")
            snaps = collect_incident(
                out_dir, options, store=store, twice_s=twice, each=_said(phase)
            )
    except (SeveralJobs, CollectError, UnsafePathError) as exc:
        raise _fail(exc) from None
    if no_analyze:
        _say_next_time(snaps[-1], analysed=False)
        raise typer.Exit(code=EXIT_OK)
    _echo_line("")
    if twice is not None:
        _compare_snapshots(snaps[0].folder, snaps[1].folder, None)
        _echo_line("")
    try:
        analyze(dump_dir=snaps[-1].folder, allow_partial=True)
    finally:  # (analyze ends with its exit code: the line comes after the report)
        _say_next_time(snaps[-1], analysed=True)


def _say_next_time(snapshot: Snapshot, *, analysed: bool) -> None:
    """No rank's dump was got: what the analysis rests on, and the one line that makes the
    next collect get every rank's dump (``collect.nextdump``)."""
    result = snapshot.result
    nt = result.next_time
    if nt is None:
        return
    stacks = any(rc.stacks for rc in result.ranks)
    _echo_line("")
    if stacks:
        said = "the report above rests on" if analysed else "the analysis will rest on"
        _echo_line(f"no rank's dump was got: {said} the ranks' Python stacks alone.")
    else:
        _echo_line("no rank's dump or Python stack was got.")
    if nt.line is None:
        _echo_line(f"this job ({nt.job}) cannot dump: {nt.needs}")
        return
    needs = f"; it needs {nt.needs}" if nt.needs else ""
    _echo_line(f"for every rank's dump next time ({nt.job}), run this {nt.where}{needs}:")
    _echo_line(f"  {nt.line}")


def _said(phase: Phase) -> Callable[[Snapshot], None]:
    """What a snapshot collected, said as it is taken: the progress line, what could not be
    collected, the table per rank, the other users' ranks left alone."""
    from tabulate import tabulate

    from frtrace.collect.run import render_table
    from frtrace.collect.snapshots import others_left_alone

    def say(snapshot: Snapshot) -> None:
        result = snapshot.result
        hosts = len({rc.host for rc in result.ranks})
        phase.describe(
            f"{len(result.ranks):,} rank{'s' if len(result.ranks) != 1 else ''} on "
            f"{hosts:,} host{'s' if hosts != 1 else ''}"
        )
        for problem in result.problems:
            _echo_line(f"not collected: {problem}")
        if not result.ranks:
            return
        headers = ("rank", "host", "pid", "Flight Recorder dump", "stacks", "not collected")
        _echo_line(f"collected into {snapshot.folder}:")
        _echo_line(tabulate(render_table(result), headers=headers))
        if result.others:
            _echo_line(others_left_alone(result))

    return say


def _echo_line(text: str) -> None:
    from frtrace.cli.app import _echo

    _echo(text)


def compare(
    first: Annotated[Path, typer.Argument(help="First snapshot's dump directory.")],
    second: Annotated[Path, typer.Argument(help="Second snapshot, taken seconds later.")],
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", help="Worker processes for loading (default: all CPUs)."),
    ] = None,
) -> None:
    """Stuck or slow: which ranks moved between two dump sets of one job.

    A rank that moved is slow, not stuck; a job where nothing moved is hung. Exit code 1
    when some rank did not move.

    Example: frtrace compare incident/snap1 incident/snap2
    """

    from frtrace.detail.motion import Motion

    result = _compare_snapshots(first, second, jobs)
    raise typer.Exit(code=EXIT_OK if result.verdict == Motion.PROGRESSING else EXIT_PROBLEM)


def _compare_snapshots(first: Path, second: Path, jobs: int | None) -> SnapshotComparison:
    from frtrace.analysis.compare import compare_snapshots
    from frtrace.cli.app import _analyze, _echo, _load
    from frtrace.cli.params import progress_display
    from frtrace.report.compare import render_comparison

    with progress_display() as progress:  # (one for both: the C reader's notice is said once)
        a_dumps = _load(first, None, jobs, None, progress=progress)
        b_dumps = _load(second, None, jobs, None, progress=progress)
        with progress.phase("analyse") as phase:
            phase.describe("both snapshots")
            a_report, b_report = _analyze(a_dumps), _analyze(b_dumps)
    result = compare_snapshots(a_dumps, a_report, b_dumps, b_report)
    _echo(render_comparison(result), nl=False)
    return result
