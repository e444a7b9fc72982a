"""NCCL RAS's answers saved beside the dumps: each communicator's ranks, their processes,
states and launched collectives, and the ranks RAS could not reach.

NCCL's RAS threads (NCCL 2.24+) watch each other over their own TCP network; the ``ncclras``
client asks one of them for the whole job (``collect`` saves ``ncclras -f json`` as
``ncclras.json``). The JSON output (NCCL 2.28.7+; NVIDIA/nccl ``src/ras/client_support.cc``,
``rasDumpCommsToJSON``, and ``docs/.../troubleshooting/ras.rst``)::

    {"nccl_version": "2.29.1", "timestamp": "2025-12-19 13:06:53", "communicators": [
      {"hash": "0xae94...", "secondary_hash": "0xb7e7...:0xb824...", "size": 2,
       "ranks": [{"rank": 0, "host": "172.16.64.245", "pid": 1524344, "cuda_dev": 0,
                  "status": {"init_state": 0, "async_error": 0, "finalize_called": false,
                             "destroy_flag": false, "abort_flag": false},
                  "collective_counts": {"Broadcast": 0, ..., "AllReduce": 0}}],
       "missing_ranks": [{"rank": 1, "host": ..., "pid": ..., "cuda_dev": 1,
                          "status": {"unresponsive": true, "considered_dead": false}}]}],
     "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}

A rank's state is read as RAS's text output names it (``rasCommRankStatus``'s order): its
abort flag ABORT, else finalize or destroy FINALIZE, else ``init_state`` 0 RUNNING, else INIT;
an ``init_state`` or ``async_error`` other than 0 (success) or 7 (in progress) is an error.
``host`` "unknown" and ``pid`` -1 are what RAS writes where it does not know the process.
``collective_counts`` are each function's operations the rank has launched (``comm->
seqNumber``, NCCL 2.26+). Monitor mode (``ncclras -m -f json``, NCCL 2.29+) writes one JSON
object per event (``{"timestamp", "group", "event": "PEER_DEAD", "peer": {"host", "pid",
"cuda_devs", "nvml_devs"}, "details"}``), one after another: every object of a file is read.

Untrusted input, read within a budget (``frtrace.incident.budget``): the file's size
(``MAX_RAS_BYTES``), the time its objects take (``LOG_SECONDS``), JSON nesting, a rank in
``[0, MAX_WORLD_SIZE)``, numbers of at most ``MAX_DIGITS`` digits, strings cut short. What
cannot be read is one line in ``RasFiles.problems``, never the analysis; unknown keys are
ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from frtrace.incident.budget import (
    LOG_SECONDS,
    MAX_RAS_BYTES,
    MAX_WORLD_SIZE,
    Deadline,
    read_listed,
)
from frtrace.incident.layout import SideFile

__all__ = [
    "RasComm",
    "RasEvent",
    "RasFiles",
    "RasMissing",
    "RasRank",
    "RasStatus",
    "read_ras",
]

_STATES = ("RUNNING", "INIT", "FINALIZE", "ABORT")
_OK = (0, 7)  # ncclSuccess, ncclInProgress: no error
_MAX_TEXT = 256  # of a host, a hash, a version, an event's name or details
_MAX_PID = 1 << 31
_MAX_COUNT = 1 << 63
_DECODE = json.JSONDecoder()
_NEXT_OBJECT = re.compile(r"\n(?=\{)")
_BROKEN = object()  # a part that does not read as JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class RasRank:
    """One rank of a communicator that answered RAS."""

    rank: int  # the communicator's own rank
    host: str | None  # its process's address as RAS knows it; None: "unknown"
    pid: int | None  # None: RAS did not know it (-1)
    cuda_dev: int | None
    state: str  # RUNNING, INIT, FINALIZE or ABORT
    error: bool  # an init or async error
    counts: tuple[tuple[str, int], ...]  # collectives launched, per NCCL function


@dataclass(frozen=True, slots=True, kw_only=True)
class RasMissing:
    """A rank of a communicator whose data RAS did not get."""

    rank: int
    host: str | None
    pid: int | None
    cuda_dev: int | None
    unresponsive: bool  # RAS could not reach it while collecting
    dead: bool  # unreachable for long: RAS considers its process dead, for good


@dataclass(frozen=True, slots=True, kw_only=True)
class RasComm:
    """One communicator of a RAS answer."""

    hash: str  # "0xae94423cfbb2ef4a"
    secondary: str  # with ``hash``, unique ("0x...:0x...")
    size: int
    ranks: tuple[RasRank, ...]
    missing: tuple[RasMissing, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RasStatus:
    """One ``ncclras -f json`` answer."""

    source: str  # the file it was read from (relative path)
    nccl_version: str | None
    timestamp: str | None  # the answering host's local time, as written (no zone: display)
    comms: tuple[RasComm, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RasEvent:
    """One monitor-mode event about a process."""

    source: str
    timestamp: str | None
    event: str  # "PEER_DEAD", "PEER_UNRESPONSIVE", ...
    host: str | None
    pid: int | None
    details: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RasFiles:
    """Every RAS file of a folder, read."""

    statuses: tuple[RasStatus, ...] = ()
    events: tuple[RasEvent, ...] = ()
    files: tuple[str, ...] = ()  # the files read (relative paths)
    problems: tuple[str, ...] = ()  # one line per file or part that could not be read

    def __bool__(self) -> bool:
        return bool(self.statuses or self.events)


def read_ras(files: Sequence[SideFile]) -> RasFiles:
    """The RAS files among ``files`` (the discovery's side files, kind ``"ras"``), read."""
    statuses: list[RasStatus] = []
    events: list[RasEvent] = []
    found: list[str] = []
    problems: list[str] = []
    for file in files:
        if file.kind != "ras":
            continue
        rel = file.relative
        try:
            if file.refused is not None:
                raise ValueError(file.refused)
            data = file.data if file.data is not None else _read(file)
            if len(data) > MAX_RAS_BYTES:
                raise ValueError(f"larger than {MAX_RAS_BYTES:,} bytes: not read")
            text = data.decode("utf-8")
        except (OSError, ValueError) as exc:  # (UnicodeDecodeError is a ValueError)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            problems.append(f"{rel}: {why[:200]}; NCCL RAS's answer not used")
            continue
        said, skipped = _read_text(text, rel, statuses, events)
        if said:
            found.append(rel)
        if skipped:
            problems.append(f"{rel}: {skipped}")
    return RasFiles(
        statuses=tuple(statuses),
        events=tuple(events),
        files=tuple(found),
        problems=tuple(problems),
    )


def _read(file: SideFile) -> bytes:
    return b"".join(read_listed(file.path, file.size_bytes, MAX_RAS_BYTES))


def _read_text(
    text: str, rel: str, statuses: list[RasStatus], events: list[RasEvent]
) -> tuple[int, str | None]:
    """The answers and events of one file's text: how many were read, and a line saying what
    was not (None where all was)."""
    said = bad = 0
    deadline = Deadline(LOG_SECONDS, every=16)
    for doc in _objects(text, deadline):
        if isinstance(doc, dict) and isinstance(doc.get("communicators"), list):
            statuses.append(_status(doc, rel))
            said += 1
        elif isinstance(doc, dict) and isinstance(doc.get("event"), str):
            events.append(_event(doc, rel))
            said += 1
        else:
            bad += 1
    if deadline.stopped_at is not None:
        return said, f"read for {LOG_SECONDS:.0f} s; the rest is not read"
    if not said:
        return 0, (
            "no NCCL RAS JSON in it (ncclras -f json, NCCL 2.28.7+; its text output is not "
            "read); not used"
        )
    return said, f"{bad} part(s) that are no RAS answer or event: skipped" if bad else None


def _objects(text: str, deadline: Deadline) -> Iterator[Any]:
    """Every JSON value of ``text`` that starts a line with ``{`` (an answer; a monitor's
    events, one after another; NCCL indents what is inside), up to the next such line; a part
    that does not read as one is ``_BROKEN``, a line before the first (a terminal's) skipped.
    Linear in the text: each part is read once, on its own."""
    starts = [0, *(m.end() for m in _NEXT_OBJECT.finditer(text))]
    for i, start in enumerate(starts):
        if deadline.expired(i):
            return
        part = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)].strip()
        if not part.startswith("{"):
            continue
        try:
            yield _DECODE.raw_decode(part)[0]
        except (ValueError, RecursionError):
            yield _BROKEN


def _int(value: Any, low: int = 0, high: int = _MAX_COUNT) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value < high else None


def _text(value: Any) -> str | None:
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def _host(value: Any) -> str | None:
    host = _text(value)
    return None if not host or host == "unknown" else host


def _status(doc: dict[str, Any], rel: str) -> RasStatus:
    comms = []
    for item in doc["communicators"]:
        comm = _comm(item) if isinstance(item, dict) else None
        if comm is not None:
            comms.append(comm)
    return RasStatus(
        source=rel,
        nccl_version=_text(doc.get("nccl_version")),
        timestamp=_text(doc.get("timestamp")),
        comms=tuple(comms),
    )


def _comm(item: dict[str, Any]) -> RasComm | None:
    """One communicator; None where it has no hash or size (nothing can be said of it)."""
    hash_, size = _text(item.get("hash")), _int(item.get("size"), 1, MAX_WORLD_SIZE + 1)
    if not hash_ or size is None:
        return None
    ranks = [_rank(r, size) for r in _list(item.get("ranks"))]
    missing = [_missing(r, size) for r in _list(item.get("missing_ranks"))]
    return RasComm(
        hash=hash_,
        secondary=_text(item.get("secondary_hash")) or "",
        size=size,
        ranks=tuple(r for r in ranks if r is not None),
        missing=tuple(m for m in missing if m is not None),
    )


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _process(item: dict[str, Any], size: int) -> tuple[int, str | None, int | None] | None:
    rank = _int(item.get("rank"), 0, size)
    if rank is None:
        return None
    return rank, _host(item.get("host")), _int(item.get("pid"), 1, _MAX_PID)


def _rank(item: dict[str, Any], size: int) -> RasRank | None:
    who = _process(item, size)
    if who is None:
        return None
    status = item.get("status") if isinstance(item.get("status"), dict) else {}
    assert isinstance(status, dict)
    init, error = _int(status.get("init_state"), -(1 << 31)), _int(status.get("async_error"))
    if status.get("abort_flag") is True:
        state = _STATES[3]
    elif status.get("finalize_called") is True or status.get("destroy_flag") is True:
        state = _STATES[2]
    else:
        state = _STATES[0] if init == 0 else _STATES[1]
    counts = item.get("collective_counts")
    return RasRank(
        rank=who[0],
        host=who[1],
        pid=who[2],
        cuda_dev=_int(item.get("cuda_dev"), 0, 1 << 16),
        state=state,
        error=(init is not None and init not in _OK) or (error is not None and error not in _OK),
        counts=tuple(
            (name[:_MAX_TEXT], n)
            for name, value in (counts.items() if isinstance(counts, dict) else ())
            if (n := _int(value)) is not None
        ),
    )


def _missing(item: dict[str, Any], size: int) -> RasMissing | None:
    who = _process(item, size)
    if who is None:
        return None
    status = item.get("status") if isinstance(item.get("status"), dict) else {}
    assert isinstance(status, dict)
    return RasMissing(
        rank=who[0],
        host=who[1],
        pid=who[2],
        cuda_dev=_int(item.get("cuda_dev"), 0, 1 << 16),
        unresponsive=status.get("unresponsive") is True,
        dead=status.get("considered_dead") is True,
    )


def _event(doc: dict[str, Any], rel: str) -> RasEvent:
    peer = doc.get("peer") if isinstance(doc.get("peer"), dict) else {}
    assert isinstance(peer, dict)
    return RasEvent(
        source=rel,
        timestamp=_text(doc.get("timestamp")),
        event=str(doc["event"])[:_MAX_TEXT],
        host=_host(peer.get("host")),
        pid=_int(peer.get("pid"), 1, _MAX_PID),
        details=_text(doc.get("details")) or "",
    )
