"""A rank's whole dump, as torch assembles it (`dump_dict`, `dump_json`), and its bytes.

Pickle (`pickle_str` of a c10 Dict, protocol 2): keys in insertion order - version,
pg_config, comm_lib_version / nccl_version, pg_status, entries (1.4: entries, version,
pg_config; torch 2.2: the bare entries list); nccl_comm_state only when non-empty (never, for
stock NCCL). pg_config is a std::map keyed by (name, desc), so names sort as strings ("0",
"1", "10", "2"); pg_status is keyed by str(pg_id) in numeric order.

JSON (nlohmann, `result.dump()`): every object's keys sorted, no spaces, no frames,
time_discovered_* 0 when unset, process_group a list, pg_status values strings, "entries"
omitted when empty, "nccl_comm_state" always present (`dump_nccl_trace_json` passes the comm
dump map, empty for stock NCCL).

A rank with buffer_size 0 has the recorder disabled: no pg_config, pg_status or entries.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

from frsim.job import Job
from frsim.layout import Layout, layout_of
from frsim.record import RankDump


def _enabled(dump: RankDump) -> bool:
    return dump.job.spec.buffer_of(dump.rank) > 0


def pg_config(dump: RankDump) -> dict[Any, Any]:
    """pg_config of a rank: its member groups (1.4: {pg_id: [ranks]})."""
    if not _enabled(dump):
        return {}
    if not dump.layout.two_x:
        return {pg_id: list(g.ranks) for pg_id, g in enumerate(dump.groups)}
    config: dict[Any, Any] = {}
    for g in sorted(dump.groups, key=lambda g: (g.name, g.desc)):
        ranks = "[" + ", ".join(map(str, g.ranks)) + "]"
        config[g.name] = {"name": g.name, "desc": g.desc, "ranks": ranks}
    return config


def pg_status(dump: RankDump, *, as_text: bool) -> dict[str, dict[str, Any]]:
    """pg_status of a rank: the watchdog's last enqueued/started/completed work per pg_id."""
    if not _enabled(dump):
        return {}
    c = dump.counters
    status: dict[str, dict[str, Any]] = {}
    for a in range(len(dump.axes)):
        if not c.used[a]:
            continue
        values: tuple[Any, ...] = (c.enqueued[a], c.started[a], c.completed[a])
        if as_text:
            values = tuple(str(v) for v in values)
        status[str(a)] = {
            "last_enqueued_collective": values[0],
            "last_started_collective": values[1],
            "last_completed_collective": values[2],
        }
    return status


def _head(dump: RankDump) -> dict[str, Any]:
    layout = dump.layout
    top: dict[str, Any] = {"version": layout.version, "pg_config": pg_config(dump)}
    if layout.lib_key:
        top[layout.lib_key] = layout.lib_version if _enabled(dump) else ""
    return top


def pickle_object(dump: RankDump) -> Any:
    """The object torch pickles for the rank."""
    layout = dump.layout
    if layout.bare_list:
        return dump.entries
    if not layout.two_x:
        return {"entries": dump.entries, "version": layout.version, "pg_config": pg_config(dump)}
    top = _head(dump)
    if layout.pg_status:
        top["pg_status"] = pg_status(dump, as_text=False)
    top["entries"] = dump.entries
    return top


def _check_json(layout: Layout) -> None:
    if not layout.json:
        raise ValueError(
            f"torch wrote no JSON dumps for version {layout.version} (torch {layout.torch}); "
            "the JSON API exists from version 2.4 (torch 2.5) on"
        )


def json_object(dump: RankDump) -> dict[str, Any]:
    """The object torch's JSON dump encodes (keys get sorted when encoding)."""
    _check_json(dump.layout)
    top = _head(dump)
    top["pg_status"] = pg_status(dump, as_text=True)
    entries = []
    for e in dump.entries:
        j = dict(e)
        j.pop("frames", None)
        if j["time_discovered_started_ns"] is None:
            j["time_discovered_started_ns"] = 0
        if j["time_discovered_completed_ns"] is None:
            j["time_discovered_completed_ns"] = 0
        entries.append(j)
    if entries:
        top["entries"] = entries
    top["nccl_comm_state"] = {}
    return top


def dump_bytes(job: Job, rank: int, version: str, fmt: str, *, share_frames: bool = True) -> bytes:
    """The bytes torch would write for `rank`'s dump (fmt "pickle": protocol 2, or "json")."""
    layout = layout_of(version)
    if fmt not in ("pickle", "json"):
        raise ValueError(f"fmt must be 'pickle' or 'json', got {fmt!r}")
    if fmt == "json":
        _check_json(layout)
    dump = RankDump(job, rank, layout, share_frames=share_frames)
    dump.build()
    if fmt == "json":
        obj = json_object(dump)
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return pickle.dumps(pickle_object(dump), protocol=2)


def dump_object(job: Job, rank: int, version: str = "2.10") -> Any:
    """`rank`'s dump as torch's unpickler would return it (no bytes round trip)."""
    dump = RankDump(job, rank, layout_of(version))
    dump.build()
    return pickle_object(dump)
