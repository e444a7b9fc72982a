"""The stall watch's clock (:mod:`frtrace.job.watch`): when an op is a stall, when the stall is
confirmed, what the op was, and when a reported stall ended.

* **A stall**: the same op of a group pending for the threshold (``watch`` seconds), from
  successive readings of torch's recorder status (:class:`StallClock`).
* **Confirmed** (:class:`Confirmation`): at the threshold the watch takes a first look (the ops
  pending, this rank's main-thread stack); it raises the alarm only if a second look
  ``confirm`` seconds later shows the same ops pending and the same stack. A stack that moved
  (the main thread ran on beside an async op) starts the window again, at most
  :data:`MAX_RESTARTS` times: a main thread that never settles cannot keep a real hang quiet.
  ``confirm`` defaults to :data:`CONFIRM_FRACTION` of the threshold; ``$FRTRACE_WATCH_CONFIRM``
  or ``confirm=`` sets it, 0 raises at the first look.
* **What the op was** (:func:`pending_op`): its name and its group's timeout, from the pending
  entry of torch's recorder (read once, when a stall is confirmed): the report and the log line
  say the threshold and the time pending against the group's timeout.
* **Ended**: the op a report was written about completed (:meth:`StallContext.ended_by`): a slow
  step, not a hang; the watch says so once and the report is marked superseded.

Imports neither torch (until a stall is confirmed) nor the analysis.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONFIRM_ENV",
    "CONFIRM_FRACTION",
    "MAX_RESTARTS",
    "WATCH_ENV",
    "Confirmation",
    "PendingOp",
    "PgKey",
    "Stall",
    "StallClock",
    "StallContext",
    "main_stack",
    "parse_seconds",
    "parse_watch",
    "pending_op",
    "resolve",
    "resolve_confirm",
]

WATCH_ENV = "FRTRACE_WATCH"  # seconds; enable() reads it when watch= is not given
CONFIRM_ENV = "FRTRACE_WATCH_CONFIRM"  # seconds between the two looks; default below
CONFIRM_FRACTION = 0.5  # of the threshold: FRTRACE_WATCH=20 looks again 10 s later
MAX_RESTARTS = 2  # a main thread that moved starts the confirmation window again this often

PgKey = tuple[str, str]  # (recorder: "fr" or "nccl", process group id)
Frames = tuple[tuple[str, str, int], ...]  # (file, function, line), innermost first


def parse_seconds(value: object, *, source: str) -> float | None:
    """Seconds from a keyword or the environment; None for empty. Raises ValueError naming
    ``source`` for anything but a finite number."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{source}={value!r} is not a number of seconds (e.g. 300)") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{source}={value!r} is not a number of seconds (e.g. 300)")
    return seconds


def parse_watch(value: object, *, source: str = WATCH_ENV) -> float | None:
    """Seconds to watch for, from ``watch=`` or the environment; None (off) for empty, 0 or
    less. Raises ValueError naming ``source`` for anything else."""
    seconds = parse_seconds(value, source=source)
    return seconds if seconds is not None and seconds > 0 else None


def resolve(watch: object) -> float | None:
    """The seconds to watch: ``watch=`` when given (ValueError for nonsense), else
    ``$FRTRACE_WATCH`` (nonsense there is one warning and no watch: the job runs on)."""
    if watch is not None:
        return parse_watch(watch, source="watch")
    try:
        return parse_watch(os.environ.get(WATCH_ENV))
    except ValueError as exc:
        warnings.warn(f"frtrace.recorder: {exc}: not watching", RuntimeWarning, stacklevel=3)
        return None


def resolve_confirm(confirm: object, watch_s: float | None) -> float:
    """The confirmation window: ``confirm=`` when given (ValueError for nonsense), else
    ``$FRTRACE_WATCH_CONFIRM`` (nonsense there is one warning and the default), else
    :data:`CONFIRM_FRACTION` of the threshold; never below 0."""
    default = CONFIRM_FRACTION * (watch_s or 0.0)
    if confirm is not None:
        seconds = parse_seconds(confirm, source="confirm")
    else:
        try:
            seconds = parse_seconds(os.environ.get(CONFIRM_ENV), source=CONFIRM_ENV)
        except ValueError as exc:
            warnings.warn(f"frtrace.recorder: {exc}: {default:g} s", RuntimeWarning, stacklevel=3)
            seconds = None
    return default if seconds is None else max(seconds, 0.0)


@dataclass(frozen=True, slots=True)
class Stall:
    """One op of this rank pending past ``watch``: which group, which op, since when."""

    key: PgKey
    completed: int  # the op pending is the one after this
    pending_s: float

    def describe(self) -> str:
        recorder, pg = self.key
        which = "NCCL" if recorder == "nccl" else "process group"
        return f"op #{self.completed + 1} of {which} {pg} pending for {self.pending_s:.0f} s"


@dataclass(slots=True)
class StallClock:
    """Since when each group's oldest pending op has been pending, from successive readings of
    ``{(recorder, pg): (last_enqueued, last_completed)}``; ``covered`` ops never stall again."""

    watch_s: float
    since: dict[PgKey, tuple[int, float]] = field(default_factory=dict)  # -> (completed, t)
    covered: set[tuple[PgKey, int]] = field(default_factory=set)

    def update(self, status: dict[PgKey, tuple[int, int]], now: float) -> list[Stall]:
        for key, (enqueued, completed) in status.items():
            if enqueued > completed:
                seen = self.since.get(key)
                if seen is None or seen[0] != completed:
                    self.since[key] = (completed, now)
            else:
                self.since.pop(key, None)
        for key in [k for k in self.since if k not in status]:
            del self.since[key]
        return [
            Stall(key, completed, now - t)
            for key, (completed, t) in sorted(self.since.items())
            if now - t >= self.watch_s and (key, completed) not in self.covered
        ]

    def cover(self) -> None:
        """An alarm was raised: what is pending now is part of that stall."""
        self.covered.update((key, completed) for key, (completed, _) in self.since.items())

    def oldest(self, now: float) -> float:
        """Seconds the oldest pending op has been pending (0: none)."""
        return max((now - t for _, t in self.since.values()), default=0.0)


def main_stack() -> Frames:
    """This process's main thread where it is now: (file, function, line), innermost first."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    out: list[tuple[str, str, int]] = []
    while frame is not None and len(out) < 256:
        code = frame.f_code
        out.append((code.co_filename, code.co_qualname, frame.f_lineno or 0))
        frame = frame.f_back
    return tuple(out)


@dataclass(slots=True)
class Confirmation:
    """The second look: the stalls confirmed ``confirm_s`` after the first (see the module)."""

    confirm_s: float
    stack: Callable[[], object] = main_stack
    first: tuple[frozenset[tuple[PgKey, int]], object, float] | None = None  # (ops, stack, t)
    restarts: int = 0

    def check(self, stalls: list[Stall], now: float) -> list[Stall]:
        """The stalls confirmed now ([]: none, or not yet)."""
        ops = frozenset((s.key, s.completed) for s in stalls)
        if not ops or self.confirm_s <= 0:
            self.first, self.restarts = None, 0
            return stalls
        if self.first is None or not self.first[0] & ops:  # a stall new to the watch
            self.first, self.restarts = (ops, self.stack(), now), 0
            return []
        seen, stack, t = self.first
        if now - t < self.confirm_s:
            return []
        now_stack = self.stack()
        if now_stack != stack and self.restarts < MAX_RESTARTS:  # it moved: look again later
            self.first, self.restarts = (ops, now_stack, now), self.restarts + 1
            return []
        self.first, self.restarts = None, 0
        return [s for s in stalls if (s.key, s.completed) in seen]


@dataclass(frozen=True, slots=True)
class PendingOp:
    """The op a stall is about: its group, sequence number, name and the group's timeout, as
    torch's recorder has them (None where it has not)."""

    key: PgKey
    seq: int
    name: str | None = None  # "all_reduce"
    timeout_s: float | None = None

    def label(self) -> str:
        """``all_reduce #41 of pg 0`` (``op #41 of pg 0`` without its name)."""
        return f"{self.name or 'op'} #{self.seq} of pg {self.key[1]}"


def pending_op(stall: Stall) -> PendingOp:
    """The stalled op's name and timeout from the pending entry of torch's recorder (read
    once per confirmed stall; its seq and group alone where that cannot be read)."""
    op = PendingOp(stall.key, stall.completed + 1)
    if "torch.distributed" not in sys.modules:  # (never imports torch itself)
        return op
    with contextlib.suppress(Exception):
        from torch._C import _distributed_c10d

        c10d: Any = _distributed_c10d
        fn = c10d._dump_nccl_trace_json if stall.key[0] == "nccl" else c10d._dump_fr_trace_json
        doc = json.loads(fn(includeCollectives=True, onlyActive=True))
        for entry in doc.get("entries") or ():
            group = entry.get("process_group") or [None]
            pg_of = {str(entry.get("pg_id")), str(group[0])}
            if stall.key[1] in pg_of and entry.get("collective_seq_id") == op.seq:
                name = str(entry.get("profiling_name") or "").rpartition(":")[2] or None
                timeout_ms = entry.get("timeout_ms")
                timeout = float(timeout_ms) / 1000 if isinstance(timeout_ms, int) else None
                return PendingOp(stall.key, op.seq, name, timeout)
    return op


@dataclass(frozen=True, slots=True)
class StallContext:
    """What the watch knew when it raised the alarm, for the report and the log line: the
    threshold, the confirmation window, how long the op had been pending, which rank saw it,
    the op; ``ended_after_s`` once the op completed (the report then is superseded; at most
    that, where the watch was busy writing the report when it did)."""

    threshold_s: float
    confirm_s: float
    pending_s: float
    rank: int
    op: PendingOp
    ended_after_s: float | None = None
    at_most: bool = False  # ended_after_s is a bound: the op was not looked at meanwhile

    def ended_by(self, status: dict[PgKey, tuple[int, int]]) -> bool | None:
        """Whether the op completed in ``status``: True, False (still pending), None (its group
        is gone: nobody can tell)."""
        reading = status.get(self.op.key)
        return None if reading is None else reading[1] >= self.op.seq
