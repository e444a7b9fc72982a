"""``frtrace collect``: every rank's dump and stacks into one directory, one folder per host
(``DIR/<host>/``, so every host of a job can collect into one shared folder), with a manifest
per folder (:mod:`frtrace.job.manifest`: each rank's host, pid and dump time), and one
table of what was collected per rank and how, and what was not and why.

Local ranks (this host's processes, :func:`collect`) or every rank of a job through torch's
debug server registry (:func:`collect_from_store`, ``collect --store``: ``store.py``).

Per rank, the stack first (``py-spy dump``: the moment as found, before any dump request
stirs the process), then one Flight Recorder dump, by the first way that works: a request to
the recorder (never a signal), the NCCL debug pipe, the worker server; then the worker server's
``dump_traceback``. Ranks are collected at the same time, each step bounded in time, so a
host of 8 ranks takes about as long as its slowest rank.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from frtrace.base.files import OutDir, open_out_dir, write_file
from frtrace.base.ranges import format_ranks
from frtrace.collect import mechanisms as m
from frtrace.collect.ask import recorder
from frtrace.collect.nextdump import NextTime, next_time
from frtrace.collect.procs import RankProcess, job_of, scan_rank_processes
from frtrace.collect.ras import save_ras_status
from frtrace.collect.store import Answer, StoreRank, Worker, fetch_all, read_registry
from frtrace.errors import SeveralJobs
from frtrace.job import registry
from frtrace.job.env import DUMP_PREFIX
from frtrace.job.manifest import MANIFEST_NAME, CollectedRank, manifest_document

__all__ = [
    "CollectOptions",
    "CollectResult",
    "RankCollection",
    "collect",
    "collect_from_store",
    "host_folder",
    "render_table",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectOptions:
    """How to collect; every wait is bounded by these."""

    dump_timeout_s: float = 20.0  # per dump request (asynchronous dumps included)
    pyspy_timeout_s: float = 10.0  # per py-spy dump
    http_timeout_s: float = 10.0  # per worker-server request
    pyspy: bool = True  # take py-spy stacks when py-spy is installed
    match_env: Mapping[str, str] | None = None  # only processes with these variables
    pids: tuple[int, ...] | None = None  # only these processes
    any_user: bool = False  # also other users' processes (root); else only the real uid's


@dataclass(frozen=True, slots=True, kw_only=True)
class RankCollection:
    """What was done for one rank: its process here (local collect) or its worker server."""

    rank: int
    host: str
    pid: int | None
    outcomes: tuple[m.Outcome, ...]
    dumped_at_ns: int | None = None  # when its dump arrived, on collect's clock

    @property
    def dump(self) -> m.Outcome | None:
        return next((o for o in self.outcomes if o.kind == "dump" and o.ok), None)

    @property
    def stacks(self) -> tuple[m.Outcome, ...]:
        return tuple(o for o in self.outcomes if o.kind == "stacks" and o.ok)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectResult:
    directory: Path
    ranks: tuple[RankCollection, ...]
    others: int = 0  # rank processes of other users left alone (no --any-user)
    problems: tuple[str, ...] = ()  # registry values not usable (--store); local: what would do
    next_time: NextTime | None = None  # no rank's dump: what makes the next collect get them

    @property
    def ok(self) -> bool:
        return bool(self.ranks) and all(r.dump is not None for r in self.ranks)


Keep = Callable[[], bool] | None

_SAFE_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def host_folder(host: str) -> str:
    """The folder name of a host's evidence: the host name where it is a plain name, else
    ``host-<crc>`` (a name from a job's registry never makes a path of its own)."""
    if _SAFE_HOST.match(host) and ".." not in host:
        return host
    return f"host-{zlib.crc32(host.encode('utf-8', 'replace')):08x}"


def _one(proc: RankProcess, out: OutDir, opts: CollectOptions, exe: str | None) -> RankCollection:
    outcomes: list[m.Outcome] = []
    if opts.pyspy:
        outcomes.append(m.pyspy(proc, out, opts.pyspy_timeout_s, exe))
    dumped_at: int | None = None
    for ask in (recorder, m.nccl_pipe, m.worker_server_dump):
        if any(o.kind == "dump" and o.ok for o in outcomes):
            break
        timeout = opts.http_timeout_s if ask is m.worker_server_dump else opts.dump_timeout_s
        outcomes.append(ask(proc, out, timeout))
        if outcomes[-1].ok:  # (a dump the rank wrote by itself: when it wrote it)
            dumped_at = outcomes[-1].written_ns or time.time_ns()
    outcomes.append(m.worker_server_traceback(proc, out, opts.http_timeout_s))
    host = socket.gethostname()
    return RankCollection(
        rank=proc.rank, host=host, pid=proc.pid, outcomes=tuple(outcomes), dumped_at_ns=dumped_at
    )


def _size(path: str) -> int | None:
    """The dump's size, for the manifest (the analysis checks it against the file)."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return None


def _write_manifest(
    folder: OutDir,
    host: str,
    how: str,
    clock: str,
    done: list[RankCollection],
    world: int | None = None,
) -> None:
    ranks = []
    for rc in done:
        dump = rc.dump
        ranks.append(
            CollectedRank(
                rank=rc.rank,
                host=rc.host,
                pid=rc.pid,
                dumped_at_ns=rc.dumped_at_ns,
                dump=os.path.basename(dump.paths[0]) if dump and dump.paths else None,
                how=f"{dump.mechanism} ({dump.detail})" if dump else None,
                size_bytes=_size(dump.paths[0]) if dump and dump.paths else None,
            )
        )
    collector = {"host": socket.gethostname(), "pid": os.getpid(), "how": how}
    doc = manifest_document(host, collector, clock, ranks)
    if world is not None:  # (read by evidence/collected.py: a rank without a stack is seen)
        doc["world_size"] = world
    write_file(folder, MANIFEST_NAME, (json.dumps(doc, indent=1) + "\n").encode())


def one_job(procs: list[RankProcess]) -> None:
    """Refuse the ranks of several jobs at once (``SeveralJobs``): their stack files and dumps
    would overwrite each other's, and one analysis of both would mean nothing. Ranks are of
    one job when their rendezvous and run id agree (``procs.job_of``); a rank number seen
    twice with the same ones is two jobs too."""
    jobs: dict[tuple[tuple[str, str], ...], list[RankProcess]] = {}
    for p in procs:
        jobs.setdefault(job_of(p), []).append(p)
    twice = any(len({p.rank for p in ps}) < len(ps) for ps in jobs.values())
    if len(jobs) <= 1 and not twice:
        return
    described = []
    for key, ps in sorted(jobs.items()):
        name = " ".join(f"{k}={v}" for k, v in key) or "no MASTER_PORT or run id"
        ranks = format_ranks(sorted({p.rank for p in ps}))
        pids = ",".join(str(p.pid) for p in ps[:4]) + (",…" if len(ps) > 4 else "")
        cmd = ps[0].cmdline[:60]
        described.append(f"{name} (ranks {ranks}, pids {pids}: {cmd})")
    pick = _telling_apart(sorted(jobs))
    what = f"{len(jobs)} jobs" if len(jobs) > 1 else "one rank number held by several processes"
    raise SeveralJobs(
        f"{what} on this host: " + "; ".join(described) + f"; collect one at a time, e.g. "
        f"frtrace collect DIR {pick}"
    )


def _telling_apart(jobs: list[tuple[tuple[str, str], ...]]) -> str:
    """``--env NAME=VALUE`` that picks one job: NAME's value differs from every other job's
    (MASTER_PORT first: jobs on one host often share MASTER_ADDR, never a port)."""
    for name in ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "MASTER_ADDR"):
        seen = [dict(key).get(name) for key in jobs]
        unique = [v for v in seen if v is not None and seen.count(v) == 1]
        if len(jobs) > 1 and unique:
            return f"--env {name}={unique[0]}"
    return "--env NAME=VALUE (a variable whose value differs between the jobs)"


def collect(directory: Path, options: CollectOptions | None = None) -> CollectResult:
    """Collect every rank process found on this host into ``directory/<host>/`` (created
    0700), so every host of the job can collect into one shared ``directory``."""
    opts = options or CollectOptions()
    registry.clean()  # killed jobs' recorder entries (dead pids) in this user's registry
    procs, others = scan_rank_processes(opts.match_env, opts.pids, any_user=opts.any_user)
    one_job(procs)  # before anything is written
    host = socket.gethostname()
    with open_out_dir(directory) as top, top.sub(host_folder(host)) as folder:
        exe = shutil.which("py-spy") if opts.pyspy else None
        if not procs:
            return CollectResult(directory=folder.path, ranks=(), others=len(others))
        with ThreadPoolExecutor(max_workers=min(32, len(procs))) as pool:
            done = list(pool.map(lambda p: _one(p, folder, opts, exe), procs))
        _write_manifest(folder, host, "local", "local", done, world_size(procs))
        got = any(rc.dump for rc in done)
        hint = () if got else store_hint(procs)
        hint += save_ras_status(folder)  # NCCL RAS's view, where ncclras is installed
        return CollectResult(
            directory=folder.path,
            ranks=tuple(done),
            others=len(others),
            problems=hint,
            next_time=None if got else next_time(procs, [_has_recorder(rc) for rc in done]),
        )


def _has_recorder(rc: RankCollection) -> bool:
    """A ``frtrace.recorder`` was found in the rank (asked, or refused: the table says why)."""
    return any(o.mechanism == "recorder" and not o.skipped for o in rc.outcomes)


def world_size(procs: list[RankProcess]) -> int | None:
    """The job's world size, where its ranks here agree on ``WORLD_SIZE`` (and it holds them)."""
    said = {p.env.get("WORLD_SIZE", "") for p in procs}
    value = said.pop() if len(said) == 1 else ""
    if not value.isdigit() or int(value) <= max(p.rank for p in procs):
        return None
    return int(value)


def store_hint(procs: list[RankProcess]) -> tuple[str, ...]:
    """No rank's dump was got here: a job that runs torch's debug server is reached through
    its store (``--store MASTER_ADDR:MASTER_PORT``, from the ranks' environment)."""
    addr = next((p.env for p in procs if "MASTER_ADDR" in p.env and "MASTER_PORT" in p.env), None)
    if addr is None:
        return ()
    where = f"{addr['MASTER_ADDR']}:{addr['MASTER_PORT']}"
    return (
        "no rank's dump on this host; if the job runs torch's debug server "
        f"(torch.distributed.debug.start_debug_server), frtrace collect DIR --store {where} "
        "reaches every rank through the job's store",
    )


def collect_from_store(
    directory: Path, host: str, port: int, options: CollectOptions | None = None
) -> CollectResult:
    """Collect every rank that torch's debug server registered in the job's store at
    ``host:port`` into ``directory/<rank's host>/``."""
    opts = options or CollectOptions()
    workers, problems = read_registry(host, port, opts.http_timeout_s)
    answered: set[str] = set()  # the hosts with a folder: a rank of theirs answered
    with open_out_dir(directory) as top:

        def save(worker: Worker, name: str, answer: Answer, keep: Keep) -> str | None:
            with top.sub(host_folder(worker.host)) as folder:
                answered.add(worker.host)
                written = write_file(folder, name, answer, keep)
            return None if written is None else str(written)

        fetched = fetch_all(
            workers,
            opts.http_timeout_s,
            pyspy=opts.pyspy,
            dump_name=lambda r: f"{DUMP_PREFIX}{r}",
            save=save,
        )
        by_host: dict[str, list[StoreRank]] = {}
        for got in fetched:
            by_host.setdefault(got.worker.host, []).append(got)
        done: list[RankCollection] = []
        for rank_host, items in sorted(by_host.items()):
            here = [
                RankCollection(
                    rank=got.worker.rank,
                    host=rank_host,
                    pid=got.pid,
                    outcomes=got.outcomes,
                    dumped_at_ns=got.dumped_at_ns,
                )
                for got in items
            ]
            if rank_host in answered:
                with top.sub(host_folder(rank_host)) as folder:
                    _write_manifest(folder, rank_host, "store", "collector", here)
            done.extend(here)
    done.sort(key=lambda rc: rc.rank)
    return CollectResult(directory=directory, ranks=tuple(done), problems=tuple(problems))


def _cell(outcomes: list[m.Outcome]) -> str:
    return ", ".join(f"{o.mechanism} ({o.detail})" for o in outcomes) or "-"


def render_table(result: CollectResult) -> list[list[str]]:
    """One row per rank: rank, host, pid, the dump and how, the stacks and how, and what was
    tried for the kind (dump, stacks) of which nothing was got."""
    rows = []
    for rc in result.ranks:
        dump = rc.dump
        got = {o.kind for o in rc.outcomes if o.ok}
        missed = [o for o in rc.outcomes if not o.ok and o.kind not in got]  # only where none
        rows.append(
            [
                str(rc.rank),
                rc.host,
                "?" if rc.pid is None else str(rc.pid),
                f"{dump.mechanism} ({dump.detail})" if dump else "NONE",
                _cell(list(rc.stacks)),
                "; ".join(f"{o.mechanism}: {o.detail}" for o in missed) or "-",
            ]
        )
    return rows
