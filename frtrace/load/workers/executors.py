"""Where the per-file step runs: this machine's watched worker processes, or a cluster.

Every engine is a ``FileExecutor``: it reads each candidate with ``try_parse`` and hands the
results to ``consume(index, result)`` in file order, so ``tables._Assembler`` merges them as
they arrive whatever engine produced them. Two exist:

- ``LocalProcesses``: today's path, ``parallel.parse_candidates`` (watched worker processes);
- ``FuturesExecutor``: any ``concurrent.futures.Executor``. Files go out in small batches
  (``parse_files``, which reads them in a watched process where the host allows one); at most
  a few batches per worker are in flight, so the results waiting for an earlier one stay
  few. A batch that fails (its worker died) is sent again one file per task, each retry
  alone on the cluster (a file that kills its worker must not take an innocent file queued
  on the same worker down twice); a file whose task still fails, or runs past its time
  limit, is an unreadable file with one line saying so: never silently missing.
  ``dask_executor`` adapts a ``distributed.Client`` (``client.get_executor``); Ray, or
  anything with ``submit``, fits the same way.

Workers read the files themselves, so the dump directory must be visible to them at the same
absolute path (shared storage); results are relocated to the path spelled here.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from frtrace.base.progress import Phase, Progress, owned
from frtrace.errors import ReaderFailedError, SchedulerUnavailable
from frtrace.incident.discover import Candidate
from frtrace.incident.fingerprint import Fingerprint
from frtrace.load.handover.shipped import ShippedDump
from frtrace.load.read.parse import ParsedDump
from frtrace.load.workers import cluster
from frtrace.load.workers.bundle import Bundle
from frtrace.load.workers.cluster import FirstPass, Members, dask_frontier, parse_kept
from frtrace.load.workers.frontier import Frontier
from frtrace.load.workers.parallel import Result, file_timeout_s, parse_candidates

__all__ = [
    "Answer",
    "Consumer",
    "FileExecutor",
    "FuturesExecutor",
    "LocalProcesses",
    "Task",
    "dask_executor",
    "open_executor",
    "parse_files",
]

Consumer = Callable[[int, Result | Bundle], None]
# A task's answer: a result a file, or one bundle of them all (``load.workers.bundle``)
Answer = list[Result] | Bundle
Task = Callable[[Sequence[Candidate]], Answer]

# Files per remote task: one task per file costs the scheduler ~1 ms each (100 s for 10^5
# ranks), and a batch of 16 dumps (~7 MB) reads in ~0.3 s, well above that overhead.
FILES_PER_TASK = 16
# Files per task where the history is cut (``load.workers.cluster``): a few MB of entries come back,
# and a task's cost at the coordinator (its submission, its bundle received and added: ~5 ms)
# is shared by more ranks (100,000 ranks: 782 tasks a pass).
CUT_FILES_PER_TASK = 128
# Tasks in flight per worker: enough to keep each busy while results travel back, few enough
# that results waiting for a slow earlier batch stay a small part of the set.
TASKS_PER_WORKER = 3
# How long a connection to a scheduler may take before the address is called unreachable.
CONNECT_TIMEOUT_S = 10


class FileExecutor(Protocol):
    """Reads files somewhere; results reach ``consume`` in the candidates' order."""

    def parse(self, candidates: Sequence[Candidate], consume: Consumer) -> None:
        """Read every candidate; call ``consume(index, result)`` for each, index ascending
        (a ``Bundle`` stands for the ``count`` candidates from ``index``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LocalProcesses:
    """Watched worker processes on this machine (``frtrace.load.workers.parallel``)."""

    jobs: int | None = None
    progress: bool | Progress = False
    ship_to: Path | None = None  # where the workers write the entry columns (large sets)
    meanwhile: Callable[[], None] | None = None  # done in a thread while the workers read
    # each file's fingerprint, filled in by its reader (``parse_candidates``), for the cache
    fingerprints: list[Fingerprint | None] | None = None

    def parse(self, candidates: Sequence[Candidate], consume: Consumer) -> None:
        parse_candidates(
            candidates,
            jobs=self.jobs,
            progress=self.progress,
            consume=consume,
            ship_to=self.ship_to,
            meanwhile=self.meanwhile,
            fingerprints=self.fingerprints,
        )


def parse_files(candidates: Sequence[Candidate]) -> list[Result]:
    """The remote task: read a few files, each in a watched process where the host allows one
    (a Dask worker is a daemon process unless started with DASK_DISTRIBUTED__WORKER__DAEMON=False:
    then it reads them itself, and a file that crashes the reader kills that worker)."""
    return parse_candidates(candidates, jobs=1)


@dataclasses.dataclass(slots=True)
class _Batch:
    first: int  # index of its first candidate
    candidates: tuple[Candidate, ...]  # with absolute paths, as workers see them
    sent: float
    retry: bool  # already a retry of a failed batch: failing again is final
    limit_s: float = 0.0  # how long it may take (set from its files)

    def __post_init__(self) -> None:
        self.limit_s = _limit_s(self)  # (once: not at every wait)


class FuturesExecutor:
    """Reads files through any ``concurrent.futures.Executor``, in batches, in file order."""

    def __init__(
        self,
        executor: cf.Executor,
        *,
        workers: int = 1,
        task: Task = parse_files,
        files_per_task: int = FILES_PER_TASK,
        progress: bool | Progress = False,
        engine: str = "cluster",
        prepare: FirstPass | None = None,
    ) -> None:
        self.executor = executor
        self.workers = max(1, workers)
        self.task = task
        self.files_per_task = max(1, files_per_task)
        self.progress = progress
        self.engine = engine  # named in messages: "Dask"
        # a first pass that cuts a large set's history to its frontier (``load.workers.cluster``)
        self.prepare = prepare
        self.window: Frontier | None = None  # the frontier the last parse cut at, if any

    def parse(self, candidates: Sequence[Candidate], consume: Consumer) -> None:
        with owned(self.progress) as shown, shown.phase("load", total=len(candidates)) as bar:
            self._parse(candidates, consume, bar)

    def cuts(self, candidates: Sequence[Candidate]) -> bool:
        """Whether ``parse`` will cut these files' history (unless its first pass fails):
        then the results are small, and the tables need no spill directory."""
        return self.prepare is not None and self.prepare.applies(candidates)

    def _parse(self, candidates: Sequence[Candidate], consume: Consumer, bar: Phase) -> None:
        here = Path.cwd()  # (the workers may run elsewhere: every path absolute)
        absolute = [
            c if c.path.is_absolute() else dataclasses.replace(c, path=here / c.path)
            for c in candidates
        ]
        # Batches no larger than an even share: a few files on many workers still spread. A cut
        # history's tasks are larger: each sends one small table, and a task's cost at the
        # coordinator (its submission, its table merged) is most of a 100,000-rank load's
        prepare = self.prepare if self.cuts(candidates) else None
        per_task = (
            self.files_per_task if prepare is None else max(self.files_per_task, CUT_FILES_PER_TASK)
        )
        size = min(per_task, max(1, len(candidates) // (self.workers * 2)))
        todo = [
            _Batch(i, tuple(absolute[i : i + size]), 0.0, False)
            for i in range(0, len(candidates), size)
        ]
        task: Callable[..., Answer] = self.task
        extra: tuple[Any, ...] = ()
        self.window = None
        cut = None if prepare is None else prepare.run([b.candidates for b in todo])
        members: Members = {}
        if cut is not None:
            (handle, answer), task = cut, parse_kept
            self.window, members, extra = answer.frontier, answer.members, (handle,)
        todo.reverse()  # popped from the end: file order
        ready: dict[int, Result | Bundle] = {}
        handed = waiting = 0  # (waiting: the files ready and not handed over)
        running: dict[cf.Future[Answer], _Batch] = {}
        window = self.workers * TASKS_PER_WORKER
        # Files that may be done ahead of the first one not yet handed over: a slow batch
        # holds the others back rather than letting the results waiting for it pile up.
        ahead = 4 * window * size
        try:
            while todo or running:
                while todo and len(running) < window and todo[-1].first < handed + ahead:
                    # A retry runs alone: a file that kills its worker would otherwise take
                    # the files queued beside it on that worker down with it again.
                    if running and (todo[-1].retry or any(b.retry for b in running.values())):
                        break
                    batch = todo.pop()
                    batch.sent = time.monotonic()
                    running[self.executor.submit(task, batch.candidates, *extra)] = batch
                done, _ = cf.wait(
                    running, timeout=self._next_deadline(running), return_when=cf.FIRST_COMPLETED
                )
                for future in done:
                    batch = running.pop(future)
                    for index, result in self._results(future, batch, todo):
                        ready[index] = result
                        waiting += result.count if isinstance(result, Bundle) else 1
                todo.sort(key=lambda b: -b.first)  # retries among the rest, in file order
                waiting += self._expire(running, ready)
                bar.update(handed + waiting)
                while handed in ready:
                    result, at = ready.pop(handed), handed
                    if isinstance(result, Bundle):
                        handed += result.count
                        moved = result.relocated(candidates[at:handed])
                        consume(at, dataclasses.replace(moved, lists=_held(moved, members)))
                    else:
                        handed += 1
                        consume(at, _relocate(result, absolute[at], candidates[at]))
                    waiting -= handed - at
        finally:
            for future in running:
                future.cancel()

    def _results(
        self, future: cf.Future[Answer], batch: _Batch, todo: list[_Batch]
    ) -> list[tuple[int, Result | Bundle]]:
        try:
            results = future.result()
            count = results.count if isinstance(results, Bundle) else len(results)
            if count != len(batch.candidates):
                raise ValueError(f"{count} results for {len(batch.candidates)} files")
            if isinstance(results, Bundle):
                return [(batch.first, results)]
            return list(enumerate(results, batch.first))
        except Exception as exc:  # the worker died (KilledWorker), a lost connection, a bug
            if len(batch.candidates) > 1 or not batch.retry:
                # again, one file per task: a file that kills its reader costs only that file
                for offset, cand in reversed(list(enumerate(batch.candidates))):
                    todo.append(_Batch(batch.first + offset, (cand,), 0.0, True))
                return []
            return [(batch.first, self._failed(batch.candidates[0], exc))]

    def _next_deadline(self, running: dict[cf.Future[Answer], _Batch]) -> float | None:
        if not running:
            return None
        now = time.monotonic()
        return max(0.0, min(b.sent + b.limit_s for b in running.values()) - now)

    def _expire(
        self, running: dict[cf.Future[Answer], _Batch], ready: dict[int, Result | Bundle]
    ) -> int:
        """Give up on tasks past their time limit: their files are reported, not waited for
        (how many)."""
        now, expired = time.monotonic(), 0
        for future, batch in list(running.items()):
            limit = batch.limit_s
            if now - batch.sent > limit:
                del running[future]
                future.cancel()
                expired += len(batch.candidates)
                for offset, cand in enumerate(batch.candidates):
                    ready[batch.first + offset] = ReaderFailedError(
                        f"{cand.path}: refused: the {self.engine} task reading it (with "
                        f"{len(batch.candidates) - 1} other files) took longer than "
                        f"{limit:.0f} s; a worker is stalled or the file is damaged. The other "
                        "ranks are analysed without it."
                    )
        return expired

    def _failed(self, cand: Candidate, exc: BaseException) -> ReaderFailedError:
        return ReaderFailedError(
            f"{cand.path}: the {self.engine} workers reading this file failed "
            f"({type(exc).__name__}: {str(exc)[:160]}); the file is damaged or a worker is "
            "unhealthy. The other ranks are analysed without it."
        )


def _limit_s(batch: _Batch) -> float:
    # twice the local limits: a task can wait behind another one on its worker
    return 2 * sum(file_timeout_s(c) for c in batch.candidates)


def _held(bundle: Bundle, members: Members) -> tuple[tuple[bytes, Any], ...]:
    """The bundle's member lists, those left on the workers put back (one array each, the
    same for every bundle: the tables intern them by digest)."""
    if not members or all(ranks is not None for _, ranks in bundle.lists):
        return bundle.lists
    return tuple((key, members.get(key) if ranks is None else ranks) for key, ranks in bundle.lists)


def _relocate(result: Result, remote: Candidate, local: Candidate) -> Result:
    """The result as if the file had been read at the path spelled here (maybe relative)."""
    if remote.path == local.path:
        return result
    if isinstance(result, ParsedDump | ShippedDump):
        meta = dataclasses.replace(result.meta, path=str(local.path))
        return dataclasses.replace(result, meta=meta)
    return type(result)(str(result).replace(str(remote.path), str(local.path)))


@contextmanager
def dask_executor(
    address: str,
    *,
    progress: bool | Progress = False,
    frontier_min_bytes: int | None = None,
) -> Iterator[FuturesExecutor]:
    """A FuturesExecutor on the Dask cluster whose scheduler is at ``address``; from
    ``frontier_min_bytes`` of dumps (default ``cluster.FRONTIER_MIN_BYTES``) it cuts the
    history to its frontier on the workers, so this process never holds every entry."""
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerUnavailable(
            f"--scheduler {address}: needs dask.distributed, which is not installed. Install "
            "it with pip install 'frtrace[dask]' (on this machine and the workers)."
        ) from None
    try:
        connect: Any = Client  # distributed has no type annotations
        client = connect(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerUnavailable(
            f"--scheduler {address}: cannot reach the Dask scheduler ({type(exc).__name__}: "
            f"{str(exc)[:160]}). Check the address (tcp://HOST:8786) and that the scheduler "
            "is running, or leave --scheduler out to read the files on this machine."
        ) from exc
    try:
        # every thread of every worker can read a batch (single-threaded workers are best:
        # reading a pickle holds the GIL)
        workers = max(1, sum(client.nthreads().values()))
        pool = client.get_executor(pure=False)
        if frontier_min_bytes is None:
            frontier_min_bytes = cluster.FRONTIER_MIN_BYTES
        prepare = dask_frontier(client, workers=workers, min_bytes=frontier_min_bytes)
        yield FuturesExecutor(
            pool, workers=workers, progress=progress, engine="Dask", prepare=prepare
        )
    finally:
        client.close()


@contextmanager
def open_executor(
    scheduler: str | FileExecutor | None,
    *,
    jobs: int | None = None,
    progress: bool | Progress = False,
) -> Iterator[FileExecutor]:
    """The engine ``load_dumps`` reads with: local processes, a Dask address, or one given."""
    if scheduler is None:
        yield LocalProcesses(jobs=jobs, progress=progress)
    elif isinstance(scheduler, str):
        with dask_executor(scheduler, progress=progress) as executor:
            yield executor
    else:
        yield scheduler
