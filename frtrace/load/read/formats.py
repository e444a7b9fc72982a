"""What differs between torch versions and encodings, outside the entries' columns.

The format version (read by the fields present, never trusted alone), ``profiling_name``
(``"nccl:send 1->0"``), ``pg_config`` in its 1.x (``{pg_id: [ranks]}``) and 2.x
(``{name: {name, desc, ranks: "[0, 1]"}}``) shapes, and ``pg_status`` (JSON writes its numbers
as strings).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from frtrace.incident.discover import MAX_WORLD_SIZE
from frtrace.load.read.values import clean, int_or_none, label, preview

__all__ = [
    "KNOWN_VERSION",
    "group_rows",
    "members_key",
    "parse_rank_list",
    "parse_version",
    "pg_status_rows",
    "split_profiling_name",
]

# The newest Flight Recorder format version this loader knows (torch 2.9 - 2.15 write "2.10";
# 2.11, torch 2.16, adds all_to_all split sizes).
KNOWN_VERSION = (2, 11)

# Group-local peer ranks: more than 7 digits is damage (and would not fit the int32 column).
_P2P_META = re.compile(
    r"^\s*(?P<a>\d{1,7}|\?)\s*(?P<arrow>->|<-)\s*(?P<b>\d{1,7}|\?)\s*$", re.ASCII
)


def split_profiling_name(name: str) -> tuple[str | None, str, int | None, int | None]:
    """``"nccl:send 1->0"`` -> (backend, op, src_local, dst_local); unknown names kept as-is."""
    backend, colon, rest = name.partition(":")
    if not colon:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    src = dst = None
    match = _P2P_META.match(meta) if meta else None
    if match is not None:
        a = None if match["a"] == "?" else int(match["a"])
        b = None if match["b"] == "?" else int(match["b"])
        src, dst = (a, b) if match["arrow"] == "->" else (b, a)
    return (backend or None), (op or name), src, dst


# Every rank records the default group's member list, "[0, 1, ..., 4095]": the same text
# thousands of times. Parsed once per worker process, and kept as a compact int32 array (a
# list of Python ints would cost 36 bytes a rank, for every rank, in every file).
_RANK_LISTS: dict[str, np.ndarray | None] = {}
_RANK_LIST_CACHE_MAX = 4096
# (7 digits at most: MAX_WORLD_SIZE has 7; longer numbers are damage, and int() of a
# 5,000-digit one raises)
_RANK_TEXT = re.compile(r"\[\s*\d{1,7}(\s*,\s*\d{1,7})*\s*\]|\[\s*\]", re.ASCII)
_MAX_RANK = MAX_WORLD_SIZE - 1


def parse_rank_list(value: Any) -> np.ndarray | None:
    """``"[0, 1, 2]"`` (2.x), ``[0, 1, 2]`` (1.x): member ranks as int32, without eval."""
    if isinstance(value, str):
        if value in _RANK_LISTS:
            return _RANK_LISTS[value]
        parsed = _parse_rank_text(value)
        if len(_RANK_LISTS) < _RANK_LIST_CACHE_MAX:
            _RANK_LISTS[value] = parsed
        return parsed
    if not isinstance(value, list | tuple) or len(value) > MAX_WORLD_SIZE:
        return None
    items = [int_or_none(v) for v in value]
    if any(i is None or i < 0 or i > _MAX_RANK for i in items):
        return None
    return np.array(items, dtype=np.int32)


def _parse_rank_text(value: str) -> np.ndarray | None:
    body = value.strip()
    if not _RANK_TEXT.fullmatch(body):
        return None
    inner = body[1:-1].strip()
    if not inner:
        return np.zeros(0, dtype=np.int32)
    numbers = np.fromiter(map(int, inner.split(",")), dtype=np.int64)
    if numbers.size and numbers.max() > _MAX_RANK:
        return None
    ranks: np.ndarray = numbers.astype(np.int32)
    ranks.flags.writeable = False  # shared by every row that recorded the same text
    return ranks


def group_rows(rank: int, pg_config: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_config, dict):
        if pg_config is not None:
            problems.append("pg_config is not a mapping; process-group membership unknown")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_config.items():
        if isinstance(value, dict):  # 2.x: {name: {"name", "desc", "ranks": "[0, 1]"}}
            name = label(value.get("name", key))
            if name is None:
                name = label(key)
            desc = value.get("desc")
            raw_ranks = value.get("ranks")
            pg_id = None
        else:  # 1.x: {pg_id: [ranks]}
            name = label(key)
            desc = None
            raw_ranks = value
            pg_id = int_or_none(key)
        if name is None:
            problems.append(f"pg_config entry {preview(key)} has no usable name; ignored")
            continue
        ranks = parse_rank_list(raw_ranks)
        note = None
        if name == "":
            note = (
                "Gloo records every group under the name '' and keeps only the last one's "
                "ranks; membership must come from the entries"
            )
        elif ranks is None:
            note = f"unreadable ranks {preview(raw_ranks)}"
        elif not len(ranks):  # torch 2.16's hook-based recorder, for some subgroups
            note = (
                "pg_config records no ranks for this group; membership must come from the entries"
            )
        rows.append(
            {
                "rank": rank,
                "group_name": name,
                "group_desc": clean(desc) if isinstance(desc, str) else None,
                "ranks": ranks,
                "ranks_key": members_key(ranks),
                "pg_id": pg_id,
                "trusted": note is None,
                "note": note,
            }
        )
    return rows


def members_key(ranks: np.ndarray | None) -> bytes | None:
    """A digest of a member list, worked out where the file is read (in the worker), so the
    tables can store each distinct list once without hashing every copy of it again: every
    rank of a 32,768-rank job records the default group's 32,768 members."""
    if ranks is None:
        return None
    return hashlib.blake2b(ranks.astype(np.int32).tobytes(), digest_size=16).digest()


def pg_status_rows(rank: int, pg_status: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_status, dict):
        if pg_status is not None:
            problems.append("pg_status is not a mapping; ignored")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_status.items():
        pg_id = int_or_none(key)
        if pg_id is None or not isinstance(value, dict):
            problems.append(f"pg_status entry {preview(key)} is malformed; ignored")
            continue
        rows.append(
            {
                "rank": rank,
                "pg_id": pg_id,
                "last_enqueued": int_or_none(value.get("last_enqueued_collective")),
                "last_started": int_or_none(value.get("last_started_collective")),
                "last_completed": int_or_none(value.get("last_completed_collective")),
            }
        )
    return rows


_VERSION = re.compile(r"(\d{1,9})(?:\.(\d{1,9}))?", re.ASCII)


def parse_version(version: Any, problems: list[str]) -> str | None:
    if version is None:
        return None
    text = label(version)
    if text is None:
        problems.append(f"format version is {preview(version)}; read by the fields present")
        return None
    match = _VERSION.fullmatch(text)
    if match is None:
        problems.append(f"unrecognised format version {preview(text)}; read by the fields present")
        return text[:100]
    if (int(match[1]), int(match[2] or 0)) > KNOWN_VERSION:
        problems.append(
            f"format version {text} is newer than this frtrace knows "
            f"({KNOWN_VERSION[0]}.{KNOWN_VERSION[1]}); loaded best-effort, unknown fields "
            "ignored. Upgrade frtrace if the analysis looks wrong."
        )
    return text
