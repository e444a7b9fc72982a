"""The rows of the files table (one per dump file): the row of a file that could not be
read, and every row made storable in Arrow (a path that is not UTF-8 spelled with escapes)."""

from __future__ import annotations

from typing import Any

from frtrace.base.printable import utf8_text
from frtrace.incident.listing import Candidate

__all__ = ["failed_file_row", "storable_rows"]


def storable_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The file rows with text Arrow can store: a path whose bytes are not UTF-8 (and the
    messages that name it) spelled with ``\\udcXX`` escapes."""
    return [
        {
            k: utf8_text(v)
            if isinstance(v, str)
            else [utf8_text(p) for p in v]
            if k == "problems" and v
            else v
            for k, v in row.items()
        }
        for row in rows
    ]


def failed_file_row(cand: Candidate, error: str) -> dict[str, Any]:
    """The row of a dump file that could not be read: its rank, path, size and why."""
    return {
        "rank": cand.rank,
        "path": str(cand.path),
        "size_bytes": cand.size_bytes,
        "loaded": False,
        "error": error,
        "problems": [],
    }
