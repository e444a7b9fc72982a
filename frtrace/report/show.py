"""``frtrace show``: the raw entries side by side, aligned by (group, seq), not by buffer position.

One table per process group: one row per collective sequence number, one column per rank.
A rank with no entry at a seq says why: it had not reached it yet (its newest is lower), or
its ring buffer no longer holds it (its oldest is higher), or the seq is a gap in its buffer
(Gloo does not record every op). With more ranks than fit side by side, ranks that recorded
the same thing share one column, so 4,096 ranks are a handful of columns.

This view reads the tables only; it decides nothing (``analyze`` does). Groups are told apart
by name: a rank never holds two groups of one name, so a (name, seq) row is unambiguous.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from tabulate import tabulate

from frtrace.base.ranges import format_ranks
from frtrace.errors import InputError
from frtrace.load.dumpset import DumpSet
from frtrace.report.common import compact_ranks, ranks_phrase, short_frame

__all__ = ["ShowOptions", "render_show"]

MAX_SIDE_BY_SIDE = 8  # ranks shown as their own columns; more are grouped by what they did
MAX_WIDTH = 160  # wider than this, side by side becomes grouped
MAX_VARIANTS = 6  # distinct behaviours per row in the grouped layout
STACK_FRAMES = 6

_COLUMNS = [
    "rank",
    "group_name",
    "group_desc",
    "collective_seq",
    "p2p_seq",
    "op",
    "is_p2p",
    "p2p_src_local",
    "p2p_dst_local",
    "input_sizes",
    "input_dtypes",
    "state",
    "retired",
    "stack_id",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShowOptions:
    """What to show; ``None`` selects everything."""

    pg: str | None = None  # group name or description
    ranks: tuple[int, ...] | None = None
    seqs: tuple[int, ...] | None = None  # collective sequence numbers; None: the newest ``last``
    last: int = 8
    stacks: bool = False


def _label(name: str, desc: str | None) -> str:
    if desc and desc not in ("undefined", ""):
        return f"{desc} (pg {name})"
    return f"pg {name}"


def _groups(entries: pa.Table) -> list[tuple[str, str | None]]:
    """(name, description) of every group in the entries, in numeric name order."""
    pairs = (
        entries.select(["group_name", "group_desc"])
        .group_by(["group_name", "group_desc"])
        .aggregate([])
        .to_pylist()
    )
    seen: dict[str, str | None] = {}
    for row in pairs:
        name = row["group_name"]
        if name is None:
            continue
        if name not in seen or (row["group_desc"] not in (None, "", "undefined")):
            seen[name] = row["group_desc"]

    def key(item: tuple[str, str | None]) -> tuple[int, int | str]:
        return (0, int(item[0])) if item[0].isdigit() else (1, item[0])

    return sorted(seen.items(), key=key)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    """Groups shown as one table: one group, or every group sharing a description (the 512
    tp groups of a job; a rank is in one of them, so (description, seq) is unambiguous)."""

    label: str
    names: tuple[str, ...]


def _sections(groups: list[tuple[str, str | None]], pg: str | None) -> list[_Section]:
    by_desc: dict[str, list[str]] = defaultdict(list)
    order: list[str] = []
    single: dict[str, _Section] = {}
    for name, desc in groups:
        if pg is not None and pg in (name, _label(name, desc)):
            return [_Section(label=_label(name, desc), names=(name,))]
        if desc and desc not in ("undefined", ""):
            if desc not in by_desc:
                order.append(desc)
            by_desc[desc].append(name)
        else:
            order.append(f"\0{name}")
            single[f"\0{name}"] = _Section(label=_label(name, desc), names=(name,))
    sections = []
    for key in order:
        if key in single:
            sections.append(single[key])
            continue
        names = by_desc[key]
        label = (
            _label(names[0], key)
            if len(names) == 1
            else f"{key} ({len(names)} groups: pg {_names(names)})"
        )
        sections.append(_Section(label=label, names=tuple(names)))
    if pg is not None:
        sections = [sec for sec in sections if pg in by_desc and sec.names == tuple(by_desc[pg])]
    return sections


def _names(names: list[str]) -> str:
    if all(n.isdigit() for n in names):
        return format_ranks(int(n) for n in names)
    return ",".join(names[:4]) + (f",… (+{len(names) - 4})" if len(names) > 4 else "")


def _shape(sizes: Any) -> str:
    if not sizes:
        return "[]"
    return " ".join("[" + ",".join(str(d) for d in s) + "]" for s in sizes[:3]) + (
        " …" if len(sizes) > 3 else ""
    )


_STATES = {"scheduled": "sched", "started": "start", "completed": "compl"}


def _state(row: dict[str, Any]) -> str:
    state = _STATES.get(row["state"], row["state"] or "-")
    return f"{state},ret" if row["retired"] else state


def _cell(rows: list[dict[str, Any]]) -> str:
    """One rank's entries at one seq (several for a coalesced run) as one cell."""
    ops = "+".join(dict.fromkeys(r["op"] or "?" for r in rows))
    first, final = rows[0], rows[-1]
    dtypes = ",".join(dict.fromkeys(first["input_dtypes"] or [])) or "-"
    return f"{ops} {_shape(first['input_sizes'])} {dtypes} {_state(final)}"


def render_show(dumps: DumpSet, options: ShowOptions) -> str:
    """The side-by-side view as text."""
    entries = dumps.entries.select(_COLUMNS)
    groups = _groups(entries)
    sections = _sections(groups, options.pg)
    if not sections:
        known = ", ".join(_label(*g) for g in groups[:12])
        raise InputError(
            f"--pg {options.pg!r} names no process group in these dumps; they have {known}"
        )
    if options.ranks is not None:
        entries = entries.filter(pc.is_in(entries.column("rank"), pa.array(options.ranks)))
    out = [
        f"{len(dumps.loaded_ranks)} ranks loaded; rows aligned by (group, collective seq); "
        + (
            f"seqs {format_ranks(options.seqs)}"
            if options.seqs
            else f"the newest {options.last} seqs of each group"
        )
        + ("; ranks " + compact_ranks(options.ranks) if options.ranks else ""),
        "state: sched/start/compl = scheduled/started/completed, ret = retired",
    ]
    for section in sections:
        out.extend(_section(dumps, entries, section, options))
    if len(out) == 2:
        out.append("")
        out.append("no entries match")
    return "\n".join(out).rstrip() + "\n"


def _section(
    dumps: DumpSet, entries: pa.Table, section: _Section, options: ShowOptions
) -> list[str]:
    mine = entries.filter(pc.is_in(entries.column("group_name"), pa.array(section.names)))
    if mine.num_rows == 0:
        return []
    coll = mine.filter(pc.invert(pc.fill_null(mine.column("is_p2p"), False)))
    lines = ["", section.label, "=" * len(section.label)]
    if coll.num_rows:
        lines.extend(_collectives(dumps, coll, options))
    p2p = mine.filter(pc.fill_null(mine.column("is_p2p"), False))
    if p2p.num_rows:
        lines.extend(_p2p(p2p, options))
    return lines


def _collectives(dumps: DumpSet, coll: pa.Table, options: ShowOptions) -> list[str]:
    ranks_col = coll.column("rank")
    seq_col = coll.column("collective_seq")
    extent = (
        pa.table({"rank": ranks_col, "seq": seq_col})
        .group_by("rank")
        .aggregate([("seq", "min"), ("seq", "max")])
        .to_pylist()
    )
    lowest = {int(r["rank"]): int(r["seq_min"]) for r in extent}
    highest = {int(r["rank"]): int(r["seq_max"]) for r in extent}
    members = sorted(highest)
    if options.seqs is not None:
        wanted = sorted(options.seqs)
    else:  # the newest ``last`` of each group: groups of one description may be far apart
        tops = (
            pa.table({"g": coll.column("group_name"), "seq": seq_col})
            .group_by("g")
            .aggregate([("seq", "max")])
            .column("seq_max")
            .to_pylist()
        )
        wanted = sorted(
            {s for top in tops for s in range(max(1, int(top) - options.last + 1), int(top) + 1)}
        )
    rows = coll.filter(pc.is_in(seq_col, pa.array(wanted, type=pa.int64()))).to_pylist()
    cells: dict[int, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        cells[int(row["collective_seq"])][int(row["rank"])].append(row)
    seqs = [s for s in wanted if s in cells or any(lo <= s for lo in lowest.values())]
    if not seqs:
        return ["no collectives at these seqs"]

    def text(seq: int, rank: int) -> str:
        found = cells.get(seq, {}).get(rank)
        if found:
            return _cell(found)
        if seq > highest[rank]:
            return f"- not reached (newest #{highest[rank]})"
        if seq < lowest[rank]:
            return f"- not in buffer (oldest #{lowest[rank]})"
        return "- no entry (gap)"

    lines: list[str] = []
    side = (
        [[str(s), *(text(s, r) for r in members)] for s in seqs]
        if len(members) <= MAX_SIDE_BY_SIDE
        else []
    )
    width = sum(max(len(row[i]) for row in side) + 2 for i in range(len(side[0]))) if side else 0
    if side and width <= MAX_WIDTH:
        lines.append(tabulate(side, headers=["seq", *(f"rank {r}" for r in members)]))
    else:
        table = []
        for s in seqs:
            same: dict[str, list[int]] = defaultdict(list)
            for r in members:
                same[text(s, r)].append(r)
            variants = sorted(same.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
            for i, (cell, ranks) in enumerate(variants[:MAX_VARIANTS]):
                table.append([str(s) if i == 0 else "", compact_ranks(ranks, max_chars=40), cell])
            if len(variants) > MAX_VARIANTS:
                rest = sum(len(v[1]) for v in variants[MAX_VARIANTS:])
                table.append(
                    ["", f"+{rest} ranks", f"{len(variants) - MAX_VARIANTS} more variants"]
                )
        lines.append(tabulate(table, headers=["seq", "ranks", "entry"]))
    if options.stacks:
        lines.extend(_stacks(dumps, seqs, cells))
    return lines


def _stacks(
    dumps: DumpSet, seqs: list[int], cells: dict[int, dict[int, list[dict[str, Any]]]]
) -> list[str]:
    lines = ["", "stacks (innermost first):"]
    for s in seqs:
        same: dict[int | None, list[int]] = defaultdict(list)
        for rank, rows in sorted(cells.get(s, {}).items()):
            same[rows[0]["stack_id"]].append(rank)
        for stack_id, ranks in sorted(same.items(), key=lambda kv: kv[1][0]):
            frames = dumps.stack(stack_id)
            text = (
                " <- ".join(short_frame(f"{n} ({f}:{ln})") for n, f, ln in frames[:STACK_FRAMES])
                if frames
                else "(no stack recorded)"
            )
            lines.append(f"  #{s} {ranks_phrase(ranks)}: {text}")
    return lines


def _p2p(p2p: pa.Table, options: ShowOptions) -> list[str]:
    rows = p2p.to_pylist()
    per_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        per_rank[int(row["rank"])].append(row)
    table = []
    for rank in sorted(per_rank):
        for row in per_rank[rank][-options.last :]:
            arrow = (
                f"{row['p2p_src_local']}->{row['p2p_dst_local']}"
                if row["op"] == "send"
                else f"{row['p2p_dst_local']}<-{row['p2p_src_local']}"
            )
            table.append([str(rank), str(row["p2p_seq"]), f"{row['op']} {arrow}", _state(row)])
    return [
        "",
        "p2p ops (p2p_seq counts per rank: not aligned across ranks; group-local peers):",
        tabulate(table, headers=["rank", "p2p seq", "op", "state"]),
    ]
