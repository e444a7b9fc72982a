"""A worker process of the load (``frtrace.load.workers.parallel``): read the file whose index the
parent sends, send back its result; nothing reaches the terminal from here."""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import signal
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path

from frtrace.base.heap import keep_freed_memory
from frtrace.errors import DumpFormatError, DumpTooLargeError
from frtrace.incident.discover import Candidate
from frtrace.incident.fingerprint import Fingerprint, content_fingerprint, taken
from frtrace.incident.memory import address_space, file_allowance
from frtrace.load.handover.shipped import ColumnWriter, ShippedDump
from frtrace.load.read.parse import ParsedDump, try_parse, try_parse_plain
from frtrace.load.read.unpickle import MAX_DUMP_BYTES

__all__ = ["Result", "read_first", "serve"]

Result = ParsedDump | ShippedDump | DumpFormatError


def serve(
    conn: Connection,
    candidates: Sequence[Candidate],
    workers: int = 1,
    ship_to: Path | None = None,
    fingerprint: bool = False,
) -> None:
    """Worker loop: read the file whose index the parent sends, send back the result.
    ``workers``: how many read at once (each may take its share of the machine's memory).
    ``ship_to``: the entry columns go to a file of this worker's there (a file that cannot be
    written: they go in the message, as without it). ``fingerprint``: each answer is
    (the file's fingerprint, its ``fstat`` taken before it is read (``read_first``), the
    result)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # Everything a worker has to say comes back as its result, in one line; a crash is
    # reported by the parent. So nothing reaches the terminal from here: no fault handler
    # trace, and not the "SystemError: deallocated bytearray object has exported buffers"
    # that CPython 3.11 prints while decoding some corrupt pickles (a BYTEARRAY8 opcode
    # claiming exabytes).
    faulthandler.disable()
    keep_freed_memory()
    _without_pandas()
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
        mark = None
        if fingerprint:
            cand, mark = read_first(cand)
        result: Result
        if ship_to is None:
            result = try_parse(cand)
        else:
            result, writer = _shipped(cand, ship_to, writer)
            if writer is None:  # (not written: this dump and the next go in the message)
                ship_to = None
        try:
            conn.send((mark, result) if fingerprint else result)
        except (OSError, ValueError):  # the parent is gone
            return
        if isinstance(result, DumpTooLargeError):
            return  # after a MemoryError the next file gets a fresh process


def read_first(cand: Candidate) -> tuple[Candidate, Fingerprint | None]:
    """The candidate with its bytes read (``Candidate.data``: the reader takes them from
    there) and its fingerprint: the ``fstat`` of the file opened, taken before they were read,
    and its ends from them. Where that cannot be done (refused unread, too large, cannot be
    opened or read), the candidate as it was, for its reader to say why, and the fingerprint
    taken apart (``taken``; None where the file cannot be opened)."""
    if cand.data is not None or cand.refused is not None or cand.size_bytes > MAX_DUMP_BYTES:
        return cand, taken(cand)
    try:
        with open(os.path.abspath(cand.path), "rb") as f:
            info = os.fstat(f.fileno())
            data = f.read(cand.size_bytes + 1)  # (as ``read_payload``: never more than listed)
    except (OSError, MemoryError):
        return cand, taken(cand)
    return dataclasses.replace(cand, data=data), content_fingerprint(cand, info, data)


def _shipped(
    cand: Candidate, ship_to: Path, writer: ColumnWriter | None
) -> tuple[Result, ColumnWriter | None]:
    """Read ``cand`` straight into the layout of this worker's file (no Arrow on the way) and
    write it there; the result, and the writer (None where the file cannot be written: the
    dump is sent whole)."""
    read = try_parse_plain(cand)
    if isinstance(read, DumpFormatError):
        return read, writer
    try:
        if writer is None:
            writer = ColumnWriter(ship_to, f"worker-{os.getpid()}.columns")
        return writer.ship(read), writer
    except OSError:
        return read.parsed(), None


class _NoPandas:
    """An import finder that answers "not installed" for pandas (``_without_pandas``)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("a load worker does without pandas", name=name)


def _without_pandas() -> None:
    """pyarrow imports pandas on a worker's first ``pa.array`` (to ask whether the argument
    is a pandas object): 0.15 s of each worker's CPU, or 0.45 s of the parent's before it
    could fork them. A worker never makes or reads a pandas object, so where the parent has
    not imported it, pandas is not found here and pyarrow takes it as not installed (the
    parent imports it for the analysis meanwhile)."""
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())


def _limit_memory(allowance: int) -> None:
    """Cap this worker's address space for the next file at what it holds now plus
    ``allowance`` (soft RLIMIT_AS; Linux)."""
    base = address_space()
    if base is None:
        return
    try:
        import resource

        limit = base + allowance
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if limit != soft:  # (file after file, the same limit: setting it took ~30 us)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):
        pass
