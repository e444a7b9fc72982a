"""A large set's history cut to its frontier: per-(group, seq) summaries folded where the files
are read, merged in a tree, and from them the entries the analysis needs.

A collective that every rank recording its group recorded, finished everywhere, with one
signature, says nothing about a hang but that it finished: a 100,000-rank job's history is
nearly all such ops. So on a cluster (``load.workers.cluster``) each worker folds its files' entries
into one row per (group, seq) (``fold``: how many ranks have it, whether all finished it,
the lowest and highest signature, the last two arrivals), the partials are merged in a tree
(``merge``), and the last merge keeps, per group, only where the first op that is *not*
settled lies (``cut``). The files are then read again and each keeps its entries from
``margin`` ops before that point on, its own newest ``margin`` ops of each group wherever
they lie (a rank stuck far behind keeps the ops it stopped at), every p2p entry, and the
settled ops one rank reached clearly last (``Frontier.keep``): each rank's history in a group
stays one unbroken run to its end, but for those. The coordinator never holds a summary per
op, only a cutoff per group.

A partial is numpy arrays sorted by one int64 key per op, its group's code (the partial's own
list of groups) above its seq: a merge renumbers the groups, sorts the runs it was given
(each already sorted) and reduces each key's rows in one pass.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.load.opkinds import COMPARE_INPUT_ONLY, COMPARE_OUTPUT_ONLY, UNEVEN_OPS

__all__ = ["LATE_NS", "MARGIN", "Frontier", "Partial", "cut", "fold", "merge"]

# Settled ops kept before the first op that is not: the lead-up the rules and the straggler
# finder read (a straggler needs 3 clear late arrivals; a mismatch shows at the frontier).
MARGIN = 32

# A settled op whose last rank arrived this much after the one before it is kept wherever it
# lies: the straggler finder's evidence (``analysis.stragglers.MIN_MARGIN_MS``, 5 ms; half
# of it here, so an op's arrival read from another of a rank's entries loses no event).
LATE_NS = 2_500_000
_NEVER = np.iinfo(np.int64).min  # no arrival known
_SEQ_BITS = 32  # a key: the group's code above the seq; a seq outside [0, 2^31) is not folded
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_MULT = (0x27D4EB2F165667C5, 0x165667B19E3779F9, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)

GroupKey = tuple[str, str]
_T = TypeVar("_T", pa.RecordBatch, pa.Table)


@dataclass(frozen=True, slots=True)
class Partial:
    """What some ranks' files say per (group, seq), sorted by key, and per group."""

    groups: tuple[GroupKey, ...]  # a group's code is its place here
    first: np.ndarray  # per group: the highest of the ranks' lowest seqs
    last: np.ndarray  # per group: the highest seq
    key: np.ndarray  # int64, ascending: code << 32 | seq
    n: np.ndarray  # ranks that recorded the op
    done: np.ndarray  # every one of them finished it
    sig_min: np.ndarray  # uint64: the lowest and highest signature
    sig_max: np.ndarray
    t1: np.ndarray  # int64 ns: the last arrival, and the one before it (_NEVER: unknown)
    t2: np.ndarray


@dataclass(frozen=True, slots=True)
class Frontier:
    """Per group, the first seq every rank keeps (each rank also keeps its own newest
    ``margin`` ops of the group, wherever its cutoff is)."""

    margin: int
    cutoffs: dict[GroupKey, int]
    settled: int  # ops settled before their group's cutoff (their entries not kept)
    # settled ops before the cutoff kept all the same: one rank arrived clearly last
    late: dict[GroupKey, frozenset[int]] = field(default_factory=dict)

    def keep(self, entries: _T) -> _T:
        """One dump's entries, less the settled history before its groups' cutoffs."""
        if entries.num_rows == 0:
            return entries
        rows = _rows(entries)
        keep = ~rows.folded
        for code, group in enumerate(rows.groups):
            mine = rows.folded & (rows.code == code)
            cutoff = self.cutoffs.get(group)
            if cutoff is None or not mine.any():  # a group no summary knows: all kept
                keep |= mine
                continue
            own = int(rows.seq[mine].max())  # this rank's newest op in the group
            keep |= mine & (rows.seq > min(cutoff - 1, own - self.margin))
            late = self.late.get(group)
            if late:
                keep |= mine & np.isin(rows.seq, np.fromiter(late, dtype=np.int64))
        if keep.all():
            return entries
        return entries.filter(pa.array(keep))


@dataclass(frozen=True, slots=True)
class _Rows:
    """An entries table's rows, as the fold and the cut read them."""

    groups: tuple[GroupKey, ...]
    code: np.ndarray  # per row: its group's place in ``groups``
    seq: np.ndarray
    folded: np.ndarray  # a collective with a seq in range (else never folded, always kept)


def _rows(entries: pa.RecordBatch | pa.Table) -> _Rows:
    name_codes, names = _encoded(entries.column("group_name"))
    desc_codes, descs = _encoded(entries.column("group_desc"))
    width = max(1, len(descs))
    pairs, code = np.unique(name_codes * width + desc_codes, return_inverse=True)
    groups = tuple((names[p // width], descs[p % width]) for p in pairs.tolist())
    seq = _filled(entries.column("collective_seq"), -1).astype(np.int64)
    p2p = _filled(entries.column("is_p2p"), False)
    folded = ~p2p & (seq >= 0) & (seq < (1 << (_SEQ_BITS - 1)))
    return _Rows(groups=groups, code=code.astype(np.int64).ravel(), seq=seq, folded=folded)


def _filled(column: pa.Array | pa.ChunkedArray, null: object) -> np.ndarray:
    """A column's values, nulls as ``null`` (no Arrow call where it has none)."""
    if column.null_count:
        column = column.fill_null(null)
    values: np.ndarray = column.to_numpy(zero_copy_only=False)
    return values


def _encoded(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A text column as codes into its distinct values (null as '')."""
    if isinstance(column, pa.ChunkedArray) and column.num_chunks == 1:
        column = column.chunk(0)
    if isinstance(column, pa.DictionaryArray) and not column.null_count:
        codes = column.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        return codes, [str(v) for v in column.dictionary.to_pylist()]
    text = pc.cast(column, pa.string()).fill_null("")
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    encoded = pc.dictionary_encode(text)
    values: list[str] = encoded.dictionary.to_pylist()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), values


def _signature(entries: pa.RecordBatch | pa.Table, rows: np.ndarray) -> np.ndarray:
    """Per entry of ``rows``, a value equal across ranks where matching would call the ops
    equal (op, dtypes, and the sizes the op's family compares); unequal where it might not."""
    op_codes, ops = _encoded(entries.column("op"))
    op_codes = op_codes[rows]

    def flags(names: frozenset[str]) -> np.ndarray:
        per_op = np.array([o in names for o in ops], dtype=bool)
        per_row: np.ndarray = per_op[op_codes]
        return per_row

    uneven, input_only, output_only = (
        flags(UNEVEN_OPS),
        flags(COMPARE_INPUT_ONLY),
        flags(COMPARE_OUTPUT_ONLY),
    )

    def sig(column: str, skip: np.ndarray) -> np.ndarray:
        values: np.ndarray = _filled(entries.column(column), 0)[rows]
        values = values.astype(np.uint64)
        values[skip] = 0
        return values

    parts = (
        sig("input_dtype_sig", output_only),
        sig("output_dtype_sig", input_only),
        sig("input_sig", uneven | output_only),
        sig("output_sig", uneven | input_only),
    )
    hashes: np.ndarray = np.array([zlib.crc32(o.encode()) for o in ops], dtype=np.uint64)
    out = hashes[op_codes]
    with np.errstate(over="ignore"):
        for part, mult in zip(parts, _MULT, strict=True):
            out = (out * np.uint64(0x100000001B3)) ^ (part * np.uint64(mult))
    signature: np.ndarray = out
    return signature


def _segments(key: np.ndarray) -> np.ndarray:
    """Where each run of equal keys of a sorted array starts."""
    if key.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))


def fold(entries: pa.RecordBatch | pa.Table) -> Partial:
    """One rank's dump, as a partial: its collectives per (group, seq), its groups' extent."""
    rows = _rows(entries)
    at = np.flatnonzero(rows.folded)
    code, seq = rows.code[at], rows.seq[at]
    key = (code << _SEQ_BITS) | seq
    state = pc.cast(entries.column("state"), pa.string())
    finished = pc.equal(state, "completed").fill_null(False).to_numpy(zero_copy_only=False)
    created = entries.column("time_created_ns")
    t = _filled(created, np.iinfo(np.int64).max).astype(np.int64)[at]
    sig = _signature(entries, at)
    order = np.argsort(key, kind="stable")
    key, code, seq = key[order], code[order], seq[order]
    starts = _segments(key)
    # a rank's entries of one op (a coalesced run: its ops stay "scheduled", its marker says
    # how the run ended) as one: finished if any is, one signature whatever their order (a
    # sum that wraps), its arrival the earliest
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(sig[order], starts) if starts.size else sig[:0]
    arrival = np.minimum.reduceat(t[order], starts) if starts.size else t[:0]
    arrival[arrival == np.iinfo(np.int64).max] = _NEVER
    count = len(rows.groups)
    first = np.full(count, np.iinfo(np.int64).max)
    last = np.full(count, -1, dtype=np.int64)
    np.minimum.at(first, code, seq)
    np.maximum.at(last, code, seq)
    return Partial(
        groups=rows.groups,
        first=np.where(last >= 0, first, -1),
        last=last,
        key=key[starts],
        n=np.ones(starts.size, dtype=np.int64),
        done=np.logical_or.reduceat(finished[at][order], starts)
        if starts.size
        else np.zeros(0, dtype=bool),
        sig_min=sums,
        sig_max=sums.copy(),
        t1=arrival,
        t2=np.full(starts.size, _NEVER, dtype=np.int64),
    )


def merge(*partials: Partial) -> Partial:
    """Several partials as one: counts added, agreement and extents combined."""
    codes: dict[GroupKey, int] = {}
    for p in partials:
        for g in p.groups:
            codes.setdefault(g, len(codes))
    first = np.full(len(codes), -1, dtype=np.int64)
    last = np.full(len(codes), -1, dtype=np.int64)
    keys = []
    for p in partials:
        renumber = np.array([codes[g] for g in p.groups], dtype=np.int64)
        np.maximum.at(first, renumber, p.first)
        np.maximum.at(last, renumber, p.last)
        keys.append((renumber[p.key >> _SEQ_BITS] << _SEQ_BITS) | (p.key & _SEQ_MASK))
    key = np.concatenate(keys)
    order = np.argsort(key, kind="stable")  # (runs already sorted: a merge of runs)
    key = key[order]

    def joined(name: str) -> np.ndarray:
        out: np.ndarray = np.concatenate([getattr(p, name) for p in partials])[order]
        return out

    starts = _segments(key)
    t1, t2 = joined("t1"), joined("t2")
    last_t = np.maximum.reduceat(t1, starts) if starts.size else t1
    runs = np.diff(np.append(starts, key.size))
    is_last = t1 == np.repeat(last_t, runs)
    ties = np.add.reduceat(is_last.astype(np.int64), starts) if starts.size else runs
    before = np.maximum.reduceat(np.where(is_last, _NEVER, t1), starts) if starts.size else t1
    second = np.maximum(before, np.maximum.reduceat(t2, starts) if starts.size else t2)
    return Partial(
        groups=tuple(codes),
        first=first,
        last=last,
        key=key[starts],
        n=np.add.reduceat(joined("n"), starts) if starts.size else key,
        done=np.logical_and.reduceat(joined("done"), starts) if starts.size else key.astype(bool),
        sig_min=np.minimum.reduceat(joined("sig_min"), starts) if starts.size else key,
        sig_max=np.maximum.reduceat(joined("sig_max"), starts) if starts.size else key,
        t1=last_t,
        t2=np.where(ties >= 2, last_t, second),
    )


def cut(partial: Partial, margin: int = MARGIN) -> Frontier:
    """Per group, the first op that is not settled (not every rank that records the group
    has it, not finished everywhere, or two signatures) at or after the seq from which every
    such rank still holds its history; the cutoff ``margin`` ops before it."""
    if partial.key.size == 0:
        return Frontier(margin=margin, cutoffs={}, settled=0)
    code, seq = partial.key >> _SEQ_BITS, partial.key & _SEQ_MASK
    groups = _segments(code)
    most = np.repeat(np.maximum.reduceat(partial.n, groups), np.diff(np.append(groups, code.size)))
    unsettled = (partial.n < most) | ~partial.done | (partial.sig_min != partial.sig_max)
    after = unsettled & (seq >= partial.first[code])
    frontier = partial.last + 1  # (no unsettled op: the cut is at the group's end)
    np.minimum.at(frontier, code[after], seq[after])
    cutoffs = frontier - margin
    below = seq < cutoffs[code]
    known = (partial.t1 != _NEVER) & (partial.t2 != _NEVER)
    with np.errstate(over="ignore"):
        late = ~unsettled & below & known & (partial.t1 - partial.t2 >= LATE_NS)
    late_groups: dict[GroupKey, frozenset[int]] = {}
    for c in np.unique(code[late]).tolist():
        late_groups[partial.groups[c]] = frozenset(seq[late & (code == c)].tolist())
    present = np.unique(code).tolist()
    return Frontier(
        margin=margin,
        cutoffs={partial.groups[c]: int(cutoffs[c]) for c in present},
        settled=int((~unsettled & below & ~late).sum()),
        late=late_groups,
    )
