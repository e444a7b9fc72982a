"""The job watches itself: each rank's thread notices a stall, every rank dumps, one reports.

``frtrace.recorder.enable(DIR, watch=SECONDS)`` (or ``FRTRACE_WATCH=SECONDS`` in the job's
environment) starts it. Each check reads torch's own recorder state, the ``pg_status`` of
``_dump_fr_trace_json(includeCollectives=False)`` (``_dump_nccl_trace_json`` for NCCL): per
process group the last enqueued and the last completed collective, a few hundred bytes and
tens of microseconds, no entry is copied. An op is pending while ``last_enqueued >
last_completed``; a stall is the same op (the same ``last_completed``) pending for ``watch``
seconds, raised only when a second look ``confirm`` seconds later finds the same ops pending
and the main thread where it was (:mod:`frtrace.job.stallclock`). A rank stuck in host code
has nothing pending: the ranks waiting on it raise the alarm, and its own thread (which runs
while its main thread sleeps, reads a file or waits on a lock) dumps where its Python is.

The alarm goes through the job's own store, on a connection of its own to the default group's
TCPStore (the job's requests never queue behind it). Anyone who reaches it may list, read, write
and delete keys, so the watch's are named from a secret, the watch key: rank 0's thread writes
it to ``DIR/.frtrace-watch-key-<digest>`` (0600, removed at exit) and puts only the digest in
the store (``frtrace/watch/key``); the others read the file it names in the folder they share
(whoever can write there can forge the report anyway. Not the process group: from this thread a
collective hangs the job, a Gloo send/recv shows in every report). A rank without the key in
``KEY_WAIT_S`` says so and watches alone. No value in the store is trusted; a key is
``frtrace/watch/<kind>/<MAC(kind/g)>`` (alarm ``g``'s do not name ``g + 1``'s):

* ``raise``: the rank whose ``compare_set`` sets it leads alarm ``g``;
* ``alarm``: raised (each check asks for the next): a rank dumps its buffer and stacks (its
  pending ops covered: one alarm per stall) once an alarm, and with no stall of its own once
  per ``watch`` seconds at most;
* ``dumped/<g>/<rank>``: the leader waits for all (bounded), analyses the folder in-process
  (``REPORTER``), writes ``frtrace-report.txt``, ``.json``, ``.html`` (0600), calls ``on_hang``;
  once the op completes (a slow step, not a hang) it says so once and marks them superseded.

Only dumps and stacks sidecars written since the stall began are analysed (torch's own timeout
dumps, which use the same names in the same folder, included): a rank that could not dump
(its thread never ran: the GIL held in C) is a rank without a dump, and the report says so.
It never kills, signals or blocks the job. A store that is gone, or a client of it deleting or
overwriting the watch's keys, costs the coordination only (a stalled rank still dumps its own
files): no client can raise, claim, fake or silence an alarm.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from frtrace.base.files import replace_file
from frtrace.job.stallclock import (
    WATCH_ENV,
    Confirmation,
    PgKey,
    Stall,
    StallClock,
    StallContext,
    main_stack,
    parse_watch,
    pending_op,
    resolve,
    resolve_confirm,
)

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
    "resolve_confirm",
    "start",
]

REPORT_STEM = "frtrace-report"  # DIR/frtrace-report.txt, .json, .html
KEY_PREFIX = "frtrace/watch"
STORE_TIMEOUT_S = 10.0  # the watch's own store requests; never the job's
DUMP_WAIT_S = 30.0  # the leader waits this long at most for every rank's dump
RECONNECT_S = 30.0  # a store that failed is tried again after this
KEY_WAIT_S = 60.0  # a rank without rank 0's watch key after this watches alone
KEY_FILE = ".frtrace-watch-key-"  # DIR/.frtrace-watch-key-<digest>: rank 0's secret, 0600
# What analyses the folder and writes the report, imported by name when the job stalled and
# never before: a healthy job loads nothing of the analysis (the job side imports none of it).
REPORTER = "frtrace.gate.watchreport"

_DumpFn = Callable[[str, str], Path | None]  # (reason, detail) -> the dump, None if it failed
# on_hang: called once with the frtrace.model.Report (not named here: the job side imports
# nothing of the analysis, not even its types)
OnHang = Callable[[Any], object]
_Status = dict[PgKey, tuple[int, int]]  # torch's recorder status: (last enqueued, completed)
_Stall = tuple[StallContext, float]  # what the report says of a stall, since when (monotonic)


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


def _digest(secret: str) -> str:
    """All the store holds of rank 0's watch key, and its file's name: 32 digits of SHA-256."""
    return hashlib.sha256(b"frtrace watch key\0" + secret.encode()).hexdigest()[:32]


def _name(key: str, kind: str, *of: int) -> str:
    """The store key ``kind`` of alarm ``of`` (and rank), named from the job's watch key."""
    mac = hashlib.blake2b("/".join([kind, *map(str, of)]).encode(), key=key.encode())
    return f"{_prefix()}/{kind}/{mac.hexdigest()[:32]}"


def _read_key(folder: Path, value: object) -> str | None:
    """The secret in the key file ``value`` (rank 0's digest) names, if that file holds it."""
    if not isinstance(value, bytes) or len(value) != 32 or not value.isalnum():
        return None
    digest = value.decode()
    try:  # (never through a link, nor waiting on a FIFO)
        fd = os.open(folder / (KEY_FILE + digest), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with open(fd, "rb") as f:
            text = f.read(64).decode("ascii", "replace")
    except OSError:
        return None
    return text if secrets.compare_digest(_digest(text), digest) else None


@dataclass(frozen=True, slots=True)
class _Reported:
    """The report the leader wrote, kept until its op completes (then marked superseded)."""

    context: StallContext
    since: float  # (monotonic) since when the op was pending
    written: Any  # REPORTER's Written: the report, where, the ranks' phases
    reporter: Any  # REPORTER's module


@dataclass(slots=True)
class Watch:
    """The running watch thread; ``close()`` ends it (what it is doing finishes first)."""

    dump_dir: Path
    watch_s: float
    dump: _DumpFn
    on_hang: OnHang | None = None
    interval_s: float = 1.0
    dump_wait_s: float = DUMP_WAIT_S
    confirm_s: float = 0.0  # the second look, this long after the first (0: none)
    stack: Callable[[], object] = main_stack  # what the second look compares
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    fired: list[int] = field(default_factory=list)  # alarms this rank dumped for
    reports: list[Path] = field(default_factory=list)  # reports this rank wrote (leader)
    _clock: StallClock | None = None
    _confirm: Confirmation | None = None
    _reported: _Reported | None = None  # the leader's report, until its op completes
    _store: Any = None
    _store_failed_at: float | None = None
    _seen: int = 0  # alarms 1.._seen are raised
    _dumped: int = 0  # the last alarm this rank dumped for
    _last_dump: float | None = None  # (monotonic)
    _key: str | None = None  # the job's watch key (the secret)
    _key_since: float | None = None  # (monotonic) since when this rank wants it
    _key_off: bool = False  # no key: this rank watches alone
    _key_file: Path | None = None  # rank 0's, removed when the watch ends

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2)

    def run(self) -> None:
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
        """One look: this rank's pending ops, then the job's alarms."""
        clock = self._clock = self._clock or StallClock(self.watch_s)
        confirm = self._confirm = self._confirm or Confirmation(self.confirm_s, self.stack)
        now, status = time.monotonic(), read_status(dist)
        stalls = confirm.check(clock.update(status, now), now)
        self._ended(status, now)
        store, last = self._store_of(dist), self._last_dump
        try:
            if store is not None and (key := self._key_of(dist, store, now)) is not None:
                self._follow(dist, store, key, stalls, now)
        except Exception as exc:
            self._lost_store(exc)
            store = None
        if stalls and self._last_dump == last and (store is None or self._key_off):
            clock.cover()  # no store, or no key (a key on its way is waited for)
            why = "no store" if store is None else "no watch key"
            self._dump(f"frtrace watch: {stalls[0].describe()} ({why}: this rank only)")

    def _key_of(self, dist: Any, store: Any, now: float) -> str | None:
        """The watch key: rank 0's, or read from the file its digest names (None: not yet)."""
        pointer, why = f"{_prefix()}/key", ""
        if self._key is None and not self._key_off:
            self._key_since = now if self._key_since is None else self._key_since
            if int(dist.get_rank()) == 0:
                key = secrets.token_hex(16)
                try:  # (removed at exit: the ranks read it as they start)
                    if int(dist.get_world_size()) > 1:
                        path = self.dump_dir / (KEY_FILE + _digest(key))
                        self._key_file = replace_file(path, key)
                        atexit.register(self._key_file.unlink, missing_ok=True)
                    self._key = key
                except Exception as exc:
                    why = f"cannot write the watch key in {self.dump_dir} ({type(exc).__name__})"
            elif now - self._key_since >= KEY_WAIT_S:
                why = f"no watch key from rank 0 in {self.dump_dir} (a folder all ranks share?)"
            elif store.check([pointer]):
                self._key = _read_key(self.dump_dir, store.get(pointer))
        if why:
            self._key_off = True
            _say(f"watch: {why}: no alarm through the store; a stalled rank dumps its own files")
        if self._key_file is not None and now - (self._key_since or now) < KEY_WAIT_S:
            store.set(pointer, _digest(self._key or ""))  # (rank 0: again while read)
        return self._key

    def _follow(self, dist: Any, store: Any, key: str, stalls: list[Stall], now: float) -> None:
        g = self._seen = self._seen + bool(store.check([_name(key, "alarm", self._seen + 1)]))
        if g > self._dumped:  # once an alarm; another's once per watch seconds at most
            if stalls or self._last_dump is None or now - self._last_dump >= self.watch_s:
                self._alarm(dist, store, key, g, leader=False)
        elif stalls:
            g, me = g + 1, str(int(dist.get_rank()))
            leader = store.compare_set(_name(key, "raise", g), "", me) == me.encode()
            store.set(_name(key, "alarm", g), "1")
            self._seen = g
            self._alarm(dist, store, key, g, leader=leader, stall=stalls[0])

    def _alarm(
        self, dist: Any, store: Any, key: str, g: int, *, leader: bool, stall: Stall | None = None
    ) -> None:
        assert self._clock is not None
        now = time.monotonic()
        detail = "raised by another rank" if stall is None else stall.describe()
        since_wall = time.time() - max(self._clock.oldest(now), 0.0) - 2.0
        self._clock.cover()
        self._dumped, self._last_dump = g, now
        self.fired.append(g)
        self._dump(f"frtrace watch alarm {g}: {detail}")
        store.set(_name(key, "dumped", g, int(dist.get_rank())), "1")
        if leader and stall is not None:
            op = pending_op(stall)  # (its name and timeout: the pending entry, read once)
            rank = int(dist.get_rank())
            context = StallContext(self.watch_s, self.confirm_s, stall.pending_s, rank, op)
            self._lead(dist, store, key, g, since_wall, (context, now - stall.pending_s))

    def _dump(self, detail: str) -> None:
        try:
            self.dump("frtrace watch", detail)
        except Exception as exc:
            _say(f"watch: could not dump: {type(exc).__name__}: {exc}")

    def _lead(self, dist: Any, store: Any, key: str, g: int, since: float, stall: _Stall) -> None:
        """Wait for the ranks' dumps, analyse the files since ``since``, report ``stall``."""
        world = int(dist.get_world_size())
        names = [_name(key, "dumped", g, r) for r in range(world)]
        deadline = time.monotonic() + self.dump_wait_s
        dumped: object = "?"
        seen: float | None = None  # (monotonic) when its op was seen done, while they dump
        with contextlib.suppress(Exception):  # (a store that fails: analyse what is there)
            while not store.check(names) and time.monotonic() < deadline and not self.stop.is_set():
                time.sleep(0.25)
                seen = seen or (time.monotonic() if self._done(dist, stall[0]) else None)
            dumped = world if store.check(names) else sum(store.check([n]) for n in names)
        if dumped != world:
            _say(
                f"watch: {dumped} of {world} ranks dumped within {self.dump_wait_s:.0f} s; "
                "analysing those (the others are ranks without a dump)"
            )
        try:
            reporter: Any = importlib.import_module(REPORTER)  # the analysis, only now
            written = reporter.analyse_and_report(self.dump_dir, since, stall[0])
        except Exception as exc:
            _say(
                f"watch: the job stalled but the analysis failed ({type(exc).__name__}: {exc}); "
                f"run: frtrace analyze -d {self.dump_dir}"
            )
            return
        self.reports.append(written.html)
        self._reported = _Reported(*stall, written, reporter)
        with contextlib.suppress(Exception):  # over before it was reported: nobody is paged
            if self._ended(read_status(dist), time.monotonic(), seen=seen, late=True):
                return
        _say(reporter.hang_line(written, stall[0]))
        if self.on_hang is not None:
            try:
                self.on_hang(written.report)
            except Exception as exc:
                _say(f"watch: on_hang raised {type(exc).__name__}: {exc}")

    def _done(self, dist: Any, context: StallContext) -> bool:
        with contextlib.suppress(Exception):
            return bool(context.ended_by(read_status(dist)))
        return False

    def _ended(
        self, status: _Status, now: float, *, seen: float | None = None, late: bool = False
    ) -> bool:
        """Whether the op of the report this rank wrote completed (``seen``: at that moment;
        else by ``now``, at most, where ``late``: not looked at while the report was made):
        said once, the report marked superseded (a group gone: nobody can tell, nothing said)."""
        reported = self._reported
        ended = None if reported is None else seen is not None or reported.context.ended_by(status)
        if reported is None or ended is False:
            return False
        self._reported = None
        if ended is None:
            return False
        after = (seen or now) - reported.since
        context = replace(reported.context, ended_after_s=after, at_most=late and seen is None)
        try:
            _say(reported.reporter.supersede(reported.written, context))
        except Exception as exc:
            _say(f"watch: a stall ended; the report is not marked ({type(exc).__name__}: {exc})")
        return True

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


def start(
    dump_dir: Path,
    watch_s: float | None,
    on_hang: OnHang | None = None,
    *,
    confirm_s: float = 0.0,
    stop: threading.Event | None = None,
    dump: _DumpFn,
) -> Watch | None:
    """Start the watch thread (a daemon: it never keeps the job alive); None: ``watch_s`` is
    None, no watch. ``confirm_s``: the second look's delay (:func:`resolve_confirm`);
    ``stop``, once set, ends it; ``dump``: how this rank dumps its buffer and stacks
    (``frtrace.recorder``'s, which starts the watch: the watch never imports it)."""
    if watch_s is None:
        return None
    w = Watch(
        dump_dir=dump_dir,
        watch_s=watch_s,
        dump=dump,
        on_hang=on_hang,
        interval_s=min(1.0, max(0.05, watch_s / 5)),
        confirm_s=confirm_s,
        stop=threading.Event() if stop is None else stop,
    )
    w.thread = threading.Thread(target=w.run, name="frtrace-watch", daemon=True)
    w.thread.start()
    return w
