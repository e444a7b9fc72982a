"""Read what a rank did at one entry, for people: op, sizes, dtypes, state and stack."""

from __future__ import annotations

from typing import Any

from frtrace.load.dumpset import DumpSet
from frtrace.model import OpSignature
from frtrace.pystack.where import call_site

__all__ = ["call_site", "entry_at", "format_frame", "signature_at"]


def entry_at(dumps: DumpSet, row: int) -> dict[str, Any]:
    """One entries-table row as a dict."""
    rows: list[dict[str, Any]] = dumps.entries.slice(row, 1).to_pylist()
    return rows[0]


def format_frame(name: str, filename: str, line: int) -> str:
    """``forward (model.py:42)``."""
    return f"{name} ({filename}:{line})" if line >= 0 else f"{name} ({filename})"


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(s) for s in value or ())


def signature_at(dumps: DumpSet, row: int, *, op: str | None = None) -> OpSignature:
    """The OpSignature of the entry at ``row`` (``op`` overrides, e.g. a coalesced run's)."""
    e = entry_at(dumps, row)
    stack = tuple(format_frame(*f) for f in dumps.stack(e["stack_id"]))
    return OpSignature(
        op=op or e["op"] or "?",
        input_sizes=_sizes(e["input_sizes"]),
        output_sizes=_sizes(e["output_sizes"]),
        input_dtypes=tuple(e["input_dtypes"] or ()),
        output_dtypes=tuple(e["output_dtypes"] or ()),
        state=e["state"],
        stack=stack,
    )
