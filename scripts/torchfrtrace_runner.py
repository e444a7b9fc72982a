"""Run PyTorch's own analyzer, ``torchfrtrace``, on a dump directory and record what it did.

torchfrtrace (``torch.distributed.flight_recorder.fr_trace``) is our baseline. This module runs it
in a child process, so its memory use, its crashes and its ``sys.exit`` calls stay out of the
caller, and returns a ``TorchFRResult``: wall time, peak RSS, exit code, whether it crashed (and
the exception line), and a best-effort parse of the ranks it blames. The output format it parses
is described in ``docs/torchfrtrace.md``; everything torchfrtrace reports goes to **stderr** via
``logging``, and it exits 0 whether or not it found a problem.

Peak RSS comes from ``os.wait4``: the kernel's ``ru_maxrss`` high-water mark for exactly that
child, read when we reap it. The alternatives are worse here:

- ``resource.getrusage(RUSAGE_CHILDREN)`` in the calling process is the maximum over *every*
  child it has ever reaped (pytest workers, earlier benchmark runs), so it needs a fresh
  intermediate interpreter per run, which also has to forward timeouts and kills.
- Polling ``/proc/<pid>/status`` samples ``VmRSS`` at intervals, misses short peaks, burns CPU
  while the child runs, and ``VmHWM`` is gone the moment the child exits.

``wait4`` needs no extra process and costs nothing while the child runs. It is not exact: Linux
starts a child's high-water mark at its parent's resident size (carried through fork and exec),
so the number is at least the caller's size at the spawn; run this from a small process when
the peak matters (``scripts/bench.py`` measures each process group's resident size instead).

We wait with ``waitid(WNOWAIT)`` first so the timeout thread can never signal a reused process
group: the child stays a zombie (its pid and pgid reserved) until we have marked it finished.

Not part of the ``frtrace`` package on purpose: it must not import it.

Usage::

    python scripts/torchfrtrace_runner.py DUMP_DIR [--prefix rank_] [--timeout 600] [--json]
        [--stage] [-- EXTRA_TORCHFRTRACE_ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "TORCHFRTRACE_MODULE",
    "TorchFRFinding",
    "TorchFRResult",
    "parse_torchfrtrace_output",
    "run_torchfrtrace",
]

TORCHFRTRACE_MODULE = "torch.distributed.flight_recorder.fr_trace"
"""The module behind the ``torchfrtrace`` console script; run with ``python -m``."""

# Finding kinds, in the words of torchfrtrace's own messages (builder.py / utils.py, torch 2.13).
MISSING_RANKS = "missing_ranks"
"""'Not all ranks joining collective, sequence number: N' + 'missing ranks: {..}'."""
MISMATCH = "mismatch"
"""'Collective sequence number: N has errors' + 'error msg: Culprit rank R; Error type: T, ...'."""
ALLTOALL_SIZE = "alltoall_size_mismatch"
"""'Input/output mismatch in the collective sequence number: N': no rank is named."""
UNDECIDED = "undecided_missing_dumps"
"""'We cannot decide ... missed FR dumps from ranks ({..})' (--allow-incomplete-ranks only)."""
NO_ERRORS = "no_errors"
"""'No errors found for this collective entry, ...': printed for collectives after a mismatch."""
COALESCED_MISMATCH = "coalesced_mismatch"
"""A 'MISMATCH' table for a coalesced (batched P2P) group: no rank is named."""
ABORTED = "aborted"
"""'Too many mismatches for process_group G: DESC aborting': analysis stopped for all groups."""

BLAMING_KINDS = frozenset({MISSING_RANKS, MISMATCH})
"""Finding kinds whose ranks count as blamed: torchfrtrace names them as missing or culprit."""

_HEADER_PATTERNS = (
    (MISSING_RANKS, re.compile(r"^Not all ranks joining collective, sequence number: (-?\d+)")),
    (MISMATCH, re.compile(r"^Collective sequence number: (-?\d+) has errors")),
    (ALLTOALL_SIZE, re.compile(r"^Input/output mismatch in the collective sequence number: (\d+)")),
)
_GROUP = re.compile(r"^group info: (.*)$")
_COLLECTIVE = re.compile(r"^collective: (.*)$")
_MISSING = re.compile(r"^missing ranks: \{(.*)\}$")
_ERROR_MSG = re.compile(r"^error msg: (.*)$")
_CULPRIT = re.compile(r"Culprit rank (-?\d+); Error type: (\w+)")
_UNDECIDED = re.compile(r"^We cannot decide what's wrong .* FR dumps from ranks \(\{(.*)\}\)")
_NO_ERRORS = re.compile(r"^No errors found for this collective entry")
_ABORTED = re.compile(r"^Too many mismatches for process_group (\S+): (.*) aborting$")
_MISMATCH_TABLE = re.compile(r"^MISMATCH\s*$")
_TRACEBACK = "Traceback (most recent call last):"


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchFRFinding:
    """One report block that torchfrtrace printed."""

    kind: str
    """One of the kind constants above (``MISSING_RANKS``, ``MISMATCH``, ...)."""
    group: str | None = None
    """Its 'group info' line: ``<pg name>`` or ``<pg name>:<desc>``; for ``ABORTED`` the desc."""
    seq_id: int | None = None
    """The collective_seq_id it printed (for P2P entries this is *not* the p2p_seq_id)."""
    collective: str | None = None
    """The reference rank's profiling name, e.g. ``nccl:all_reduce``."""
    ranks: tuple[int, ...] = ()
    """Missing ranks, culprit ranks, or ranks without dumps, depending on ``kind``; sorted."""
    error_types: tuple[str, ...] = ()
    """For ``MISMATCH``: ``MatchState`` names per culprit, e.g. ``COLLECTIVE_TYPE_MISMATCH``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchFRResult:
    """What one torchfrtrace run did."""

    wall_s: float
    """Seconds from spawning the child to its exit (includes interpreter start, torch import)."""
    peak_rss_mb: float | None
    """Child's peak resident set size in MiB (``ru_maxrss`` from ``wait4``); None if unavailable."""
    returncode: int
    """Exit status; negative = killed by that signal (``-9`` after a timeout)."""
    crashed: bool
    """True if it died with a Python traceback or was killed by a signal we did not send."""
    error_line: str | None
    """Last line of the traceback (``AssertionError: ...``), argparse's error line, or a note on
    the signal or timeout; None when it exited 0."""
    blamed_ranks: tuple[int, ...]
    """Sorted union of the ranks it reported as missing or as culprits, over all groups."""
    raw_output: str
    """Its stdout and stderr, interleaved as written (both go to one file)."""
    timed_out: bool = False
    """True if we killed it at ``timeout_s``."""
    findings: tuple[TorchFRFinding, ...] = ()
    """Every report block parsed from ``raw_output``, in output order."""
    command: tuple[str, ...] = ()
    """The argv that was run."""
    dump_dir: str = ""
    """The directory torchfrtrace was pointed at (a staging directory when ``stage=True``)."""

    @property
    def aborted(self) -> bool:
        """It hit ``--mismatch_cap`` and stopped analysing every group."""
        return any(f.kind == ABORTED for f in self.findings)

    @property
    def blamed_by_group(self) -> dict[str, tuple[int, ...]]:
        """Blamed ranks per 'group info' string (``"?"`` when the block named no group)."""
        acc: dict[str, set[int]] = {}
        for f in self.findings:
            if f.kind in BLAMING_KINDS:
                acc.setdefault(f.group or "?", set()).update(f.ranks)
        return {g: tuple(sorted(r)) for g, r in acc.items()}

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict, with the derived ``aborted`` and ``blamed_by_group`` included."""
        out = asdict(self)
        out["aborted"] = self.aborted
        out["blamed_by_group"] = {g: list(r) for g, r in self.blamed_by_group.items()}
        return out


def _rank_set(text: str) -> tuple[int, ...]:
    """``'0, 3'`` (the inside of a printed Python set) → ``(0, 3)``."""
    return tuple(sorted(int(tok) for tok in re.findall(r"-?\d+", text)))


@dataclass(slots=True)
class _Block:
    kind: str
    seq_id: int
    group: str | None = None
    collective: str | None = None
    ranks: set[int] = field(default_factory=set)
    error_types: list[str] = field(default_factory=list)

    def freeze(self) -> TorchFRFinding:
        return TorchFRFinding(
            kind=self.kind,
            group=self.group,
            seq_id=self.seq_id,
            collective=self.collective,
            ranks=tuple(sorted(self.ranks)),
            error_types=tuple(self.error_types),
        )


def parse_torchfrtrace_output(text: str) -> tuple[TorchFRFinding, ...]:
    """Parse torchfrtrace's log output into findings (best effort, line based).

    A block starts at one of the three header messages and collects the 'group info',
    'collective', 'missing ranks' and 'error msg' lines that follow it; stack-trace lines are
    ignored. One-line messages (undecided, no errors, aborted, coalesced MISMATCH table) become
    findings of their own. Lines torchfrtrace did not write in a known shape are skipped.
    """
    findings: list[TorchFRFinding] = []
    block: _Block | None = None

    def close() -> None:
        nonlocal block
        if block is not None:
            findings.append(block.freeze())
            block = None

    for raw in text.splitlines():
        line = raw.strip()
        header = next(((kind, m) for kind, pat in _HEADER_PATTERNS if (m := pat.match(line))), None)
        if header is not None:
            close()
            block = _Block(kind=header[0], seq_id=int(header[1].group(1)))
            continue
        if line.startswith(_TRACEBACK):
            close()
            continue
        if block is not None:
            if (m := _GROUP.match(line)) and block.group is None:
                block.group = m.group(1)
                continue
            if (m := _COLLECTIVE.match(line)) and block.collective is None:
                block.collective = m.group(1)
                continue
            if m := _MISSING.match(line):
                block.ranks.update(_rank_set(m.group(1)))
                continue
            if m := _ERROR_MSG.match(line):
                for rank, err in _CULPRIT.findall(m.group(1)):
                    block.ranks.add(int(rank))
                    block.error_types.append(err)
                continue
        if m := _UNDECIDED.match(line):
            close()
            findings.append(TorchFRFinding(kind=UNDECIDED, ranks=_rank_set(m.group(1))))
        elif _NO_ERRORS.match(line):
            close()
            findings.append(TorchFRFinding(kind=NO_ERRORS))
        elif m := _ABORTED.match(line):
            close()
            findings.append(TorchFRFinding(kind=ABORTED, group=m.group(2)))
        elif _MISMATCH_TABLE.match(line):
            close()
            findings.append(TorchFRFinding(kind=COALESCED_MISMATCH))
    close()
    return tuple(findings)


def _error_line(output: str) -> str | None:
    """The last non-empty line after the last traceback header, else the last non-empty line."""
    tail = output.rsplit(_TRACEBACK, 1)[-1]
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1] if lines else None


@contextmanager
def _staged(dump_dir: Path, prefix: str) -> Iterator[Path]:
    """A temporary directory with symlinks to the files named exactly ``<prefix><int>``.

    torchfrtrace walks subdirectories and chokes on siblings such as ``rank_0.json``; staging
    lets a benchmark measure its analysis on the same pickles our analyzer reads.
    """
    pattern = re.compile(re.escape(prefix) + r"\d+")
    with tempfile.TemporaryDirectory(prefix="torchfrtrace-stage-") as tmp:
        staged = Path(tmp)
        for path in sorted(dump_dir.iterdir()):
            if path.is_file() and pattern.fullmatch(path.name):
                (staged / path.name).symlink_to(path.resolve())
        yield staged


def _run_child(
    argv: Sequence[str], timeout_s: float, output_path: Path
) -> tuple[int, float, float | None, bool]:
    """Run ``argv``, output to ``output_path`` → (returncode, wall_s, peak_rss_mb, timed_out)."""
    lock = threading.Lock()
    finished = False
    timed_out = False
    with output_path.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a timeout kills all of it
        )

    def kill() -> None:
        nonlocal timed_out
        with lock:
            if not finished:  # still running or a zombie: its pgid cannot have been reused
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        wall_s = time.perf_counter() - start
        with lock:
            finished = True
    finally:
        timer.cancel()
        if not finished:  # interrupted (e.g. KeyboardInterrupt): do not leave it running
            with lock:
                finished = True
                os.killpg(proc.pid, signal.SIGKILL)
    _, status, usage = os.wait4(proc.pid, 0)
    returncode = os.waitstatus_to_exitcode(status)
    proc.returncode = returncode  # reaped here; keep Popen from waiting again
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    peak_rss_mb = usage.ru_maxrss / scale if usage.ru_maxrss > 0 else None
    return returncode, wall_s, peak_rss_mb, timed_out


def run_torchfrtrace(
    dump_dir: Path,
    *,
    prefix: str | None = None,
    timeout_s: float = 600,
    extra_args: Sequence[str] = (),
    python: str | None = None,
    stage: bool = False,
) -> TorchFRResult:
    """Run torchfrtrace on ``dump_dir`` in a child process and summarise what happened.

    Args:
        dump_dir: Directory of per-rank dumps. torchfrtrace walks it recursively.
        prefix: File-name prefix before the rank (``rank_``, ``nccl_trace_rank_``); passed as
            ``--prefix``. Without it torchfrtrace infers one and fails unless exactly one
            ``<word chars><digits>`` prefix exists in the top directory.
        timeout_s: Kill the child (SIGKILL to its process group) after this many seconds.
        extra_args: More torchfrtrace arguments, e.g. ``("--allow-incomplete-ranks",)``.
        python: Interpreter to run it with (``sys.executable`` by default); it needs torch.
        stage: Point torchfrtrace at a temporary directory holding symlinks to only the files
            named ``<prefix><int>`` (requires ``prefix``), so JSON siblings and subdirectories
            do not crash it or leak into the analysis.

    Returns:
        A ``TorchFRResult``. Never raises for torchfrtrace's own failures; raises
        ``FileNotFoundError`` if ``dump_dir`` is not a directory and ``ValueError`` for
        ``stage`` without ``prefix``.
    """
    dump_dir = Path(dump_dir)
    if not dump_dir.is_dir():
        raise FileNotFoundError(f"dump directory {dump_dir} does not exist")
    if stage and not prefix:
        raise ValueError("stage=True needs prefix, e.g. prefix='rank_'")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")

    with tempfile.TemporaryDirectory(prefix="torchfrtrace-run-") as tmp:
        stage_cm = _staged(dump_dir, prefix) if stage and prefix else _as_is(dump_dir)
        with stage_cm as target:
            argv: list[str] = [python or sys.executable, "-m", TORCHFRTRACE_MODULE, str(target)]
            if prefix is not None:
                argv += ["--prefix", prefix]
            argv += list(extra_args)
            output_path = Path(tmp) / "output.txt"
            returncode, wall_s, peak_rss_mb, timed_out = _run_child(argv, timeout_s, output_path)
            output = output_path.read_text(encoding="utf-8", errors="replace")

    has_traceback = _TRACEBACK in output
    killed_by_other = returncode < 0 and not timed_out
    crashed = has_traceback or killed_by_other
    if timed_out:
        error_line: str | None = f"timed out after {timeout_s:g} s"
    elif has_traceback:
        error_line = _error_line(output)
    elif killed_by_other:
        error_line = f"killed by signal {signal.Signals(-returncode).name}"
    elif returncode != 0:
        error_line = _error_line(output)
    else:
        error_line = None

    findings = parse_torchfrtrace_output(output)
    blamed = sorted({r for f in findings if f.kind in BLAMING_KINDS for r in f.ranks})
    return TorchFRResult(
        wall_s=wall_s,
        peak_rss_mb=peak_rss_mb,
        returncode=returncode,
        crashed=crashed,
        error_line=error_line,
        blamed_ranks=tuple(blamed),
        raw_output=output,
        timed_out=timed_out,
        findings=findings,
        command=tuple(argv),
        dump_dir=str(target),
    )


@contextmanager
def _as_is(dump_dir: Path) -> Iterator[Path]:
    yield dump_dir


def _summary(result: TorchFRResult) -> str:
    lines = [
        f"returncode   {result.returncode}"
        + (" (timed out)" if result.timed_out else "")
        + (" (crashed)" if result.crashed else ""),
        f"wall         {result.wall_s:.2f} s",
        "peak RSS     "
        + (f"{result.peak_rss_mb:.0f} MiB" if result.peak_rss_mb is not None else "n/a"),
        f"error        {result.error_line or '-'}",
        f"blamed       {list(result.blamed_ranks)}" + ("  (aborted)" if result.aborted else ""),
    ]
    for group, ranks in result.blamed_by_group.items():
        lines.append(f"  {group}: {list(ranks)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: run torchfrtrace once and print a summary (or JSON). Exit 0 unless the run failed."""
    parser = argparse.ArgumentParser(
        description="Run torchfrtrace on a Flight Recorder dump directory in a subprocess.",
        epilog="Arguments after `--` go to torchfrtrace, e.g. -- --allow-incomplete-ranks",
    )
    parser.add_argument("dump_dir", type=Path)
    parser.add_argument("--prefix", default=None, help="file-name prefix before the rank")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--python", default=None, help="interpreter with torch installed")
    parser.add_argument("--stage", action="store_true", help="show it only <prefix><int> files")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--show-output", action="store_true", help="also print its raw output")
    raw = list(sys.argv[1:] if argv is None else argv)
    split = raw.index("--") if "--" in raw else len(raw)
    args = parser.parse_args(raw[:split])
    extra = raw[split + 1 :]

    result = run_torchfrtrace(
        args.dump_dir,
        prefix=args.prefix,
        timeout_s=args.timeout,
        extra_args=extra,
        python=args.python,
        stage=args.stage,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        if args.show_output:
            print(result.raw_output, end="" if result.raw_output.endswith("\n") else "\n")
        print(_summary(result))
    return 1 if (result.crashed or result.timed_out) else 0


if __name__ == "__main__":
    raise SystemExit(main())
