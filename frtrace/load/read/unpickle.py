"""The only unpickler, and the size and memory guards in front of it: bytes in, plain data out.

A restricted ``pickle.Unpickler`` that refuses every global, so nothing in a file can be
called; before it, where built, the C reader (``native.read_pickle``), which reads plain data
opcodes only and leaves the list of entries as nodes until they are asked for; anything it
does not read (damage included) goes to the unpickler, which gives the result or the error.
JSON is sniffed by its first byte. Every failure is one ``DumpFormatError`` line that names
the file and says what to do next.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

from frtrace.base.printable import short_message
from frtrace.errors import DumpFormatError, DumpTooLargeError, UnsafePickleError
from frtrace.incident.budget import MAX_DUMP_BYTES
from frtrace.incident.memory import file_allowance, held_to
from frtrace.load.read import native
from frtrace.load.read.declared import declared_bytes
from frtrace.load.read.framing import check_frames

__all__ = ["MAX_DUMP_BYTES", "read_payload", "safe_loads"]


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: any global (class, function) is refused.

    Flight Recorder pickles hold dicts, lists, tuples, str, int, float, bool and None; they use
    no GLOBAL/STACK_GLOBAL/INST/OBJ/EXT opcodes. Every way a pickle can reach a callable goes
    through ``find_class`` (or ``persistent_load``), so refusing here means nothing in the file
    can be called, and REDUCE/BUILD have nothing to act on.
    """

    def find_class(self, module: str, name: str) -> Any:
        # (the names come from the file: escaped and cut, so the message stays one line)
        raise UnsafePickleError(f"the pickle asks for {_escaped(module)}.{_escaped(name)}")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("the pickle asks for a persistent object")


def safe_loads(data: bytes) -> Any:
    """Unpickle plain data; raise UnsafePickleError for anything that could run code, and
    pickle.UnpicklingError for a frame that ends inside a read (``framing``: read one way by
    ``pickle.loads``, another by an unpickler reading a file; the C reader declines it)."""
    check_frames(data)
    return _unpickle(data)


def _unpickle(data: bytes) -> Any:
    # A BufferedReader offers peek(), which lets the C unpickler prefetch: 3x faster than
    # reading a bare BytesIO opcode by opcode.
    stream = io.BufferedReader(io.BytesIO(data), buffer_size=1 << 20)
    return _PlainDataUnpickler(stream).load()


def read_payload(path: Path, size_bytes: int, data: bytes | None = None) -> tuple[Any, str]:
    """Read and decode one file: (decoded object, "pickle" | "json"), or DumpFormatError.

    ``data``: the content already in memory (an archive member, read within the same limit).
    """
    if size_bytes > MAX_DUMP_BYTES:
        raise _too_large(path, size_bytes)
    if data is None:
        try:
            with path.open("rb") as f:  # never more than was checked, even if the file grew
                data = f.read(size_bytes + 1)
        except OSError as exc:
            raise DumpFormatError(
                f"{path}: cannot read: {exc.strerror}; check the file's permissions."
            ) from exc
    if len(data) > size_bytes:
        raise DumpFormatError(
            f"{path}: the file grew while it was read (is the job still writing its dumps?); "
            "run again once the dumps are complete."
        )
    if not data:
        raise DumpFormatError(
            f"{path}: empty file: the rank was probably killed while writing its dump; "
            "the other ranks are analysed without it."
        )
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data), "json"
        except (ValueError, RecursionError) as exc:
            raise DumpFormatError(
                f"{path}: not valid JSON ({short_message(exc)}): truncated or corrupt; "
                "re-dump the rank or analyse without it."
            ) from exc
    try:
        read = native.read_pickle(data)
        if read is None:
            check_frames(data)  # (first: the memory guard reads across frames as pickle does)
            _guard_memory(path, data)
            read = _unpickle(data)
        return read, "pickle"
    except DumpTooLargeError:
        raise
    except UnsafePickleError as exc:
        raise UnsafePickleError(
            f"{path}: refused to load: {exc}; Flight Recorder dumps contain only plain data. "
            "Do not trust this file; take the dump again from the job."
        ) from None
    except MemoryError:  # a length or memo index far beyond the data (one flipped bit will do)
        raise DumpTooLargeError(
            f"{path}: refused: the pickle asks for more memory than a dump of "
            f"{len(data) / 2**20:.1f} MiB can need (a damaged length or memo index); re-dump "
            "the rank or analyse without it."
        ) from None
    except Exception as exc:  # any decoding failure of a damaged pickle
        kind = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise DumpFormatError(
            f"{path}: not a readable Flight Recorder dump: {kind} pickle "
            f"({type(exc).__name__}: {short_message(exc)}); re-dump the rank or analyse without it."
        ) from exc


def _guard_memory(path: Path, data: bytes) -> None:
    """Refuse, before the unpickler runs, a pickle that declares more memory than reading it
    may take (``memory.file_allowance``), unless an address-space limit already holds this
    process to that (a watched worker): nothing else would stop the C unpickler here."""
    allowance = file_allowance(len(data))
    if held_to(allowance):
        return
    declared = declared_bytes(data)
    if declared > allowance:
        raise DumpTooLargeError(
            f"{path}: refused: the pickle declares {declared / 2**20:,.0f} MiB of memory (a "
            f"memo index or a length far past its {len(data):,} bytes), more than reading a "
            f"dump may take here ({allowance / 2**20:,.0f} MiB); the file is damaged or built "
            "to exhaust memory: re-dump the rank or analyse without it."
        )


def _escaped(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped."""
    return repr(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


def _too_large(path: Path, size_bytes: int) -> DumpTooLargeError:
    return DumpTooLargeError(
        f"{path}: refused: {size_bytes / 2**20:.0f} MiB is larger than any Flight Recorder "
        f"dump ({MAX_DUMP_BYTES >> 20} MiB limit); check this is a dump and not another file."
    )
