"""A file compressed on its own (``rank_1.gz``, ``train.log.gz``, ``stacks_rank_2.json.zst``),
as real jobs' files are uploaded to object storage: unpacked in memory, bounded.

A compressed file is known for what its name without the suffix says (``compressed_name``:
``comm_lib_trace_rank_3.gz`` is rank 3's dump, ``train.log.bz2`` a log), in a folder and in an
archive alike (``frtrace.incident.layout``, ``frtrace.incident.archive``); its content is
unpacked here, once, in stage 0, and handed on as bytes (``Candidate.data``,
``SideFile.data``), so that the dump reader, the stack and log readers and the copies' hashes
read it as they read an archive's member. The caches key on the compressed file itself (its
path, size, times and ends: ``frtrace.incident.fingerprint``).

``.gz`` (every member of a multi-member file), ``.bz2`` and ``.xz`` with the standard library;
``.zst`` with the ``zstandard`` package where it is installed, else the file is refused in one
line that says ``pip install zstandard``. Unpacking is streamed, a MiB at a time, never past a
limit: a dump's ``MAX_DUMP_BYTES``, a stack sample's or a manifest's ``MAX_STACK_BYTES``
(past it: refused), a log's or an error file's last ``MAX_LOG_BYTES`` kept while it is read
through (at most ``MAX_LOG_UNPACKED_BYTES``), each within ``UNPACK_SECONDS``; all the files
of one folder or archive unpack to ``MAX_UNPACKED_BYTES`` at most and hold ``MAX_HELD_BYTES``
(and a quarter of the machine's memory) at most. What is past a limit, damaged or truncated
costs that file, in one line (``Refused``), never the analysis nor the machine.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import importlib
import lzma
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from frtrace.base.printable import short_message
from frtrace.incident.budget import MAX_DUMP_BYTES, MAX_WORLD_SIZE
from frtrace.incident.kinds import (
    MAX_LOG_BYTES,
    MAX_STACK_BYTES,
    SNIFF_BYTES,
    NameKind,
    kind_by_name,
    looks_like_stacks,
    may_be_stacks,
)
from frtrace.incident.memory import archive_bytes

__all__ = [
    "COMPRESSED_SUFFIXES",
    "MAX_HELD_BYTES",
    "MAX_LOG_UNPACKED_BYTES",
    "MAX_UNPACKED_BYTES",
    "UNPACK_SECONDS",
    "Method",
    "Packed",
    "Refused",
    "Unpacking",
    "compressed_name",
    "sort_packed",
    "unpack",
]

Method = Literal["gzip", "bz2", "xz", "zstd"]
# What the name's last suffix says the file is compressed with.
COMPRESSED_SUFFIXES: dict[str, Method] = {
    ".gz": "gzip",
    ".bz2": "bz2",
    ".xz": "xz",
    ".zst": "zstd",
}
# A log is read through for its last bytes (``MAX_LOG_BYTES``); past this, it is refused.
MAX_LOG_UNPACKED_BYTES = 4 << 30
# All the compressed files of one folder or archive unpack to at most this in all (the bytes
# read through and dropped included), and the unpacked bytes kept hold at most MAX_HELD_BYTES
# (and a quarter of the machine's memory): past either, the next files are refused unread.
MAX_UNPACKED_BYTES = 8 << 30
MAX_HELD_BYTES = 4 << 30
# The time one file may take to unpack (a real 1 GiB dump in bz2, the slowest, takes ~20 s).
UNPACK_SECONDS = 60.0
CHUNK = 1 << 20  # unpacked bytes read at a time: the limits are checked between two
ZSTD_STEP = 512  # zstd bytes unpacked at a time (at most ~16 MiB out: ``_Zstd``)
# What unpacking a damaged file raises: a truncated stream, a bad CRC, trailing garbage...
_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError, RuntimeError)


class Refused(Exception):
    """Why a compressed file is not read: one line, without its path (its reader adds it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Packed:
    """What a compressed file is (``sort_packed``): its kinds (a dump; or a side file's, a log
    that holds a stack sample is both), its content unpacked, or why it is not read."""

    kinds: tuple[NameKind, ...] = ()
    parsed: tuple[str, int, str] | None = None  # a dump's name: prefix, rank, encoding
    size: int | None = None  # unpacked (a log's whole; None: not unpacked)
    data: bytes | None = field(default=None, repr=False)  # (a log's last bytes)
    refused: str | None = None  # why it is not read, one line without its name
    skipped: str | None = None  # why it is none of the files frtrace reads


def sort_packed(
    name: str,
    method: Method,
    opened: Callable[[], IO[bytes]],
    budget: Unpacking,
    *,
    linked: bool = False,
    refused: str | None = None,
) -> Packed:
    """What a compressed file is by ``name``, its name without the suffix (the rules of
    ``frtrace.incident.kinds``, as for any file), and its content unpacked from ``opened()``
    within its kind's limit: a dump's ``MAX_DUMP_BYTES``, a stack sample's or a manifest's
    ``MAX_STACK_BYTES``, a log's or an error file's last ``MAX_LOG_BYTES``; a file named like
    a dump or a log that holds a stack sample is one too, as uncompressed. ``linked``: it is a
    link (a log's is never followed); ``refused``: why it is not read (an archive's member
    past the archive's budget), said for its kind without opening it."""
    kind, parsed = kind_by_name(name)
    if kind in ("log", "error_file", "manifest", "ras") and linked:
        return Packed(skipped="a link: a log is never followed")
    if parsed is not None and parsed[1] >= MAX_WORLD_SIZE:
        return Packed(skipped=f"rank {parsed[1]} is beyond any job's world size")
    if kind is None and not may_be_stacks(name, None, None, 1):
        return Packed(skipped="name does not end in a rank number")
    kinds: tuple[NameKind, ...] = ("stacks",) if kind is None else (kind,)
    limit = MAX_DUMP_BYTES if kind == "dump" else MAX_STACK_BYTES
    tail = kind in ("log", "error_file")
    try:
        if refused is not None:
            raise Refused(refused)
        with opened() as raw:
            sniff = looks_like_stacks if kind is None else None
            found = unpack(
                raw,
                method,
                limit=MAX_LOG_BYTES if tail else limit,
                budget=budget,
                tail=tail,
                head=sniff,
            )
    except (Refused, OSError) as exc:
        why = str(exc) if isinstance(exc, Refused) else f"cannot read: {exc.strerror or exc}"
        if kind is None:
            return Packed(skipped=why)
        return Packed(kinds=kinds, parsed=parsed, refused=why)
    if found is None:  # (not a stack sample by its first bytes)
        return Packed(skipped="name does not end in a rank number")
    data, size = found
    head = data[:SNIFF_BYTES]
    if kind == "dump" and may_be_stacks(name, kind, parsed and parsed[2], size):
        kinds = ("stacks",) if looks_like_stacks(head) else kinds
    elif kind == "log" and size <= MAX_LOG_BYTES and may_be_stacks(name, kind, None, size):
        kinds = ("log", "stacks") if looks_like_stacks(head) else kinds  # (read whole)
    return Packed(kinds=kinds, parsed=parsed if kinds == ("dump",) else None, size=size, data=data)


def compressed_name(name: str) -> tuple[str, Method] | None:
    """(the name without its compression suffix, how it is compressed) for a file compressed
    on its own (``rank_1.gz`` -> ``("rank_1", "gzip")``); None for any other name (an
    archive's ``.tgz`` included: its inner name, ``x.tar``, is no file frtrace reads)."""
    stem, dot, ext = name.rpartition(".")
    method = COMPRESSED_SUFFIXES.get(f".{ext.lower()}") if dot else None
    if method is None or not stem or stem.startswith("."):
        return None
    return stem, method


class Unpacking:
    """What unpacking the compressed files of one folder or archive may still cost: bytes
    unpacked in all, and bytes held in memory."""

    def __init__(self) -> None:
        self.unpacked_left = MAX_UNPACKED_BYTES
        self.held_most: int | None = None  # (asked of the machine once a file is unpacked)
        self.held = 0

    def hold(self, count: int) -> None:
        """Count ``count`` more bytes as kept in memory; past the budget, ``Refused``."""
        self.room(count)
        self.held += count

    def room(self, count: int) -> None:
        """``Refused`` where ``count`` more bytes would be past what may be held (asked as a
        file is unpacked, so that one file never holds more)."""
        if self.held_most is None:
            self.held_most = archive_bytes(MAX_HELD_BYTES)
        if self.held + count > self.held_most:
            raise Refused(
                f"not read: the compressed files' contents would hold more than "
                f"{_size(self.held_most)} in all; decompress them and analyse the folder"
            )


def unpack(
    raw: IO[bytes],
    method: Method,
    *,
    limit: int,
    budget: Unpacking,
    tail: bool = False,
    head: Callable[[bytes], bool] | None = None,
) -> tuple[bytes, int] | None:
    """The unpacked content of the compressed stream ``raw`` and its whole unpacked size:
    at most ``limit`` bytes (past it ``Refused``), or with ``tail`` its last ``limit`` bytes
    (read through up to ``MAX_LOG_UNPACKED_BYTES``). ``head``: asked about the first
    ``min(limit, 4096)`` bytes unpacked; False ends it early (None: not this kind of file).
    Raises ``Refused`` (one line) where it is damaged, past a limit, or zstd is not
    installed; the data kept is counted in ``budget``."""
    if budget.unpacked_left <= 0:
        raise Refused(
            f"not read: the compressed files here unpack to more than "
            f"{_size(MAX_UNPACKED_BYTES)} in all; decompress them and analyse the folder"
        )
    reader, errors = _reader(raw, method)
    deadline = time.monotonic() + UNPACK_SECONDS
    most = MAX_LOG_UNPACKED_BYTES if tail else limit
    chunks: collections.deque[bytes] = collections.deque()
    kept = total = 0
    try:
        if head is not None:
            first = _read(reader, min(limit, 4096))
            budget.unpacked_left -= len(first)
            if not head(first):
                return None
            chunks.append(first)
            kept = total = len(first)
        while True:
            chunk = _read(reader, CHUNK)
            if not chunk:
                break
            total += len(chunk)
            budget.unpacked_left -= len(chunk)
            if total > most:
                raise Refused(_too_large(most, tail=tail))
            chunks.append(chunk)
            kept += len(chunk)
            while tail and kept - len(chunks[0]) >= limit:  # (only the last bytes are kept)
                kept -= len(chunks.popleft())
            budget.room(kept)
            if time.monotonic() > deadline:
                raise Refused(
                    f"not read: decompressing it took longer than {UNPACK_SECONDS:.0f} s "
                    f"({total / 2**20:,.0f} MiB so far: a damaged file or a decompression bomb)"
                )
            if budget.unpacked_left < 0:
                raise Refused(
                    f"not read: the compressed files here unpack to more than "
                    f"{_size(MAX_UNPACKED_BYTES)} in all; decompress them and analyse "
                    "the folder"
                )
    except errors as exc:
        raise Refused(
            f"cannot be decompressed ({type(exc).__name__}: {short_message(exc)}): a damaged or "
            f"truncated {method} file"
        ) from None
    finally:
        reader.close()
    data = b"".join(chunks)
    chunks.clear()
    if tail and len(data) > limit:
        data = data[-limit:]
    budget.hold(len(data))
    return data, total


def _read(reader: Any, n: int) -> bytes:
    """Up to ``n`` bytes of an unpacking stream (fewer only at its end)."""
    parts: list[bytes] = []
    while n > 0:
        part = reader.read(n)
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _size(count: int) -> str:
    """``1 GiB``, ``16 MiB``, ``1,000 bytes``."""
    if count >= 1 << 30:
        return f"{count / 2**30:,.3g} GiB"
    return f"{count / 2**20:,.3g} MiB" if count >= 1 << 20 else f"{count:,} bytes"


def _too_large(most: int, *, tail: bool) -> str:
    size = _size(most)
    if tail:
        return (
            f"not read: it decompresses to more than {size} (a damaged file or a decompression "
            "bomb); decompress it and analyse the folder"
        )
    return (
        f"not read: it decompresses to more than {size}, more than any file of its kind holds "
        "(a damaged file or a decompression bomb)"
    )


def _reader(raw: IO[bytes], method: Method) -> tuple[Any, tuple[type[BaseException], ...]]:
    """A stream of ``raw``'s unpacked bytes (each read bounded by what it asks for), and what
    reading it raises where the file is damaged."""
    if method == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), _ERRORS
    if method == "bz2":
        return bz2.BZ2File(raw), _ERRORS
    if method == "xz":
        return lzma.LZMAFile(raw), _ERRORS
    try:  # (not a dependency: imported by name, so that nothing needs it to type-check)
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise Refused(
            "not read: compressed with zstd, which needs the zstandard package "
            "(pip install zstandard)"
        ) from None
    return _Zstd(raw, zstandard), (*_ERRORS, zstandard.ZstdError)


class _Zstd:
    """A zstd file's unpacked bytes, every frame, read as a file: fed to the decompressor
    ``ZSTD_STEP`` bytes at a time, so that one step unpacks to at most ~16 MiB (zstd's
    largest ratio, ~32,000, is a block of one repeated byte); a file that ends inside a
    frame is truncated (``EOFError``), as gzip's reader says it. (zstandard's own
    ``stream_reader`` returns a truncated frame's bytes without a word.)"""

    def __init__(self, raw: IO[bytes], zstandard: Any) -> None:
        self.raw = raw
        self.decompressor = zstandard.ZstdDecompressor()
        self.frame: Any = None  # the frame being unpacked (None: between two)
        self.pending = bytearray()

    def read(self, n: int) -> bytes:
        while len(self.pending) < n and self._step():
            pass
        out = bytes(self.pending[:n])
        del self.pending[:n]
        return out

    def _step(self) -> bool:
        """Unpack a few more bytes; False at the end of the file."""
        data = self.raw.read(ZSTD_STEP)
        if not data:
            if self.frame is not None:
                raise EOFError("compressed file ended before the end of a zstd frame")
            return False
        while data:
            if self.frame is None:
                self.frame = self.decompressor.decompressobj()
            self.pending += self.frame.decompress(data)
            data = b""
            if self.frame.eof:  # (the next frame starts with what this one left over)
                data = self.frame.unused_data
                self.frame = None
        return True

    def close(self) -> None:
        self.pending.clear()
