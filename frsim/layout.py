"""Dump layouts, one per flight-recorder format version (README.md says where each shape was
read: which torch file, which release).

| version | torch    | adds |
|---------|----------|------|
| "2.2"*  | 2.2      | a bare list of {pg_id, seq_id, profiling_name, time_created_us, ...} |
| "1.4"   | 2.3      | {entries, version, pg_config{pg_id: [ranks]}}; record_id, op_id, ns times |
| "2.1"   | 2.4      | process_group, collective/p2p_seq_id, dtypes, is_p2p; pg_config by name |
| "2.4"   | 2.5-2.7  | pg_status, timeout_ms; JSON dumps |
| "2.9"   | 2.8      | nccl_version, thread_name, thread_id; per-op entries of slow coalescing |
| "2.10"  | 2.9-2.15 | comm_lib_version instead of nccl_version |

*"2.2" is this package's label for the unversioned torch 2.2 list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frsim.units import Unit, UnitKind

VERSIONS = ("2.2", "1.4", "2.1", "2.4", "2.9", "2.10")


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Which keys a version writes and which calls it records."""

    version: str
    torch: str
    bare_list: bool
    """torch 2.2: the dump is the list of entries itself."""
    two_x: bool
    """process_group, collective_seq_id, p2p_seq_id, dtypes, is_p2p; pg_config by name."""
    timeout: bool
    """Entries carry timeout_ms."""
    pg_status: bool
    """Top-level pg_status."""
    threads: bool
    """Entries carry thread_name and thread_id."""
    lib_key: str | None
    """Top-level key of the NCCL version string, if any."""
    lib_version: str
    batch_parts: bool
    """batch_isend_irecv records one entry per op before its "coalesced" end entry."""
    slow_parts: bool
    """Slow-path coalesced collectives record one entry per op before the end entry."""
    named_slow_end: bool
    """The slow-path end entry is "<OPTYPE>_coalesced" rather than "coalesced"."""
    p2p_ranks_in_name: bool
    """p2p profiling names carry group ranks: "nccl:send 0->1"."""
    json: bool
    """torch could write this version as JSON."""


_V2_10 = Layout(
    version="2.10",
    torch="2.9-2.15",
    bare_list=False,
    two_x=True,
    timeout=True,
    pg_status=True,
    threads=True,
    lib_key="comm_lib_version",
    lib_version="2.27.5",
    batch_parts=True,
    slow_parts=True,
    named_slow_end=True,
    p2p_ranks_in_name=True,
    json=True,
)
_V2_9 = replace(_V2_10, version="2.9", torch="2.8", lib_key="nccl_version", lib_version="2.26.2")
_V2_4 = replace(
    _V2_9,
    version="2.4",
    torch="2.5-2.7",
    threads=False,
    lib_key=None,
    lib_version="",
    slow_parts=False,
)
_V2_1 = replace(
    _V2_4,
    version="2.1",
    torch="2.4",
    timeout=False,
    pg_status=False,
    named_slow_end=False,
    json=False,
)
_V1_4 = replace(_V2_1, version="1.4", torch="2.3", two_x=False)
_V2_2 = replace(
    _V1_4,
    version="2.2",
    torch="2.2",
    bare_list=True,
    batch_parts=False,
    p2p_ranks_in_name=False,
)
LAYOUTS: dict[str, Layout] = {v.version: v for v in (_V2_2, _V1_4, _V2_1, _V2_4, _V2_9, _V2_10)}


def layout_of(version: str) -> Layout:
    """The layout of a version string, with a helpful error for unknown ones."""
    try:
        return LAYOUTS[version]
    except KeyError:
        raise ValueError(
            f"unknown flight-recorder version {version!r}; choose one of {', '.join(VERSIONS)}"
        ) from None


def entries_of(unit: Unit, layout: Layout) -> int:
    """How many entries `unit` records under `layout`."""
    if unit.kind is UnitKind.BATCH:
        return len(unit.calls) + 1 if layout.batch_parts else 1
    if unit.kind is UnitKind.SLOW:
        return len(unit.calls) + 1 if layout.slow_parts else 1
    return 1
