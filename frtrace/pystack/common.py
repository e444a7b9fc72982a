"""What every stack-file reader shares: the error, size limits, text decoding, the rank in a
file name, which thread is the main one, and checked access to decoded JSON."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from frtrace.errors import StackFileError
from frtrace.incident.budget import rank_number
from frtrace.incident.layout import MAX_STACK_BYTES, as_text
from frtrace.pystack.model import Frame, ThreadStack

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_CHARS",
    "StackFileError",
    "decode_text",
    "dict_items",
    "get_field",
    "guess_main",
    "load_json",
    "need_field",
    "rank_from_filename",
    "split_lines",
]

MAX_FILE_BYTES = MAX_STACK_BYTES  # a py-spy --locals dump of 1,000 threads is ~10 MB
MAX_LINE_CHARS = 1024 * 1024  # faulthandler cuts strings at 500 chars; py-spy reprs at ~1 KB
_MAX_THREADS = 100_000


# --- shared helpers ----------------------------------------------------------------------


def decode_text(data: bytes | str, path: str) -> str:
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > MAX_FILE_BYTES:
            raise StackFileError(
                path, f"{len(raw):,} bytes, more than the {MAX_FILE_BYTES:,} any stack dump needs"
            )
        if b"\x00" in raw:
            raise StackFileError(path, "binary data (NUL bytes), not a text stack dump")
        text = raw.decode("utf-8", errors="replace")
    elif isinstance(data, str):
        if len(data) > MAX_FILE_BYTES:
            raise StackFileError(path, f"{len(data):,} characters, too large for a stack dump")
        if "\x00" in data:
            raise StackFileError(path, "binary data (NUL characters), not a text stack dump")
        text = data
    else:
        raise StackFileError(path, f"cannot read a {type(data).__name__} as a stack dump")
    text = as_text(text)  # (no BOM, no terminal colours, \n line ends)
    if not text.strip():
        raise StackFileError(path, "empty file")
    return text


def split_lines(text: str, path: str) -> list[str]:
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise StackFileError(
                path, f"line {n} is {len(line):,} characters long, not a stack dump line"
            )
    return lines


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    """The digits at the end of the file's stem: ``pyspy_rank_5.txt``, ``rank5.json`` -> 5."""
    stem = PurePath(os.fspath(path)).name.split(".", 1)[0]
    m = re.search(r"(\d+)$", stem)
    return rank_number(m.group(1)) if m else None


_BOOTSTRAP = frozenset({"_bootstrap", "Thread._bootstrap", "_bootstrap_inner"})


def _started_by_threading(frames: tuple[Frame, ...]) -> bool:
    py = [f for f in frames if not f.native]
    if not py:
        return False
    outer = py[-1]
    return outer.function in _BOOTSTRAP and outer.filename.endswith("threading.py")


def guess_main(threads: list[ThreadStack]) -> list[ThreadStack]:
    """Mark as main the one thread not started by threading (formats that do not say)."""
    if any(t.is_main for t in threads):
        return threads
    cands = [i for i, t in enumerate(threads) if t.frames and not _started_by_threading(t.frames)]
    if not cands:
        return threads
    module = [i for i in cands if _outer_function(threads[i]) == "<module>"]
    pick = (module or cands)[-1]  # faulthandler lists the newest thread first, main last
    t = threads[pick]
    threads[pick] = ThreadStack(
        thread_id=t.thread_id,
        name=t.name,
        frames=t.frames,
        is_main=True,
        active=t.active,
        owns_gil=t.owns_gil,
        current=t.current,
    )
    return threads


def _outer_function(t: ThreadStack) -> str | None:
    py = [f for f in t.frames if not f.native]
    return py[-1].function if py else None


# --- py-spy text -------------------------------------------------------------------------


def load_json(data: bytes | str, path: str) -> Any:
    text = decode_text(data, path)
    try:
        return json.loads(text)
    except RecursionError:  # json's C decoder stops cleanly at the recursion limit
        raise StackFileError(path, "JSON nested deeper than any stack dump") from None
    except ValueError as exc:
        raise StackFileError(path, f"not valid JSON ({exc}) (truncated?)") from None


def get_field(
    obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str, where: str
) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind):
        raise StackFileError(path, f"{where}: {key!r} is a boolean, expected {_kind(kind)}")
    if not isinstance(value, kind):
        raise StackFileError(
            path, f"{where}: {key!r} is {type(value).__name__}, expected {_kind(kind)}"
        )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def need_field(obj: dict[str, Any], key: str, kind: type, path: str, where: str) -> Any:
    value = get_field(obj, key, kind, path, where)
    if value is None:
        raise StackFileError(path, f"{where}: {key!r} is missing")
    return value


def dict_items(value: Any, path: str, where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if not isinstance(value, list):
        raise StackFileError(path, f"{where} is {type(value).__name__}, expected a list")
    if len(value) > _MAX_THREADS:
        raise StackFileError(path, f"{where} has {len(value):,} items, more than any real dump")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise StackFileError(path, f"{where}[{i}] is {type(item).__name__}, expected an object")
        yield i, item


# --- py-spy --json -----------------------------------------------------------------------
