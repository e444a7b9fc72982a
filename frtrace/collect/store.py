"""``frtrace collect --store HOST:PORT``: every rank of a multi-host job, from one command.

torch's debug server (``torch.distributed.debug.start_debug_server``, torch 2.10+) starts an
HTTP worker server in every rank and registers its address in the job's TCPStore (the
rendezvous store at ``MASTER_ADDR:MASTER_PORT``) as ``debug_server/rank<N>`` ->
``http://<host>:<port>``. This module reads that registry (through torch's own TCPStore
client, run in a child process killed at the deadline: ``storeclient.py``; the wire protocol
is torch's, so the job's torch must be importable here) and asks every rank's worker server,
in parallel, for:

* ``pyspy_dump?nonblocking=1``: py-spy's view of the rank (thread names, idle or active, the
  pid), where py-spy is installed in the job's environment; the process is not paused;
* ``dump_traceback``: every thread's Python stack (faulthandler's text);
* its Flight Recorder buffer as JSON: ``dump_nccl_trace_json`` where the rank serves it (NCCL
  builds) and recorded entries, else ``fr_trace_json``.

Nothing else is asked of the job: no signal, no file of its is read. Every answer is
hostile input with a budget: one deadline per rank (``--timeout``) that every request of it
(connecting, the headers, the body) must end within, however slowly the worker answers; each
answer streamed to its file a MiB at a time, never past its size limit, never parsed whole
(an NCCL answer is kept when an entry is seen on the way). What comes back is written 0600
under ``DIR/<host>/`` (folders 0700, made only for a host whose rank answered), with a
manifest (:mod:`frtrace.job.manifest`) naming each rank's host, pid and dump time.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from frtrace.collect.mechanisms import Outcome
from frtrace.collect.storeclient import REGISTRY_PREFIX
from frtrace.errors import CollectError, UnsafePathError

__all__ = [
    "REGISTRY_PREFIX",
    "Answer",
    "StoreRank",
    "Worker",
    "fetch_rank",
    "parse_store_address",
    "read_registry",
]

_PID = re.compile(rb"^Process (\d+): ", re.MULTILINE)
_MAX_BODY = 512 * 1024 * 1024  # one rank's dump: 20,000 entries with frames fit
_MAX_STACKS = 64 * 1024 * 1024  # one rank's py-spy or faulthandler text
_MAX_LIST = 1024 * 1024  # the handler list
_CHUNK = 1024 * 1024  # what one read takes of an answer: the memory one rank holds
_HEAD = 4096  # the first bytes of an answer kept (py-spy's pid, an error's words)
_IMPORT_S = 120.0  # for the registry's child process to import torch (before its deadline)
_GRACE_S = 2.0  # past the child's deadline, for torch's own timeout to be the one said
_MAX_REGISTRY_OUT = 128 * 1024 * 1024  # the child's answer: 2^20 URLs of 256 characters fit
# An NCCL answer with at least one entry (a heuristic on the stream, never a parse of it).
_ENTRIES = re.compile(rb'"entries"\s*:\s*\[\s*[^\]\s]')


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


class AnswerFailed(Exception):
    """An answer that could not be read whole: timed out, too large, cut short."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Answer:
    """A worker's answer as it arrives: read a piece at a time (``read`` raises
    :class:`AnswerFailed` past ``limit`` bytes, past the request's deadline, or when the
    answer stops short of what it announced); its first bytes kept (``head``), and whether
    an NCCL answer holds an entry (``has_entries``) seen on the way."""

    def __init__(self, resp: http.client.HTTPResponse, limit: int, cut: threading.Event) -> None:
        self.status = resp.status
        self.size = 0
        self.head = b""
        self.has_entries = False
        self._resp, self._limit, self._cut = resp, limit, cut
        self._tail = b""

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(_CHUNK), b""))
        try:
            chunk = self._resp.read(min(size, _CHUNK))
        except (OSError, http.client.HTTPException) as exc:
            raise AnswerFailed("timed out" if self._cut.is_set() else _why(exc)) from None
        if not chunk:
            if self._cut.is_set():
                raise AnswerFailed("timed out")
            if self._resp.length:  # (http.client ends a short answer quietly)
                raise AnswerFailed(f"answer cut short ({self._resp.length:,} bytes missing)")
            return b""
        self.size += len(chunk)
        if self.size > self._limit:
            raise AnswerFailed(f"answer larger than {self._limit >> 20} MiB")
        if len(self.head) < _HEAD:
            self.head += chunk[: _HEAD - len(self.head)]
        if not self.has_entries:
            window = self._tail + chunk
            self.has_entries = _ENTRIES.search(window) is not None
            self._tail = window[-256:]
        return chunk


# Where an answer goes as it arrives (a job of 4,096 ranks is not held in memory): (the
# rank's worker, a file name, the answer to read to its end, whether to keep it once whole)
# -> the path it was written to, or None when not kept.
Save = Callable[[Worker, str, Answer, Callable[[], bool] | None], str | None]


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


def _registry_child(host: str, port: int, timeout_s: float) -> dict[str, Any]:
    """What the child process (``storeclient.py``) said: torch imported, then one answer
    within ``timeout_s`` (and a grace, for torch's own timeout to be the one said); killed
    past it."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "frtrace.collect.storeclient", host, str(port), f"{timeout_s}"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdout is not None
    out = b""
    deadline = time.monotonic() + _IMPORT_S
    imported = False
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                lines = out.split(b"\n")
                if not imported and len(lines) > 1:
                    imported = True
                    deadline = time.monotonic() + timeout_s + _GRACE_S
                if len(lines) > 2 or (len(lines) > 1 and b'"error"' in lines[0]):
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    what = "answer" if imported else "start (import torch)"
                    return {"error": "deadline", "what": what}
                piece = os.read(proc.stdout.fileno(), _CHUNK)
                if not piece:
                    break
                out += piece
                if len(out) > _MAX_REGISTRY_OUT:
                    return {"error": "store", "why": "its registry is larger than 128 MiB"}
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    for line in out.split(b"\n"):
        try:
            answer = json.loads(line)
        except ValueError:
            break  # (cut short: the child died writing it)
        if isinstance(answer, dict) and "imported" not in answer:
            return answer
    return {"error": "store", "why": f"its reader ended with code {proc.returncode}"}


def _accepts(host: str, port: int, timeout_s: float) -> bool:
    """Does anything accept a TCP connection at ``host:port``? (Asked once, where the child
    gave no answer in time, so that the line says which of the two it was.)"""
    try:
        with socket.create_connection((host, port), timeout=max(0.5, min(timeout_s, 2.0))):
            return True
    except OSError:
        return False


def read_registry(host: str, port: int, timeout_s: float) -> tuple[list[Worker], list[str]]:
    """Every rank's worker server registered in the store at ``host:port``, and one line per
    registry value that cannot be used. ``CollectError`` when no store answers within
    ``timeout_s`` (connecting, torch's ping and reading the registry together), or it holds
    no registry."""
    got = _registry_child(host, port, timeout_s)
    where = f"--store {host}:{port}"
    error = got.get("error")
    if error == "torch":
        raise CollectError(
            "--store needs torch, to speak to the job's TCPStore: run collect where the job's "
            "torch is installed, or run `frtrace collect DIR` on each host instead"
        )
    if error == "connect":
        raise CollectError(
            f"{where}: no TCPStore answered within {timeout_s:g} s ({got.get('why')}); "
            "give the job's MASTER_ADDR:MASTER_PORT, from a host that can reach it"
        )
    if error == "deadline":
        if got.get("what") != "answer":
            raise CollectError(
                f"{where}: torch could not be imported within {_IMPORT_S:g} s, to speak to "
                "the store; try again on a less loaded host"
            )
        if not _accepts(host, port, timeout_s):  # (torch's client still retrying, on a busy host)
            raise CollectError(
                f"{where}: no TCPStore answered within {timeout_s:g} s (nothing accepts "
                "connections there); give the job's MASTER_ADDR:MASTER_PORT, from a host that "
                "can reach it"
            )
        raise CollectError(
            f"{where}: the store did not give its debug server registry within {timeout_s:g} "
            "s (accepted, then silent or slow): give the job's MASTER_ADDR:MASTER_PORT, or a "
            "longer --timeout"
        )
    if error is not None:
        raise CollectError(
            f"{where}: the store's registry could not be read ({str(got.get('why'))[:160]}); "
            "give the job's MASTER_ADDR:MASTER_PORT, or run `frtrace collect DIR` on each host"
        )
    values = got.get("values")
    if not isinstance(values, dict) or not values:
        raise CollectError(
            f"the store at {host}:{port} answered but holds no debug server registry (no "
            f"{REGISTRY_PREFIX}/rank<N> key): start it in the job with "
            "torch.distributed.debug.start_debug_server(), or run `frtrace collect DIR` on "
            "each host"
        )
    workers: list[Worker] = []
    bad: list[str] = []
    for key, raw in values.items():
        rank = int(str(key)[4:])
        parsed = parse_worker_url(rank, str(raw).encode())
        if isinstance(parsed, str):
            bad.append(parsed)
        else:
            workers.append(parsed)
    return sorted(workers, key=lambda w: w.rank), sorted(bad)


@contextmanager
def _ask(worker: Worker, method: str, path: str, deadline: float, limit: int) -> Iterator[Answer]:
    """One request to the rank's worker server, its answer to read before ``deadline``
    (``time.monotonic()``): connecting, the headers and the body together. Past it the
    socket is shut down, so a worker that answers a byte a second is cut off on time."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AnswerFailed("not asked: the rank's --timeout was spent")
    conn = http.client.HTTPConnection(worker.host, worker.port, timeout=left)
    cut = threading.Event()

    def cut_off() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer: threading.Timer | None = None
    try:
        try:
            conn.connect()  # (bounded by its timeout, ``left``)
            # (the watch starts once connected: a rank that refuses costs no thread)
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut_off)
            timer.daemon = True
            timer.start()
            conn.request(method, path)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise AnswerFailed("timed out" if cut.is_set() else _why(exc)) from None
        yield Answer(resp, limit, cut)
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()


def _handlers(worker: Worker, deadline: float) -> set[str]:
    """The handlers the rank's worker server lists (``GET /handler/``)."""
    with _ask(worker, "GET", "/handler/", deadline, _MAX_LIST) as answer:
        body = answer.read()
        names = json.loads(body) if answer.status == 200 else []
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)[:120] or type(exc).__name__


def fetch_rank(
    worker: Worker,
    timeout_s: float,
    *,
    pyspy: bool,
    dump_name: Callable[[int], str],
    save: Save,
) -> StoreRank:
    """Everything one rank's worker server gives, each answer handed to ``save`` as it
    arrives: its stacks first (the moment as found), then its Flight Recorder dump; all of it
    within ``timeout_s`` (one deadline for the rank, every request inside it). Never raises
    for a rank that is gone, slow or hostile (nor for an answer ``save`` cannot write: that
    outcome says why)."""
    mech = "debug_server"
    outcomes: list[Outcome] = []
    pid: int | None = None
    deadline = time.monotonic() + timeout_s

    try:
        handlers = _handlers(worker, deadline)
    except (AnswerFailed, ValueError, RecursionError) as exc:
        why = exc.why if isinstance(exc, AnswerFailed) else "its handler list is not JSON"
        detail = f"{worker.url} did not answer ({why})"
        outcomes.append(Outcome(mechanism=mech, kind="dump", ok=False, detail=detail))
        return StoreRank(worker=worker, outcomes=tuple(outcomes), pid=None, dumped_at_ns=None)

    def ask(
        handler: str, query: str, kind: str, name: str, label: str, *, nccl: bool = False
    ) -> Answer | None:
        """The handler's answer saved as ``name`` (its outcome said); the answer when kept."""
        if handler not in handlers:
            if not nccl:
                why = f"{handler}: not served by this torch"
                outcomes.append(
                    Outcome(mechanism=mech, kind=kind, ok=False, skipped=True, detail=why)
                )
            return None
        path = f"/handler/{handler}" + (f"?{query}" if query else "")
        limit = _MAX_BODY if kind == "dump" else _MAX_STACKS
        try:
            with _ask(worker, "POST", path, deadline, limit) as answer:
                if answer.status != 200:
                    answer.read(100)
                    words = answer.head[:100].decode(errors="replace").strip()
                    raise AnswerFailed(f"HTTP {answer.status}: {words}")
                try:
                    keep = (lambda: answer.has_entries) if nccl else None
                    written = save(worker, name, answer, keep)
                except (UnsafePathError, OSError) as exc:
                    err = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    detail = f"{name}: not written ({err})"
                    outcomes.append(Outcome(mechanism=mech, kind=kind, ok=False, detail=detail))
                    return None
        except AnswerFailed as exc:
            outcomes.append(
                Outcome(mechanism=mech, kind=kind, ok=False, detail=f"{handler}: {exc.why}")
            )
            return None
        if written is None:
            return None
        outcomes.append(Outcome(mechanism=mech, kind=kind, ok=True, detail=label, paths=(written,)))
        return answer

    if pyspy:
        got = ask(
            "pyspy_dump", "nonblocking=1", "stacks", f"pyspy_rank_{worker.rank}.txt", "py-spy"
        )
        if got is not None and (m := _PID.search(got.head)) is not None:
            pid = int(m[1])
    ask("dump_traceback", "", "stacks", f"traceback_rank_{worker.rank}.txt", "dump_traceback")
    name = f"{dump_name(worker.rank)}.json"
    dumped_at: int | None = None
    # an NCCL build: its own recorder's entries, kept when there is one
    if ask("dump_nccl_trace_json", "", "dump", name, "NCCL", nccl=True) is not None:
        dumped_at = time.time_ns()
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
    """Every rank at once (at most 64 ranks asked at a time), each within ``timeout_s``: as
    long as the slowest rank where there are no more than 64, in rank order."""
    if not workers:
        return []

    def one(w: Worker) -> StoreRank:
        return fetch_rank(w, timeout_s, pyspy=pyspy, dump_name=dump_name, save=save)

    with ThreadPoolExecutor(max_workers=min(64, len(workers))) as pool:
        return list(pool.map(one, workers))
