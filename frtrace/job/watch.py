"""The job watches itself: each rank's thread notices a stall, every rank dumps, one reports.

``frtrace.recorder.enable(DIR, watch=SECONDS)`` (or ``FRTRACE_WATCH=SECONDS`` in the job's
environment) starts it. Each check reads torch's own recorder state, the ``pg_status`` of
``_dump_fr_trace_json(includeCollectives=False)`` (``_dump_nccl_trace_json`` for NCCL): per
process group the last enqueued and the last completed collective, a few hundred bytes and
tens of microseconds, no entry is copied. An op is pending while ``last_enqueued >
last_completed``; a stall is the same op (the same ``last_completed``) pending for ``watch``
seconds. A rank stuck in host code has nothing pending: the ranks waiting on it raise the
alarm, and its own thread (which runs while its main thread sleeps, reads a file or waits on
a lock) dumps where its Python is.

The alarm goes through the job's own store, under keys this module owns
(``frtrace/watch/...``), on a connection of its own to the default group's TCPStore (another
store: the job's object, with quick requests only), so the job's own requests never queue
behind it:

* ``raise/<g>``: the rank that counts 1 there is the first to raise alarm ``g``, the leader;
* ``alarm``: the number of alarms raised; every thread reads it each check and dumps its
  buffer and its stacks sidecar when it grows (its pending ops are then covered: one alarm
  per stall);
* ``dumped/<g>``: the ranks that dumped for alarm ``g``. The leader waits for all (bounded),
  analyses the folder in-process and writes ``frtrace-report.txt``, ``.json`` and ``.html``
  (0600) next to the dumps (:mod:`frtrace.gate.watchreport`, imported then), logs one line and calls
  ``on_hang(report)``.

Only dumps and stacks sidecars written since the stall began are analysed (torch's own timeout
dumps, which use the same names in the same folder, included): a rank that could not dump
(its thread never ran: the GIL held in C) is a rank without a dump, and the report says so.
It never kills, signals or blocks the job; a store that is gone costs the coordination only
(a stalled rank still dumps its own files).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "REPORTER",
    "REPORT_STEM",
    "WATCH_ENV",
    "OnHang",
    "PgKey",
    "Stall",
    "StallClock",
    "Watch",
    "default_group",
    "parse_watch",
    "read_status",
    "resolve",
    "start",
]

WATCH_ENV = "FRTRACE_WATCH"  # seconds; enable() reads it when watch= is not given
REPORT_STEM = "frtrace-report"  # DIR/frtrace-report.txt, .json, .html
KEY_PREFIX = "frtrace/watch"
STORE_TIMEOUT_S = 10.0  # the watch's own store requests; never the job's
DUMP_WAIT_S = 30.0  # the leader waits this long at most for every rank's dump
RECONNECT_S = 30.0  # a store that failed is tried again after this
# What analyses the folder and writes the report, imported by name when the job stalled and
# never before: a healthy job loads nothing of the analysis (the job side imports none of it).
REPORTER = "frtrace.gate.watchreport"

PgKey = tuple[str, str]  # (recorder: "fr" or "nccl", process group id)
_DumpFn = Callable[[str, str], Path | None]  # (reason, detail) -> the dump, None if it failed
# on_hang: called once with the frtrace.model.Report (not named here: the job side imports
# nothing of the analysis, not even its types)
OnHang = Callable[[Any], object]


def parse_watch(value: object, *, source: str = WATCH_ENV) -> float | None:
    """Seconds to watch for, from ``watch=`` or the environment; None (off) for empty, 0 or
    less. Raises ValueError naming ``source`` for anything else."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{source}={value!r} is not a number of seconds (e.g. 300)") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{source}={value!r} is not a number of seconds (e.g. 300)")
    return seconds if seconds > 0 else None


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


def default_group() -> Any | None:
    """torch.distributed once the job imported it and set up its default group (the watch
    never imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def read_status(dist: Any) -> dict[PgKey, tuple[int, int]]:
    """Every group's (last enqueued, last completed) from torch's recorders, no entry copied."""
    from torch._C import _distributed_c10d

    c10d: Any = _distributed_c10d  # private API: its stubs lack the dump functions
    readers: list[tuple[str, Callable[..., Any]]] = [("fr", c10d._dump_fr_trace_json)]
    nccl = getattr(c10d, "_dump_nccl_trace_json", None)
    if nccl is not None and "nccl" in str(dist.get_backend()).lower():
        readers.append(("nccl", nccl))
    out: dict[PgKey, tuple[int, int]] = {}
    for name, fn in readers:
        doc = json.loads(fn(includeCollectives=False, onlyActive=True))
        for pg, status in (doc.get("pg_status") or {}).items():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                enqueued = int(status["last_enqueued_collective"])
                completed = int(status["last_completed_collective"])
                out[(name, str(pg))] = (enqueued, completed)
    return out


def _connect(dist: Any) -> Any:
    """A store connection of the watch's own: a new client of the default group's TCPStore
    (short timeout; the job's client and its lock untouched), else the job's store itself."""
    from torch.distributed import distributed_c10d

    store: Any = distributed_c10d._get_default_store()
    base = store
    while isinstance(base, dist.PrefixStore):
        base = base.underlying_store
    if isinstance(base, dist.TCPStore):
        return dist.TCPStore(
            base.host,
            base.port,
            is_master=False,
            timeout=timedelta(seconds=STORE_TIMEOUT_S),
            wait_for_workers=False,
        )
    return store


def _prefix() -> str:
    """Keys of this run: a torchrun restart (same store) starts afresh."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "")
    return f"{KEY_PREFIX}/{run}/{restart}" if run or restart else KEY_PREFIX


def _say(text: str) -> None:
    print(f"frtrace: {text}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class Watch:
    """The running watch thread; ``close()`` ends it (what it is doing finishes first)."""

    dump_dir: Path
    watch_s: float
    dump: _DumpFn
    on_hang: OnHang | None = None
    interval_s: float = 1.0
    dump_wait_s: float = DUMP_WAIT_S
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    fired: list[int] = field(default_factory=list)  # alarms this rank dumped for
    reports: list[Path] = field(default_factory=list)  # reports this rank wrote (leader)
    _clock: StallClock | None = None
    _store: Any = None
    _store_failed_at: float | None = None
    _seen: int | None = None  # the alarm count last read

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2)

    def run(self) -> None:
        self._clock = StallClock(self.watch_s)
        while not self.stop.wait(self.interval_s):
            dist = default_group()
            if dist is None:
                continue
            try:
                self.check(dist)
            except AttributeError as exc:  # a torch with no recorder status to read
                _say(f"watch: this torch has no recorder status ({exc}): not watching")
                return
            except Exception as exc:  # the watch must never take the job down
                _say(f"watch: {type(exc).__name__}: {exc}")

    def check(self, dist: Any) -> None:
        """One look: this rank's pending ops, then the job's alarm."""
        assert self._clock is not None
        now = time.monotonic()
        stalls = self._clock.update(read_status(dist), now)
        store = self._store_of(dist)
        count: int | None = None
        if store is not None:
            try:
                count = int(store.add(f"{_prefix()}/alarm", 0))
            except Exception as exc:
                self._lost_store(exc)
                store = None
        if store is None or count is None:
            if stalls:  # no store: this rank's own files at least
                self._clock.cover()
                self._dump(f"frtrace watch: {stalls[0].describe()} (no store: this rank only)")
            return
        if self._seen is None:
            self._seen = count  # alarms raised before this thread first looked are not ours
        if count > self._seen:
            self._seen = count
            self._alarm(dist, store, count, leader=False, detail="raised by another rank")
        elif stalls:
            self._raise(dist, store, stalls)

    def _raise(self, dist: Any, store: Any, stalls: list[Stall]) -> None:
        assert self._seen is not None
        g = self._seen + 1
        leader = int(store.add(f"{_prefix()}/raise/{g}", 1)) == 1
        if leader:
            store.add(f"{_prefix()}/alarm", 1)
        self._seen = g
        self._alarm(dist, store, g, leader=leader, detail=stalls[0].describe())

    def _alarm(self, dist: Any, store: Any, g: int, *, leader: bool, detail: str) -> None:
        assert self._clock is not None
        now = time.monotonic()
        since_wall = time.time() - max(self._clock.oldest(now), 0.0) - 2.0
        self._clock.cover()
        self.fired.append(g)
        self._dump(f"frtrace watch alarm {g}: {detail}")
        store.add(f"{_prefix()}/dumped/{g}", 1)
        if leader:
            self._lead(dist, store, g, since_wall)

    def _dump(self, detail: str) -> None:
        try:
            self.dump("frtrace watch", detail)
        except Exception as exc:
            _say(f"watch: could not dump: {type(exc).__name__}: {exc}")

    def _lead(self, dist: Any, store: Any, g: int, since_wall: float) -> None:
        world = int(dist.get_world_size())
        deadline = time.monotonic() + self.dump_wait_s
        dumped = 0
        while time.monotonic() < deadline and not self.stop.is_set():
            dumped = int(store.add(f"{_prefix()}/dumped/{g}", 0))
            if dumped >= world:
                break
            time.sleep(0.25)
        if dumped < world:
            _say(
                f"watch: {dumped} of {world} ranks dumped within {self.dump_wait_s:.0f} s; "
                "analysing those (the others are ranks without a dump)"
            )
        try:
            reporter: Any = importlib.import_module(REPORTER)  # the analysis, only now
            report, html = reporter.analyse_and_report(self.dump_dir, since_wall)
        except Exception as exc:
            _say(
                f"watch: the job stalled but the analysis failed ({type(exc).__name__}: {exc}); "
                f"run: frtrace analyze -d {self.dump_dir}"
            )
            return
        self.reports.append(html)
        _say(reporter.hang_line(report, html))
        if self.on_hang is not None:
            try:
                self.on_hang(report)
            except Exception as exc:
                _say(f"watch: on_hang raised {type(exc).__name__}: {exc}")

    def _store_of(self, dist: Any) -> Any | None:
        if self._store is not None:
            return self._store
        failed = self._store_failed_at
        if failed is not None and time.monotonic() - failed < RECONNECT_S:
            return None
        try:
            self._store = _connect(dist)
            self._store_failed_at = None
        except Exception as exc:
            self._lost_store(exc)
        return self._store

    def _lost_store(self, exc: Exception) -> None:
        if self._store_failed_at is None:
            _say(
                f"watch: the job's store cannot be reached ({type(exc).__name__}); "
                "a stalled rank dumps its own files only"
            )
        self._store = None
        self._store_failed_at = time.monotonic()


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


def start(
    dump_dir: Path,
    watch_s: float | None,
    on_hang: OnHang | None = None,
    *,
    stop: threading.Event | None = None,
    dump: _DumpFn,
) -> Watch | None:
    """Start the watch thread (a daemon: it never keeps the job alive); None: ``watch_s`` is
    None, no watch. ``stop``, once set, ends it; ``dump``: how this rank dumps its buffer and
    stacks (``frtrace.recorder``'s, which starts the watch: the watch never imports it)."""
    if watch_s is None:
        return None
    w = Watch(
        dump_dir=dump_dir,
        watch_s=watch_s,
        dump=dump,
        on_hang=on_hang,
        interval_s=min(1.0, max(0.05, watch_s / 5)),
        stop=threading.Event() if stop is None else stop,
    )
    w.thread = threading.Thread(target=w.run, name="frtrace-watch", daemon=True)
    w.thread.start()
    return w
