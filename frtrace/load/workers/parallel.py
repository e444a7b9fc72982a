"""Parse many dump files at once, each in a watched worker process; the load phase's count.

Files are read in worker processes even when there is a single file, because decoding a
pickle can fail beyond recovery in-process: the C unpickler hashes every dict key it builds,
and a crafted key (a tuple nested 200,000 deep, or a few hundred bytes of tuples sharing
sub-tuples through the memo) crashes the interpreter or hashes for centuries; one opcode
(``LONG_BINPUT`` with a large index, which one damaged byte can make) has it allocate and
zero up to 32 GB. No check of the opcode stream written in Python keeps pace with the C
unpickler (genops takes ten times as long as the whole load), so the parent watches each
worker instead: a worker that dies, runs past the file's time limit (``file_timeout_s``) or
past its memory limit (RLIMIT_AS: ``memory.file_allowance``, the file's need capped at an even
share of half this machine's memory among the workers, so that all of them at once stay within
it) costs that one file, reported in one line; the other files go on.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import pyarrow as pa

from frtrace.base.progress import Phase, Progress, owned
from frtrace.errors import DumpTooLargeError, ReaderFailedError
from frtrace.incident.discover import Candidate
from frtrace.incident.fingerprint import Fingerprint
from frtrace.incident.memory import default_jobs
from frtrace.load.handover import spill
from frtrace.load.read import native
from frtrace.load.read.parse import try_parse
from frtrace.load.workers.worker import Result, read_first, serve

__all__ = ["Result", "default_jobs", "parse_candidates"]

# Below this many bytes in total, one worker reads every file: starting more costs more than
# it saves (a fork and the transfer of results is a few ms per worker; parsing 8 MB ~50 ms).
PARALLEL_MIN_BYTES = 8 << 20
# Time a worker may spend on one file: a real dump reads at 30+ MB/s.
FILE_TIMEOUT_S = 60.0
FILE_TIMEOUT_S_PER_MIB = 1.0
# Bytes the socket to and from a worker may hold: a whole result, so neither side waits.
RESULT_BUFFER_BYTES = 4 << 20
# Files sent to a worker ahead of its results: the one it reads and the next, which it starts
# as soon as it has sent a result, without waiting for the parent to send it another (at 1,024
# ranks on 2 cores, a worker waited ~0.35 s of its ~6 s so, the parent busy merging).
IN_FLIGHT = 2


Consumer = Callable[[int, Result], None]


def parse_candidates(
    candidates: Sequence[Candidate],
    *,
    jobs: int | None = None,
    progress: bool | Progress = False,
    consume: Consumer | None = None,
    ship_to: Path | None = None,
    meanwhile: Callable[[], None] | None = None,
    fingerprints: list[Fingerprint | None] | None = None,
) -> list[Result]:
    """Parse each candidate; failures come back as DumpFormatError.

    Without ``consume``: the results, in the candidates' order. With it: each result is handed
    to ``consume(index, result)`` in the candidates' order as soon as it and those before it
    are in, and not kept (the list returned is empty), so a caller can merge and drop them.
    ``progress``: the run's phases (``frtrace.base.progress``; True: shown on stderr), where this is
    the load phase, and where the C reader is not used, the notice that says so.
    ``ship_to``: a directory where the workers write the entry columns, each to a file of its
    own, and send the parent where they are (``ShippedDump``, ``frtrace.load.handover.shipped``).
    ``meanwhile``: the caller's work for this process while the workers read (importing the
    next step's modules), in a thread started once they are; no process is forked while it
    runs (a fork copies the locks a thread holds, an import's among them), and it has ended
    when this returns. Where no worker starts, it runs first, in this thread.
    ``fingerprints``: a list as long as ``candidates`` where each file's fingerprint is put,
    taken by its reader as it reads it (``worker.read_first``); None stays for a file that
    could not be opened or whose reader crashed or ran out of time.
    """
    jobs = default_jobs() if jobs is None else max(1, jobs)
    total_bytes = sum(c.size_bytes for c in candidates)
    workers = 1 if total_bytes < PARALLEL_MIN_BYTES else min(jobs, len(candidates))
    if not candidates:
        if meanwhile is not None:
            meanwhile()
        return []
    with owned(progress) as shown:
        if (reason := native.inactive_reason()) is not None:
            shown.notice(native.notice(reason))
        with shown.phase("load", total=len(candidates), unit="files") as phase:
            pool = _WatchedPool(
                candidates, workers, phase, consume, ship_to, meanwhile, fingerprints
            )
            return pool.run()


def file_timeout_s(cand: Candidate) -> float:
    """How long one file may take to read before it is refused."""
    return FILE_TIMEOUT_S + FILE_TIMEOUT_S_PER_MIB * cand.size_bytes / 2**20


def _widen(*ends: Connection) -> None:
    """Let a whole result (~0.4 MB for a 2,000-entry dump) sit in the socket between a worker
    and the parent: with the default ~200 KB, the worker waited on the parent to drain it,
    and the parent on the worker to refill it. The kernel caps the size (net.core.wmem_max)."""
    for end in ends:
        with contextlib.suppress(OSError, ValueError):
            sock = socket.socket(fileno=end.fileno())
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RESULT_BUFFER_BYTES)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RESULT_BUFFER_BYTES)
            finally:
                sock.detach()  # (the descriptor stays the connection's)


# --------------------------------------------------------------------------------------------
# The parent side


@dataclass(slots=True)
class _Worker:
    process: Any  # multiprocessing.Process (its context's class)
    conn: Connection
    # the files sent to it and not yet answered, in order: the first is the one it is reading
    sent: deque[int] = field(default_factory=deque)
    started: float = 0.0  # when it started the first of them (at the latest)

    @property
    def index(self) -> int:
        """The file it is reading."""
        return self.sent[0]


class _WatchedPool:
    """Hand files to worker processes, each a file ahead (``IN_FLIGHT``); survive their
    crashes and hangs."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        workers: int,
        phase: Phase,
        consume: Consumer | None = None,
        ship_to: Path | None = None,
        meanwhile: Callable[[], None] | None = None,
        fingerprints: list[Fingerprint | None] | None = None,
    ) -> None:
        self.candidates = candidates
        self.ship_to = ship_to
        self.meanwhile = meanwhile
        self.beside: threading.Thread | None = None  # running meanwhile
        self.size = max(1, workers)
        self.phase = phase
        self.todo = deque(range(len(candidates)))
        self.consume = consume
        self.results: dict[int, Result] = {}  # not yet handed over
        self.fingerprints = fingerprints  # each file's, where they are taken (the caller's)
        self.handed = 0  # results [0, handed) went to consume
        self.done = 0
        # Arrow's allocator reserves its address space (1 GiB) on first use: done here, before
        # the fork, it is part of every worker's starting size rather than of its allowance.
        pa.allocate_buffer(1)

        methods = multiprocessing.get_all_start_methods()
        # fork: workers inherit the imported modules and the candidates, starting in ms
        self.ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")

    def run(self) -> list[Result]:
        busy: dict[Connection, _Worker] = {}
        try:
            for _ in range(min(self.size, len(self.todo))):
                worker = self.start()
                if worker is None:
                    break
                self.assign(worker, busy)
            if not busy:  # no processes here (a sandbox, a daemon process): read in this one
                self.run_meanwhile()
                return self.in_process()
            self.beside_start()
            while busy:
                now = time.monotonic()
                deadline = min(
                    w.started + file_timeout_s(self.candidates[w.index]) for w in busy.values()
                )
                for ready in wait(list(busy), timeout=max(0.0, deadline - now)):
                    self.collect(busy.pop(ready), busy)  # type: ignore[call-overload]
                now = time.monotonic()
                for conn, worker in list(busy.items()):
                    index = worker.index
                    limit = file_timeout_s(self.candidates[index])
                    if now - worker.started > limit:
                        del busy[conn]
                        self.stop(worker)
                        self.give_back(worker, keep=1)
                        self.finish(index, self.timed_out(index, limit))
                        self.replace(busy)
        finally:
            for worker in busy.values():
                self.stop(worker)
            self.beside_join()
        assert self.done == len(self.candidates)
        return [self.results.pop(i) for i in range(len(self.candidates)) if i in self.results]

    def in_process(self) -> list[Result]:
        for index in range(len(self.candidates)):
            self.finish(index, self.read_here(index))
        return [self.results.pop(i) for i in range(len(self.candidates)) if i in self.results]

    def read_here(self, index: int) -> Result:
        """Read one file in this process (its fingerprint as it is read, where they are
        taken)."""
        cand = self.candidates[index]
        if self.fingerprints is not None:
            cand, self.fingerprints[index] = read_first(cand)
        return try_parse(cand)

    def run_meanwhile(self) -> None:
        """The caller's ``meanwhile``, once (an error in it is the caller's to meet again:
        an import that failed here fails the same way where the module is used)."""
        work, self.meanwhile = self.meanwhile, None
        if work is not None:
            with contextlib.suppress(Exception):
                work()

    def beside_start(self) -> None:
        """Run ``meanwhile`` in a thread while the workers read. The thread takes the GIL
        from this one, which hands the workers their next file: switched every 0.5 ms while
        it runs, not every 5 ms, so that a worker does not wait for its next file."""
        if self.meanwhile is None:
            return
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, 0.0005))

        def work() -> None:
            try:
                self.run_meanwhile()
            finally:
                sys.setswitchinterval(interval)

        self.beside = threading.Thread(target=work, name="frtrace-meanwhile", daemon=True)
        self.beside.start()

    def beside_join(self) -> None:
        if self.beside is not None:
            self.beside.join()
            self.beside = None

    def start(self) -> _Worker | None:
        self.beside_join()  # (never fork while the thread may hold a lock: see parse_candidates)
        spill.finish_removing()  # (nor while an earlier load's files are being removed)
        recv, send = self.ctx.Pipe(duplex=True)
        _widen(recv, send)
        process = self.ctx.Process(  # type: ignore[attr-defined]
            target=serve,
            args=(send, self.candidates, self.size, self.ship_to, self.fingerprints is not None),
            daemon=True,
        )
        # Frozen, the parent's objects are never scanned by the child's garbage collector,
        # which would otherwise write to (and so copy) the pages that hold them.
        gc.freeze()
        try:
            process.start()
        except (OSError, AssertionError):  # (AssertionError: started from a daemon process)
            return None
        finally:
            gc.unfreeze()
        send.close()
        return _Worker(process=process, conn=recv)

    def assign(self, worker: _Worker, busy: dict[Connection, _Worker]) -> None:
        """Give a new worker its first files (``IN_FLIGHT``), or tell it to stop."""
        if not self.todo:
            self.stop(worker, politely=True)
            return
        worker.started = time.monotonic()
        self.top_up(worker, 0)
        if not worker.sent:  # it died before its first file: restart it
            self.stop(worker)
            self.replace(busy)
            return
        # (where a second file could not be sent, it is gone after its first: ``collect``
        # takes that file's result, or says it crashed on it, and gives the rest back)
        busy[worker.conn] = worker

    def top_up(self, worker: _Worker, answered: int) -> bool:
        """Send the worker files until it has ``IN_FLIGHT`` to read (``answered``: how many of
        those sent are read, their result waiting), a second one only while more files are
        left than there are workers (the last ones go to whichever is free first). False
        where it is gone."""
        while self.todo and len(worker.sent) - answered < IN_FLIGHT:
            if len(worker.sent) > answered and len(self.todo) <= self.size:
                break
            if not self.send(worker, self.todo[0]):
                return False
            worker.sent.append(self.todo.popleft())
        return True

    def give_back(self, worker: _Worker, keep: int = 0) -> None:
        """The files sent to a worker that is gone go back first in line, in order, but for
        the first ``keep`` of them (the one it failed on)."""
        while len(worker.sent) > keep:
            self.todo.appendleft(worker.sent.pop())

    def replace(self, busy: dict[Connection, _Worker]) -> None:
        """Start a worker in place of one that is gone, if files remain."""
        if not self.todo:
            return
        worker = self.start()
        if worker is None:
            while self.todo:
                index = self.todo.popleft()
                self.finish(index, self.read_here(index))
            return
        self.assign(worker, busy)

    def collect(self, worker: _Worker, busy: dict[Connection, _Worker]) -> None:
        """Send the worker whose result is ready one more file, then take the result (or
        note that it died) and merge it: the worker reads on while the result is merged."""
        index = worker.index
        sent = self.top_up(worker, 1)
        result: Result | None
        try:
            result = worker.conn.recv()
            if self.fingerprints is not None:  # (then each answer is the file's, and the result)
                self.fingerprints[index], result = result  # type: ignore[misc]
        except Exception:  # EOF: it died (a half-sent result fails to unpickle the same way)
            result = None
        if result is not None:
            worker.sent.popleft()
        goes_on = result is not None and not isinstance(result, DumpTooLargeError)  # (serve)
        if goes_on and sent and worker.sent:
            worker.started = time.monotonic()
            busy[worker.conn] = worker
        elif goes_on and sent:  # (nothing left to read)
            self.stop(worker, politely=True)
        else:  # it is gone, or going: the files it was sent after this one go back
            self.stop(worker)
            self.give_back(worker, keep=int(result is None))
            self.replace(busy)
        self.finish(index, self.crashed(worker, index) if result is None else result)

    def send(self, worker: _Worker, index: int) -> bool:
        try:
            worker.conn.send(index)
        except OSError:  # it died between two files (after a MemoryError, say)
            return False
        return True

    def finish(self, index: int, result: Result) -> None:
        self.results[index] = result
        self.done += 1
        self.phase.update(self.done)
        if self.consume is not None:  # hand over, in order, what is complete
            while self.handed in self.results:
                self.consume(self.handed, self.results.pop(self.handed))
                self.handed += 1

    def stop(self, worker: _Worker, *, politely: bool = False) -> None:
        if politely:  # an idle worker: it exits on its own (reaped by the next start)
            with contextlib.suppress(OSError):
                worker.conn.send(None)
                worker.conn.close()
                return
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def crashed(self, worker: _Worker, index: int) -> ReaderFailedError:
        path = self.candidates[index].path
        code = worker.process.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
            if -code == getattr(signal, "SIGKILL", None):
                how += " (out of memory?)"
        else:
            how = f"exit status {code}"
        return ReaderFailedError(
            f"{path}: the process reading this file crashed ({how}); the file is damaged or "
            "built to crash a pickle reader. The other ranks are analysed without it."
        )

    def timed_out(self, index: int, limit: float) -> ReaderFailedError:
        cand = self.candidates[index]
        return ReaderFailedError(
            f"{cand.path}: refused: reading it took longer than {limit:.0f} s (a real dump "
            f"of {cand.size_bytes / 2**20:.1f} MiB reads in well under a second); the file is "
            "damaged or built to stall a pickle reader. The other ranks are analysed without it."
        )
