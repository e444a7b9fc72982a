"""One rank's several dumps read as one rank's evidence: its process's several recorders.

Stage 0 reads a rank's files together only where they are proven one process's
(``frtrace.incident.recorders``): its several recorders (torch keeps one per kind of backend:
Gloo's generic recorder, NCCL's, one per hook-recorded backend in torch 2.15+), or one
recorder dumped twice (pickle and JSON). After loading, ``merge_recorders`` makes each such
rank one rank again:

- **Entries**: an entry seen in two dumps (the same recorder: one ``backend``, group,
  sequence ids, op and creation time) is kept once, with the most advanced state either dump
  saw (a later dump of one recorder only moves an entry on), its stack from whichever dump has
  one. Each entry keeps the recorder it came from: its ``backend`` column (``gloo``, ``nccl``,
  ``nccl2``...), which is what the analysis reads completion by (``retired`` for Gloo's,
  ``state`` for NCCL's and the hook recorders', which mark ``completed`` only when the backend
  reports it). A rank's entries are put in creation-time order.
- **Groups of two recorders**: a group whose ops two recorders record (a ``cpu:gloo,cuda:nccl``
  group: its CPU ops in Gloo's, its CUDA ops in NCCL's) has a sequence of its own in each, so
  each recorder's part is a group of its own, ``<name>:<backend>``, with the group's recorded
  members. A rank's second recorder's ``pg_id``\\ s (per recorder, they collide) are moved out
  of the first's way; a ``pg_status`` row that cannot be told to one recorder is left out.
- **Files**: one row per rank (the first dump's path, the merged counts), the others named in
  its problems.

Where no rank has several dumps, the set is returned as it is.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.incident.problems import LoadProblem
from frtrace.load import schema
from frtrace.load.dumpset import DumpSet

__all__ = ["PG_ID_STRIDE", "merge_recorders", "qualified"]

PG_ID_STRIDE = 1 << 40  # a rank's k-th other recorder's pg_ids, moved by k strides
_STATE_RANK = {"scheduled": 0, "started": 1, "completed": 2}
_KEY = ["rank", "backend", "pg_id", "group_name", "collective_seq", "p2p_seq", "op_id", "op"]


def qualified(name: str, backend: str) -> str:
    """The name of one recorder's part of a group two recorders record."""
    return f"{name}:{backend}"


def merge_recorders(dumps: DumpSet) -> DumpSet:
    """The set with each rank that has several dumps made one rank (module docstring)."""
    file_ranks = dumps.files.column("rank").to_pylist()
    several = {r for r, n in Counter(file_ranks).items() if n > 1}
    if not several:
        return dumps
    entries, owners = _entries(dumps.entries, several)
    renamed = _two_recorder_groups(entries)
    if renamed:
        entries = _renamed(entries, renamed)
    status, dropped = _pg_status(dumps.pg_status, several, owners)
    files, problems = _files(dumps, entries, several, dropped)
    return dataclasses.replace(
        dumps,
        entries=entries,
        groups=_groups(dumps.groups, several, renamed),
        pg_status=status,
        files=files,
        problems=problems,
    )


def _entries(
    entries: pa.Table, several: set[int]
) -> tuple[pa.Table, dict[tuple[int, int], list[str]]]:
    """The entries with each merged rank's duplicates dropped and its rows in time order, its
    other recorders' pg_ids moved; per (rank, original pg_id) of a merged rank, the backends
    whose entries use it."""
    rank = entries.column("rank").to_numpy()
    rows = np.flatnonzero(np.isin(rank, np.fromiter(several, dtype=rank.dtype)))
    frame = _frame(entries, rows)
    frame["at"] = rows
    frame["done"] = frame["state"].map(_STATE_RANK).fillna(0)
    frame["has_stack"] = frame["stack_id"].notna()
    frame = frame.sort_values(
        ["done", "retired", "has_stack", "at"], ascending=[False, False, False, True]
    )
    key = [*_KEY, "time_created_ns"]
    stack = frame.groupby(key, dropna=False, sort=False)["stack_id"].transform("first")
    frame["stack_id"] = stack
    frame = frame.drop_duplicates(key, keep="first")
    frame = frame.sort_values(["rank", "time_created_ns", "at"], na_position="first")
    owners: dict[tuple[int, int], list[str]] = defaultdict(list)
    shift = np.zeros(len(frame), dtype=np.int64)
    for r, part in frame.groupby("rank", sort=False):
        r = int(str(r))  # (pandas types a group key loosely)
        backends = sorted(part["backend"].dropna().unique().tolist())
        for k, b in enumerate(backends):
            mine = (part["backend"] == b).to_numpy()
            for pg in part.loc[mine, "pg_id"].dropna().unique().tolist():
                owners[(r, int(pg))].append(b)
            if k:
                shift[frame.index.get_indexer(part.index[mine])] = k * PG_ID_STRIDE
    frame["pg_id"] = frame["pg_id"] + shift
    frame["entry_index"] = frame.groupby("rank", sort=False).cumcount()
    return _spliced(entries, rank, frame), owners


def _frame(entries: pa.Table, rows: np.ndarray) -> pd.DataFrame:
    """The merged ranks' rows, with the columns the merge reads, as plain values (numbers as
    pandas' nullable integers)."""
    cols = [*_KEY, "time_created_ns", "state", "retired", "stack_id", "entry_index"]
    part = entries.select(cols).take(pa.array(rows))
    data: dict[str, Any] = {}
    for name in cols:
        column = part.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if pa.types.is_integer(column.type):
            data[name] = pd.array(column.to_pylist(), dtype="Int64")
        else:
            data[name] = pd.Series(column.to_pylist(), dtype=object)
    frame = pd.DataFrame(data)
    frame["retired"] = frame["retired"].fillna(False).astype(bool)
    return frame


def _spliced(entries: pa.Table, rank: np.ndarray, frame: pd.DataFrame) -> pa.Table:
    """The table with the merged ranks' rows replaced by ``frame``'s (kept rows, in its order,
    with its pg_id, stack_id and entry_index), every rank where its rows were."""
    first: dict[int, int] = {}
    for i, r in enumerate(rank.tolist()):
        first.setdefault(r, i)
    merged = frame["at"].to_numpy(np.int64)
    others = np.flatnonzero(~np.isin(rank, frame["rank"].unique().astype(rank.dtype)))
    where = np.array([first[int(r)] for r in rank[others]], dtype=np.int64)
    where_m = np.array([first[int(r)] for r in frame["rank"]], dtype=np.int64)
    order_key = np.concatenate([where, where_m])
    within = np.concatenate([others, np.arange(len(merged)) + len(rank)])
    rows = np.concatenate([others, merged])
    order = np.lexsort((within, order_key))
    taken = entries.take(pa.array(rows[order]))
    put = np.flatnonzero(order >= len(others))  # where the merged rows ended up
    picked = order[put] - len(others)
    for name in ("pg_id", "stack_id", "entry_index"):
        column = taken.column(name).to_pylist()
        value = frame[name].to_numpy(dtype=object)[picked]
        for at, v in zip(put.tolist(), value.tolist(), strict=True):
            column[at] = None if pd.isna(v) else int(v)
        i = taken.schema.get_field_index(name)
        taken = taken.set_column(
            i, schema.ENTRIES.field(name), pa.array(column, taken.field(i).type)
        )
    return taken


def _two_recorder_groups(entries: pa.Table) -> dict[str, list[str]]:
    """Group names whose entries two recorders (backends) wrote -> those backends."""
    by_name: dict[str, set[str]] = defaultdict(set)
    for name, backend in zip(
        entries.column("group_name").to_pylist(), entries.column("backend").to_pylist(), strict=True
    ):
        if name is not None and backend is not None:
            by_name[name].add(backend)
    return {n: sorted(b) for n, b in by_name.items() if len(b) > 1}


def _renamed(entries: pa.Table, renamed: dict[str, list[str]]) -> pa.Table:
    names = entries.column("group_name").to_pylist()
    backends = entries.column("backend").to_pylist()
    out = [
        qualified(n, b) if n in renamed and b is not None else n
        for n, b in zip(names, backends, strict=True)
    ]
    i = entries.schema.get_field_index("group_name")
    column = pa.array(out, pa.string()).dictionary_encode().cast(schema.TEXT)
    return entries.set_column(i, schema.ENTRIES.field("group_name"), column)


def _groups(groups: pa.Table, several: set[int], renamed: dict[str, list[str]]) -> pa.Table:
    """pg_config rows: a merged rank's rows once; a group two recorders record, once per
    recorder's part (the same members: one group)."""
    keys = groups.select(["rank", "group_name", "group_desc", "pg_id"]).to_pylist()
    seen: set[tuple[Any, ...]] = set()
    take: list[int] = []
    names: list[str] = []
    for i, row in enumerate(keys):
        if row["rank"] in several:
            key = tuple(row.values())
            if key in seen:
                continue
            seen.add(key)
        parts = renamed.get(row["group_name"])
        for name in (
            [qualified(row["group_name"], b) for b in parts] if parts else [row["group_name"]]
        ):
            take.append(i)
            names.append(name)
    out = groups.take(pa.array(take, pa.int64()))
    i = out.schema.get_field_index("group_name")
    return out.set_column(i, schema.GROUPS.field("group_name"), pa.array(names, pa.string()))


def _pg_status(
    status: pa.Table, several: set[int], owners: dict[tuple[int, int], list[str]]
) -> tuple[pa.Table, dict[int, int]]:
    """pg_status rows: a merged rank's rows of one recorder once (the newest values); a row
    whose pg_id two recorders use, or none, left out (per rank: how many)."""
    dropped: Counter[int] = Counter()
    by_key: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    kept: list[dict[str, Any]] = []
    for row in status.to_pylist():
        if row["rank"] in several:
            by_key[(row["rank"], row["pg_id"])].append(row)
        else:
            kept.append(row)
    recorders = defaultdict(set)
    for (r, _), backends in owners.items():
        recorders[r].update(backends)
    for (r, pg), same in by_key.items():
        mine = owners.get((r, pg), [])
        if len(recorders[r]) > 1 and (len(mine) != 1 or len(same) > 1):
            dropped[r] += len(same)
            continue
        shift = sorted(recorders[r]).index(mine[0]) * PG_ID_STRIDE if mine else 0
        row = {"rank": r, "pg_id": pg + shift}
        for field in ("last_enqueued", "last_started", "last_completed"):
            values = [s[field] for s in same if s[field] is not None]
            row[field] = max(values) if values else None
        kept.append(row)
    return pa.Table.from_pylist(kept, schema=schema.PG_STATUS), dict(dropped)


def _files(
    dumps: DumpSet, entries: pa.Table, several: set[int], dropped: dict[int, int]
) -> tuple[pa.Table, tuple[LoadProblem, ...]]:
    """One files row per rank (``entries``: the merged ones); a merged rank's other files
    named in its problems (a file of it that could not be read is then a warning: the rank
    has evidence)."""
    counts = Counter(entries.column("rank").to_pylist())
    backends = _backend_of(entries, several)
    rows = dumps.files.to_pylist()
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["rank"] in several:
            by_rank[row["rank"]].append(row)
    out: list[dict[str, Any]] = []
    done: set[int] = set()
    for row in rows:
        r = row["rank"]
        if r not in several:
            out.append(row)
            continue
        if r in done:
            continue
        done.add(r)
        out.append(_one_row(by_rank[r], counts[r], backends.get(r), dropped.get(r, 0)))
    loaded = {row["rank"] for row in out if row["loaded"]}
    problems = tuple(
        dataclasses.replace(p, fatal=False, message=f"{p.message} (its other dump was read)")
        if p.fatal and p.rank in several and p.rank in loaded
        else p
        for p in dumps.problems
    )
    return pa.Table.from_pylist(out, schema=schema.FILES), problems


def _one_row(
    rows: list[dict[str, Any]], count: int, backend: str | None, dropped: int
) -> dict[str, Any]:
    readable = [r for r in rows if r["loaded"]] or rows
    first = dict(readable[0])
    others = [r["path"] for r in rows if r is not readable[0]]
    said = [p for r in readable for p in (r["problems"] or [])]
    said += [f"{r['path']}: {r['error']}" for r in rows if not r["loaded"] and r is not first]
    said.append(
        f"read together with {', '.join(others)} (the same process's dumps: "
        f"{', '.join(sorted({str(r['encoding']) for r in readable}))}); an entry seen twice "
        "counted once"
    )
    if dropped:
        said.append(f"{dropped} pg_status row(s) no single recorder owns left out")
    first.update(
        entry_count=count if first["loaded"] else first["entry_count"],
        backend=backend if backend is not None else first["backend"],
        wrapped=any(bool(r["wrapped"]) for r in readable),
        has_stacks=any(bool(r["has_stacks"]) for r in readable),
        size_bytes=sum(r["size_bytes"] for r in rows),
        problems=said,
    )
    return first


def _backend_of(entries: pa.Table, several: set[int]) -> dict[int, str]:
    """Per merged rank, the backend most of its entries name."""
    wanted = pa.array(sorted(several), pa.int32())
    part = entries.select(["rank", "backend"]).filter(pc.is_in(entries.column("rank"), wanted))
    counts: Counter[tuple[int, str]] = Counter(
        (r, b)
        for r, b in zip(
            part.column("rank").to_pylist(), part.column("backend").to_pylist(), strict=True
        )
        if b is not None
    )
    best: dict[int, tuple[int, str]] = {}
    for (r, b), n in counts.items():
        if r not in best or (n, b) > best[r]:
            best[r] = (n, b)
    return {r: b for r, (_, b) in best.items()}
