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
import ctypes
import faulthandler
import gc
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import pyarrow as pa

from frtrace.errors import DumpFormatError, DumpTooLargeError, ReaderFailedError
from frtrace.load import native
from frtrace.load.discover import Candidate
from frtrace.load.memory import address_space, file_allowance
from frtrace.load.parse import ParsedDump, try_parse
from frtrace.load.shipped import ColumnWriter, ShippedDump
from frtrace.progress import Phase, Progress, owned

__all__ = ["Result", "default_jobs", "parse_candidates"]

# Below this many bytes in total, one worker reads every file: starting more costs more than
# it saves (a fork and the transfer of results is a few ms per worker; parsing 8 MB ~50 ms).
PARALLEL_MIN_BYTES = 8 << 20
# Time a worker may spend on one file: a real dump reads at 30+ MB/s.
FILE_TIMEOUT_S = 60.0
FILE_TIMEOUT_S_PER_MIB = 1.0
# Bytes the socket to and from a worker may hold: a whole result, so neither side waits.
RESULT_BUFFER_BYTES = 4 << 20


def default_jobs() -> int:
    """Worker processes to use: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


Result = ParsedDump | ShippedDump | DumpFormatError
Consumer = Callable[[int, Result], None]


def parse_candidates(
    candidates: Sequence[Candidate],
    *,
    jobs: int | None = None,
    progress: bool | Progress = False,
    consume: Consumer | None = None,
    ship_to: Path | None = None,
) -> list[Result]:
    """Parse each candidate; failures come back as DumpFormatError.

    Without ``consume``: the results, in the candidates' order. With it: each result is handed
    to ``consume(index, result)`` in the candidates' order as soon as it and those before it
    are in, and not kept (the list returned is empty), so a caller can merge and drop them.
    ``progress``: the run's phases (``frtrace.progress``; True: shown on stderr), where this is
    the load phase, and where the C reader is not used, the notice that says so.
    ``ship_to``: a directory where the workers write the entry columns, each to a file of its
    own, and send the parent where they are (``ShippedDump``, ``frtrace.load.shipped``).
    """
    jobs = default_jobs() if jobs is None else max(1, jobs)
    total_bytes = sum(c.size_bytes for c in candidates)
    workers = 1 if total_bytes < PARALLEL_MIN_BYTES else min(jobs, len(candidates))
    if not candidates:
        return []
    with owned(progress) as shown:
        if (reason := native.inactive_reason()) is not None:
            shown.notice(native.notice(reason))
        with shown.phase("load", total=len(candidates), unit="files") as phase:
            return _WatchedPool(candidates, workers, phase, consume, ship_to).run()


def file_timeout_s(cand: Candidate) -> float:
    """How long one file may take to read before it is refused."""
    return FILE_TIMEOUT_S + FILE_TIMEOUT_S_PER_MIB * cand.size_bytes / 2**20


# --------------------------------------------------------------------------------------------
# The worker side


def _serve(
    conn: Connection,
    candidates: Sequence[Candidate],
    workers: int = 1,
    ship_to: Path | None = None,
) -> None:
    """Worker loop: read the file whose index the parent sends, send back the result.
    ``workers``: how many read at once (each may take its share of the machine's memory).
    ``ship_to``: the entry columns go to a file of this worker's there (a file that cannot be
    written: they go in the message, as without it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # Everything a worker has to say comes back as its result, in one line; a crash is
    # reported by the parent. So nothing reaches the terminal from here: no fault handler
    # trace, and not the "SystemError: deallocated bytearray object has exported buffers"
    # that CPython 3.11 prints while decoding some corrupt pickles (a BYTEARRAY8 opcode
    # claiming exabytes).
    faulthandler.disable()
    _keep_freed_memory()
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        # Python-level writes (unraisable-exception messages) go through sys.stderr, which a
        # caller may have pointed elsewhere than descriptor 2 (pytest's capture does)
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the worker)
    writer: ColumnWriter | None = None
    while True:
        try:
            index = conn.recv()
        except (EOFError, OSError):
            return
        if index is None:
            return
        cand = candidates[index]
        _limit_memory(file_allowance(cand.size_bytes, workers))
        result: Result = try_parse(cand)
        if isinstance(result, ParsedDump) and ship_to is not None:
            try:
                if writer is None:
                    writer = ColumnWriter(ship_to, f"worker-{os.getpid()}.columns")
                result = writer.ship(result)
            except OSError:
                ship_to = None
        try:
            conn.send(result)
        except (OSError, ValueError):  # the parent is gone
            return
        if isinstance(result, DumpTooLargeError):
            return  # after a MemoryError the next file gets a fresh process


def _keep_freed_memory() -> None:
    """Have glibc keep the memory this worker frees instead of handing it back to the kernel.

    A worker decodes one file after another, each needing about as much memory as the last.
    By default glibc serves large blocks from fresh mappings and gives the top of its heap
    back once free, so every file faulted the same pages in again: ~400 page faults per file,
    10-20% of its time. Blocks under 32 MiB now come from the heap, and up to 128 MiB of free
    heap is kept (the memory limit, RLIMIT_AS, counts it all the same). Workers only: the
    parent, whose memory the 32,768-rank budget is about, is left as glibc manages it.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)


# mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


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


def _limit_memory(allowance: int) -> None:
    """Cap this worker's address space for the next file at what it holds now plus
    ``allowance`` (soft RLIMIT_AS; Linux)."""
    base = address_space()
    if base is None:
        return
    try:
        import resource

        limit = base + allowance
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):
        pass


# --------------------------------------------------------------------------------------------
# The parent side


@dataclass(slots=True)
class _Worker:
    process: Any  # multiprocessing.Process (its context's class)
    conn: Connection
    index: int | None = None  # the file it is reading
    started: float = 0.0


class _WatchedPool:
    """Hand files one at a time to worker processes; survive their crashes and hangs."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        workers: int,
        phase: Phase,
        consume: Consumer | None = None,
        ship_to: Path | None = None,
    ) -> None:
        self.candidates = candidates
        self.ship_to = ship_to
        self.size = max(1, workers)
        self.phase = phase
        self.todo = deque(range(len(candidates)))
        self.consume = consume
        self.results: dict[int, Result] = {}  # not yet handed over
        self.handed = 0  # results [0, handed) went to consume
        self.done = 0
        # Arrow's allocator reserves its address space (1 GiB) on first use: done here, before
        # the fork, it is part of every worker's starting size rather than of its allowance.
        pa.allocate_buffer(1)
        # pyarrow imports pandas the first time it converts a numpy array with a mask, which
        # every worker does on its first file: done once here, the workers inherit it
        # (~150 ms of CPU each; the analysis imports it anyway)
        import pandas  # noqa: F401

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
                return self.in_process()
            while busy:
                now = time.monotonic()
                deadline = min(
                    w.started + file_timeout_s(self.candidates[w.index])
                    for w in busy.values()
                    if w.index is not None
                )
                for ready in wait(list(busy), timeout=max(0.0, deadline - now)):
                    self.collect(busy.pop(ready), busy)  # type: ignore[call-overload]
                now = time.monotonic()
                for conn, worker in list(busy.items()):
                    assert worker.index is not None
                    limit = file_timeout_s(self.candidates[worker.index])
                    if now - worker.started > limit:
                        del busy[conn]
                        self.stop(worker)
                        self.finish(worker.index, self.timed_out(worker.index, limit))
                        self.replace(busy)
        finally:
            for worker in busy.values():
                self.stop(worker)
        assert self.done == len(self.candidates)
        return [self.results.pop(i) for i in range(len(self.candidates)) if i in self.results]

    def in_process(self) -> list[Result]:
        for index, cand in enumerate(self.candidates):
            self.finish(index, try_parse(cand))
        return [self.results.pop(i) for i in range(len(self.candidates)) if i in self.results]

    def start(self) -> _Worker | None:
        recv, send = self.ctx.Pipe(duplex=True)
        _widen(recv, send)
        process = self.ctx.Process(  # type: ignore[attr-defined]
            target=_serve, args=(send, self.candidates, self.size, self.ship_to), daemon=True
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
        """Give the worker the next file, or tell it to stop."""
        if not self.todo:
            self.stop(worker, politely=True)
            return
        index = self.todo.popleft()
        if not self.send(worker, index):  # it died between two files: restart it
            self.todo.appendleft(index)
            self.stop(worker)
            self.replace(busy)
            return
        worker.index, worker.started = index, time.monotonic()
        busy[worker.conn] = worker

    def replace(self, busy: dict[Connection, _Worker]) -> None:
        """Start a worker in place of one that is gone, if files remain."""
        if not self.todo:
            return
        worker = self.start()
        if worker is None:
            while self.todo:
                index = self.todo.popleft()
                self.finish(index, try_parse(self.candidates[index]))
            return
        self.assign(worker, busy)

    def collect(self, worker: _Worker, busy: dict[Connection, _Worker]) -> None:
        """Give the worker whose result is ready its next file, then take the result (or
        note that it died) and merge it: the worker reads on while the result is merged."""
        index = worker.index
        assert index is not None
        worker.index = None
        following = self.todo.popleft() if self.todo else None
        sent = following is not None and self.send(worker, following)
        result: Result | None
        try:
            result = worker.conn.recv()
        except Exception:  # EOF: it died (a half-sent result fails to unpickle the same way)
            result = None
        goes_on = result is not None and not isinstance(result, DumpTooLargeError)  # see _serve
        if goes_on and sent and following is not None:
            worker.index, worker.started = following, time.monotonic()
            busy[worker.conn] = worker
        elif goes_on and following is None:
            self.stop(worker, politely=True)
        else:  # it is gone, or going: the file it was sent goes back first in line
            if following is not None:
                self.todo.appendleft(following)
            self.stop(worker)
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
