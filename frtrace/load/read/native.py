"""The C parts of reading a file (``frtrace.load.read._scan``), where they were built.

``read_pickle`` reads a pickle's opcodes into a table of nodes instead of Python objects, and
hands the list of entries out as a view (``Entries``) whose entries are made only when asked
for. ``columns`` reads many columns of every entry (decoded dicts, or such a view) in one pass
(each entry's sizes and dtypes keyed together among them) without a Python object per value.
Both are fast paths only: a stream ``read_pickle`` does not read is unpickled
(``frtrace.load.read.unpickle``), and a column whose values are not all of the plain kind it
expects is given up and read in Python (``frtrace.load.read.columns``), the reference, with the
same result. Where the module is not built (no C compiler at install time) or
``FRTRACE_PURE_PYTHON`` is set, files are unpickled and every column is read in Python."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any, TypeGuard

import numpy as np

from frtrace.load.read.values import MAX_LEAVES

__all__ = [
    "BOOL",
    "FLOAT64",
    "FRAMES",
    "INT64",
    "NONE",
    "PAIR",
    "SHAPES",
    "TEXT",
    "Codes",
    "Numbers",
    "Spec",
    "active",
    "all_dicts",
    "columns",
    "inactive_reason",
    "is_entry_list",
    "location",
    "notice",
    "read_pickle",
    "scatter",
    "shapes",
]

# What a column holds, as _scan.c numbers them. NONE: a column expected to be empty. SHAPES:
# the values under several keys (sizes and dtypes) together.
INT64, FLOAT64, BOOL, TEXT, PAIR, FRAMES, NONE, SHAPES = range(8)
_NAMES = ("INT64", "FLOAT64", "BOOL", "TEXT", "PAIR", "FRAMES", "NONE", "SHAPES")

# (key, kind, required): a required key missing from an entry gives its column up (SHAPES:
# a tuple of keys, all required)
Spec = tuple[str | tuple[str, ...], int, bool]
# numbers: the values (any value where null), and where they are valid (None: everywhere)
Numbers = tuple[np.ndarray, np.ndarray | None]
# text, pairs, frames: int32 codes (-1: none), and the distinct values, first seen first
Codes = tuple[np.ndarray, list[Any]]

_DTYPES = {INT64: np.int64, FLOAT64: np.float64, BOOL: np.bool_}


# Why the module was not taken, where it was not (see inactive_reason).
_NOT_LOADED = "frtrace.load.read._scan was not loaded"


def _load() -> ModuleType | None:
    global _NOT_LOADED
    try:
        from frtrace.load.read import _scan
    except ImportError as exc:  # built without a C compiler: every column is read in Python
        if importlib.util.find_spec("frtrace.load.read._scan") is None:
            _NOT_LOADED = "it was not built (no C compiler when frtrace was installed)"
        else:  # (a damaged file, a build for another Python)
            _NOT_LOADED = f"it does not load ({' '.join(str(exc).split())[:200]})"
        return None
    if tuple(getattr(_scan, name, None) for name in _NAMES) != tuple(range(len(_NAMES))):
        _NOT_LOADED = f"{_where(_scan)} is a build of another version of frtrace"
        return None  # (a stale build of another version of _scan.c)
    if not all(hasattr(_scan, name) for name in ("columns", "read", "Entries")):
        _NOT_LOADED = f"{_where(_scan)} is a build of an older version of frtrace"
        return None  # (a build from before the reader)
    return _scan


def _where(module: ModuleType) -> str:
    return str(getattr(module, "__file__", None) or module.__name__)


_SCAN = _load()
# What a list of entries can be: a decoded list, or the C reader's view of one.
_ENTRY_LISTS: tuple[type, ...] = (list,) if _SCAN is None else (list, _SCAN.Entries)
_ONLY_DICTS = frozenset((dict,))


def active() -> bool:
    """Whether the C pass is used (built, and not turned off by ``FRTRACE_PURE_PYTHON``)."""
    return _SCAN is not None and not os.environ.get("FRTRACE_PURE_PYTHON")


def inactive_reason() -> str | None:
    """Why the C reader is not used, in a few words; None where it is (see ``active``)."""
    if _SCAN is None:
        return _NOT_LOADED
    if os.environ.get("FRTRACE_PURE_PYTHON"):
        return "FRTRACE_PURE_PYTHON is set"
    return None


# End to end, measured (docs/performance.md, "Without the C reader"); the README says the same
SLOWDOWN = "about 2x"


def notice(reason: str) -> str:
    """The line that says, once per run, that files are read without the C reader."""
    return (
        f"the C reader is off ({reason}): dumps are read in Python, with the same results, "
        f"{SLOWDOWN} slower"
    )


def location() -> str | None:
    """The file of the C module in use, if any."""
    return None if _SCAN is None else _where(_SCAN)


def read_pickle(data: bytes) -> Any:
    """The pickle in ``data`` as ``pickle`` decodes it, with its list of entries (the top-level
    list, or the top-level dict's ``entries``) an ``Entries`` view; None where the C reader is
    not active or does not read this stream (another opcode, damage: unpickle it instead)."""
    if not active() or _SCAN is None or type(data) is not bytes:  # (it reads bytes only)
        return None
    return _SCAN.read(data)


def is_entry_list(value: object) -> TypeGuard[Sequence[Any]]:
    """Whether ``value`` is a list of entries: a decoded list, or ``read_pickle``'s view."""
    return isinstance(value, _ENTRY_LISTS)


def all_dicts(entries: Sequence[Any]) -> bool:
    """Whether every entry is a dict (a view answers without making them)."""
    if _SCAN is not None and isinstance(entries, _SCAN.Entries):
        return bool(entries.all_dicts())
    return _ONLY_DICTS.issuperset(map(type, entries))


def columns(
    entries: Sequence[dict[str, Any]], specs: Sequence[Spec]
) -> dict[str | tuple[str, ...], Any] | None:
    """Each spec's column read in one pass: ``Numbers`` for INT64, FLOAT64 and BOOL,
    ``Codes`` for TEXT, PAIR and FRAMES, True for an empty NONE column, for SHAPES a code per
    entry (equal codes: equal values) and the first entry with each code; a column given up
    (a value not of the plain kind expected; past MAX_LEAVES frames or sizes) is left out.
    None where the pass is not active."""
    if not active() or _SCAN is None:
        return None
    try:
        if isinstance(entries, _SCAN.Entries):  # (read from the pickle's nodes)
            results = entries.columns(tuple(specs), MAX_LEAVES)
        else:
            results = _SCAN.columns(entries, tuple(specs), MAX_LEAVES)
    except TypeError:  # not a list of plain dicts
        return None
    out: dict[str | tuple[str, ...], Any] = {}
    for (key, kind, _), result in zip(specs, results, strict=True):
        if result is None:
            continue
        if kind == NONE:
            out[key] = True
        elif kind in _DTYPES:
            values, valid = result
            flags = None if valid is None else np.frombuffer(valid, dtype=np.bool_)
            out[key] = (np.frombuffer(values, dtype=_DTYPES[kind]), flags)
        else:
            codes, distinct = result
            out[key] = (np.frombuffer(codes, dtype=np.int32), distinct)
    return out


def shapes(
    entries: Sequence[dict[str, Any]], keys: tuple[str, ...]
) -> tuple[np.ndarray, list[int]]:
    """``columns`` of one SHAPES column: per entry a code standing for its values under
    ``keys``, and the first entry with each code. Raises LookupError where the pass is not
    active or gives the column up."""
    read = columns(entries, [(keys, SHAPES, True)])
    if read is None or keys not in read:
        raise LookupError("the C pass did not read these sizes and dtypes")
    codes, firsts = read[keys]
    return codes, firsts


def scatter(
    part: Any,
    rows: int,
    at: int,
    targets: list[Any],
    widths: tuple[int, ...],
    remaps: list[Any],
    zeroed: list[Any],
) -> bool:
    """``frtrace.load.handover.gather.scatter`` in C: one dump's part spread over its columns'
    blocks.
    False where the C module is not active (the caller does it in numpy)."""
    if not active() or _SCAN is None:
        return False
    _SCAN.scatter(part, rows, at, targets, widths, remaps, zeroed)
    return True


def runs_order(
    key: np.ndarray, rank: np.ndarray, span: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The stable order of rows by ``key`` (int32 or int64, each in [0, ``span``)), and
    where in it each run of rows equal in key and in ``rank`` (int32) starts: a counting
    sort in C (``frtrace.analysis.facts.coalesce``). None where the C module is not active
    (or is a build from before it), or a key is outside [0, span)."""
    if not active() or _SCAN is None or not hasattr(_SCAN, "runs_order"):
        return None
    if key.dtype not in (np.int32, np.int64) or len(key) != len(rank):
        raise ValueError("an int32 or int64 key per rank")
    rows = len(key)
    order = np.empty(rows, dtype=np.int64)
    first = np.empty(rows, dtype=np.int64)
    runs = _SCAN.runs_order(
        np.ascontiguousarray(key),
        key.dtype == np.int64,
        np.ascontiguousarray(rank, dtype=np.int32),
        span,
        order,
        first,
    )
    if runs is None:
        return None
    return order, first if runs == rows else first[:runs].copy()
