"""Safe readings of decoded values: numbers, labels and text from whatever a file holds.

A pickle can hold any plain value where a field should be: these never ``str()`` a container
(its text can be exponentially long), never overflow int64, and keep text Arrow can store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.base.printable import clean, short_message

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_LEAVES",
    "clean",
    "first_seen_codes",
    "int_or_none",
    "label",
    "preview",
    "short_message",
    "strings",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Leaves (tensor dimensions, dtype names, frames) one column may expand to: 8,000 per
# entry of a 2,000-entry dump. A pickle reaches far more by repeating one shared list.
MAX_LEAVES = 1 << 24


def int_or_none(value: Any) -> int | None:
    """An int64 from an int, an integral float or a decimal string; None for anything else."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > 20:  # more digits than an int64 has (and int() of 5,000 raises)
            return None
        try:
            number = int(text)
        except ValueError:
            return None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


def label(value: Any) -> str | None:
    """A group name, description or version: a string, or a plain number as text.

    Never ``str()`` of a container: a pickle can make one whose text is exponentially long
    (lists that share sub-lists through the memo).
    """
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value) if abs(value) < 1e18 else None
    return None


def first_seen_codes(values: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """Each value's number among the distinct values in first-seen order (int32; -1 for
    None), and those values (None left out), worked out in C (``dict.fromkeys``). Values are
    told apart as dict keys are (1, 1.0 and True are one); an unhashable value raises
    TypeError."""
    index: dict[Any, int] = dict.fromkeys(values, 0)
    for number, value in enumerate(index):
        index[value] = number
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    distinct = list(index)
    if None in index:  # None is no value: code -1, and not among the distinct values
        none_at = index[None]
        codes = np.where(codes == none_at, -1, codes - (codes > none_at)).astype(np.int32)
        del distinct[none_at]
    return codes, distinct


def strings(values: Sequence[Any]) -> pa.Array:
    """pa.array(values, string), lone surrogates spelled out (see clean)."""
    try:
        return pa.array(values, type=pa.string())
    except UnicodeEncodeError:
        # (only the strings: anything else is the caller's to refuse, as Arrow does)
        return pa.array([clean(v) if isinstance(v, str) else v for v in values], type=pa.string())


def preview(value: Any) -> str:
    """A short, safe rendering of any decoded value for a message."""
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 1e18 else "a huge number"
    size = f" of {len(value)}" if isinstance(value, list | tuple | dict) else ""
    return f"a {type(value).__name__}{size}"
