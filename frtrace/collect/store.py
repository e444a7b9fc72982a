"""``frtrace collect --store HOST:PORT``: every rank of a multi-host job, from one command.

torch's debug server (``torch.distributed.debug.start_debug_server``, torch 2.10+) starts an
HTTP worker server in every rank and registers its address in the job's TCPStore (the
rendezvous store at ``MASTER_ADDR:MASTER_PORT``) as ``debug_server/rank<N>`` ->
``http://<host>:<port>``. This module reads that registry (through torch's own TCPStore
client: the wire protocol is torch's, so the job's torch must be importable here) and asks
every rank's worker server, in parallel and each request bounded in time, for:

* ``pyspy_dump?nonblocking=1``: py-spy's view of the rank (thread names, idle or active, the
  pid), where py-spy is installed in the job's environment; the process is not paused;
* ``dump_traceback``: every thread's Python stack (faulthandler's text);
* its Flight Recorder buffer as JSON: ``dump_nccl_trace_json`` where the rank serves it (NCCL
  builds) and recorded entries, else ``fr_trace_json``.

Nothing else is asked of the job: no signal, no file of its is read. What comes back is
written 0600 under ``DIR/<host>/`` (folders 0700), with a manifest
(:mod:`frtrace.job.manifest`) naming each rank's host, pid and dump time.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from frtrace.collect.mechanisms import Outcome
from frtrace.errors import CollectError

__all__ = [
    "REGISTRY_PREFIX",
    "StoreRank",
    "Worker",
    "fetch_rank",
    "parse_store_address",
    "read_registry",
]

REGISTRY_PREFIX = "debug_server"  # torch.distributed.debug._store.tcpstore_client's prefix
_KEY = re.compile(r"^rank(\d{1,7})$")
_PID = re.compile(rb"^Process (\d+): ", re.MULTILINE)
_MAX_BODY = 512 * 1024 * 1024  # one rank's dump: 20,000 entries with frames fit
_PROBE_GAP = 64  # without list_keys: ranks probed past the last one found


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """One rank's worker server, as the registry names it."""

    rank: int
    url: str  # "http://node-7:40123"
    host: str  # "node-7"
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreRank:
    """What was fetched from one rank: each outcome (its ``paths``: where ``save`` put each
    answer), and the rank's pid where py-spy said."""

    worker: Worker
    outcomes: tuple[Outcome, ...]
    pid: int | None
    dumped_at_ns: int | None


# Where an answer goes as soon as it arrives (a job of 4,096 ranks is not held in memory):
# (the rank's worker, a file name, the content) -> the path it was written to.
Save = Callable[[Worker, str, bytes], str]


def parse_store_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CollectError(
            f"--store {text!r}: give the job's store as HOST:PORT, its MASTER_ADDR:MASTER_PORT "
            "(e.g. --store node-0:29500)"
        )
    return host, int(port)


def _connect(host: str, port: int, timeout_s: float) -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        raise CollectError(
            "--store needs torch, to speak to the job's TCPStore: run collect where the job's "
            "torch is installed, or run `frtrace collect DIR` on each host instead"
        ) from None
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            host_name=host,
            port=port,
            is_master=False,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise CollectError(
            f"--store {host}:{port}: no TCPStore answered within {timeout_s:g} s ({first}); "
            "give the job's MASTER_ADDR:MASTER_PORT, from a host that can reach it"
        ) from None


def _registered_keys(store: Any) -> list[str]:
    """The registry's keys, ``rank<N>``: by listing the store where torch can, else by
    asking for rank 0, 1, ... until ``_PROBE_GAP`` in a row are missing."""
    lead = f"{REGISTRY_PREFIX}/"
    try:
        keys = store.list_keys()
    except (AttributeError, RuntimeError, NotImplementedError):
        keys = None
    if keys is not None:
        return [k[len(lead) :] for k in keys if k.startswith(lead) and _KEY.match(k[len(lead) :])]
    found: list[str] = []
    rank, gap = 0, 0
    while gap < _PROBE_GAP:
        key = f"rank{rank}"
        if store.check([f"{lead}{key}"]):
            found.append(key)
            gap = 0
        else:
            gap += 1
        rank += 1
    return found


def parse_worker_url(rank: int, raw: bytes) -> Worker | str:
    """A registry value -> the worker, or one line saying why it cannot be used."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return f"rank {rank}: registry value {text[:80]!r} is not a URL"
    if parts.scheme != "http" or not parts.hostname or port is None:
        return f"rank {rank}: registry value {text[:80]!r} is not http://HOST:PORT"
    return Worker(rank=rank, url=f"http://{parts.netloc}", host=parts.hostname, port=port)


def read_registry(host: str, port: int, timeout_s: float) -> tuple[list[Worker], list[str]]:
    """Every rank's worker server registered in the store at ``host:port``, and one line per
    registry value that cannot be used. ``CollectError`` when no store answers or it holds no
    registry."""
    store = _connect(host, port, timeout_s)
    keys = _registered_keys(store)
    if not keys:
        raise CollectError(
            f"the store at {host}:{port} answered but holds no debug server registry (no "
            f"{REGISTRY_PREFIX}/rank<N> key): start it in the job with "
            "torch.distributed.debug.start_debug_server(), or run `frtrace collect DIR` on "
            "each host"
        )
    values = store.multi_get([f"{REGISTRY_PREFIX}/{k}" for k in keys])
    workers: list[Worker] = []
    bad: list[str] = []
    for key, raw in zip(keys, values, strict=True):
        rank = int(key[4:])
        got = parse_worker_url(rank, bytes(raw))
        if isinstance(got, str):
            bad.append(got)
        else:
            workers.append(got)
    return sorted(workers, key=lambda w: w.rank), bad


def _request(
    worker: Worker, method: str, path: str, timeout_s: float, limit: int
) -> tuple[int, bytes]:
    """(status, body) of one request to the rank's worker server; a body over ``limit``
    bytes is refused."""
    conn = http.client.HTTPConnection(worker.host, worker.port, timeout=timeout_s)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read(limit + 1)
        if len(body) > limit:
            raise OSError(f"answer larger than {limit >> 20} MiB")
        return resp.status, body
    finally:
        conn.close()


def _post(worker: Worker, handler: str, query: str, timeout_s: float) -> bytes:
    """``POST /handler/<handler>?<query>`` on the rank's worker server; its body on 200."""
    path = f"/handler/{handler}" + (f"?{query}" if query else "")
    status, body = _request(worker, "POST", path, timeout_s, _MAX_BODY)
    if status != 200:
        raise OSError(f"HTTP {status}: {body[:100].decode(errors='replace').strip()}")
    return body


def _handlers(worker: Worker, timeout_s: float) -> set[str]:
    """The handlers the rank's worker server lists (``GET /handler/``)."""
    status, body = _request(worker, "GET", "/handler/", timeout_s, 1 << 20)
    names = json.loads(body) if status == 200 else []
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)[:120] or type(exc).__name__


def _has_entries(body: bytes) -> bool:
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and bool(doc.get("entries"))


def fetch_rank(
    worker: Worker,
    timeout_s: float,
    *,
    pyspy: bool,
    dump_name: Callable[[int], str],
    save: Save,
) -> StoreRank:
    """Everything one rank's worker server gives, each answer handed to ``save``: its stacks
    first (the moment as found), then its Flight Recorder dump. Never raises for a rank that
    is gone or slow (nor for an answer ``save`` cannot write: that outcome says why)."""
    mech = "debug_server"
    outcomes: list[Outcome] = []
    pid: int | None = None

    def keep(kind: str, name: str, body: bytes, label: str) -> bool:
        try:
            path = save(worker, name, body)
        except OSError as exc:
            detail = f"{name}: not written ({exc.strerror or exc})"
            outcomes.append(Outcome(mechanism=mech, kind=kind, ok=False, detail=detail))
            return False
        outcomes.append(Outcome(mechanism=mech, kind=kind, ok=True, detail=label, paths=(path,)))
        return True

    try:
        handlers = _handlers(worker, timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        detail = f"{worker.url} did not answer ({_why(exc)})"
        outcomes.append(Outcome(mechanism=mech, kind="dump", ok=False, detail=detail))
        return StoreRank(worker=worker, outcomes=tuple(outcomes), pid=None, dumped_at_ns=None)

    def ask(handler: str, query: str, kind: str, name: str, label: str) -> bytes | None:
        if handler not in handlers:
            why = f"{handler}: not served by this torch"
            outcomes.append(Outcome(mechanism=mech, kind=kind, ok=False, skipped=True, detail=why))
            return None
        try:
            body = _post(worker, handler, query, timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            detail = f"{handler}: {_why(exc)}"
            outcomes.append(Outcome(mechanism=mech, kind=kind, ok=False, detail=detail))
            return None
        return body if keep(kind, name, body, label) else None

    if pyspy:
        got = ask(
            "pyspy_dump", "nonblocking=1", "stacks", f"pyspy_rank_{worker.rank}.txt", "py-spy"
        )
        if got is not None and (m := _PID.search(got)) is not None:
            pid = int(m[1])
    ask("dump_traceback", "", "stacks", f"traceback_rank_{worker.rank}.txt", "dump_traceback")
    name = f"{dump_name(worker.rank)}.json"
    dumped_at: int | None = None
    if "dump_nccl_trace_json" in handlers:  # an NCCL build: its own recorder's entries
        try:
            body = _post(worker, "dump_nccl_trace_json", "", timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            detail = f"dump_nccl_trace_json: {_why(exc)}"
            outcomes.append(Outcome(mechanism=mech, kind="dump", ok=False, detail=detail))
            body = b""
        arrived = time.time_ns()
        if _has_entries(body) and keep("dump", name, body, "NCCL"):
            dumped_at = arrived
    if dumped_at is None and ask("fr_trace_json", "", "dump", name, "fr_trace_json"):
        dumped_at = time.time_ns()
    return StoreRank(worker=worker, outcomes=tuple(outcomes), pid=pid, dumped_at_ns=dumped_at)


def fetch_all(
    workers: list[Worker],
    timeout_s: float,
    *,
    pyspy: bool,
    dump_name: Callable[[int], str],
    save: Save,
) -> list[StoreRank]:
    """Every rank at once (at most 64 ranks asked at a time): as long as the slowest rank
    where there are no more than 64, in rank order."""
    if not workers:
        return []

    def one(w: Worker) -> StoreRank:
        return fetch_rank(w, timeout_s, pyspy=pyspy, dump_name=dump_name, save=save)

    with ThreadPoolExecutor(max_workers=min(64, len(workers))) as pool:
        return list(pool.map(one, workers))
