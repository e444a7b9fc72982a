"""The manifest ``frtrace collect`` leaves in every folder it fills: its format, written here
(by ``collect``) and read by :mod:`frtrace.evidence.collected` (by the analysis).

One ``frtrace-collect.json`` per folder (one per host: ``DIR/<host>/``)::

    {"format": "frtrace-collect", "version": 1,
     "host": "node-7",                 # the host the folder is about
     "collector": {"host": "login-1", "pid": 4242, "how": "store" | "local"},
     "clock": "collector",             # whose clock "dumped_at_ns" is read from
     "ranks": [{"rank": 5, "host": "node-7", "pid": 1234, "dumped_at_ns": 17000...,
                "dump": "comm_lib_trace_rank_5.json", "how": "debug server ..."}]}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "CollectedRank",
    "manifest_document",
]

MANIFEST_NAME = "frtrace-collect.json"
MANIFEST_FORMAT = "frtrace-collect"
MANIFEST_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectedRank:
    """One rank as ``collect`` found it."""

    rank: int
    host: str | None = None
    pid: int | None = None
    dumped_at_ns: int | None = None  # when its dump arrived (see ``clock``)
    dump: str | None = None  # the dump file's name in the folder, None: no dump got
    how: str | None = None  # "debug server http://node-7:40123", "recorder (socket)", ...
    size_bytes: int | None = None  # the dump file's size, where collect wrote it


def manifest_document(
    host: str, collector: dict[str, Any], clock: str, ranks: list[CollectedRank]
) -> dict[str, Any]:
    """The JSON document ``collect`` writes for one folder."""
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "host": host,
        "collector": collector,
        "clock": clock,
        "ranks": [
            {
                "rank": r.rank,
                "host": r.host,
                "pid": r.pid,
                "dumped_at_ns": r.dumped_at_ns,
                "dump": r.dump,
                "how": r.how,
                **({} if r.size_bytes is None else {"size_bytes": r.size_bytes}),
            }
            for r in sorted(ranks, key=lambda r: r.rank)
        ],
    }
