"""Line up every group's ops across its members: by sequence id, never by record_id.

``record_id`` counts every op of one process, so it differs between ranks as soon as they are
in different groups, and ring buffers that wrapped at different points shift it further. The
key that means the same collective on every member is (group, ``collective_seq_id``).

Matching produces, vectorised over all entries:

- one *logical collective* per (rank, group, seq): a coalesced run (several entries sharing one
  seq, ended by a ``*coalesced`` entry) counts once, its signature built from all its entries
  (its closing entry gone, its rank's ``pg_status`` says whether it finished: ``p2pstatus``);
- per (group, seq): who recorded it, whether any member finished it (a collective cannot finish
  on one member unless every member joined it), and whether the members agree on what it is;
- per (rank, group): the highest and lowest seq its buffer holds, to tell "never reached this
  seq" (above its highest) from "cannot know" (below its lowest, once the buffer wrapped);
- per rank: the oldest op it has not finished (where it is blocked), including p2p ops, whose
  state in a ``batch_isend_irecv`` is carried by the batch's closing ``coalesced`` entry (or,
  where that entry is gone, by the rank's ``pg_status``: ``p2pstatus``);
- per unfinished send/recv: the op of its peer it meets, counted in posting order (``p2ppairs``).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.analysis.facts.coalesce import (
    drop_truncated_runs,
    logical_collectives,
    mark_p2p_batches,
)
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import (
    COMPARE_INPUT_ONLY,
    COMPARE_OUTPUT_ONLY,
    UNEVEN_OPS,
    MatchResult,
    codes,
    fixed_values,
)
from frtrace.analysis.facts.p2ppairs import pair_p2p
from frtrace.analysis.facts.p2pstatus import settle_by_status, settle_collectives_by_status
from frtrace.analysis.facts.pending import (
    blocked_ops,
    consensus_of,
    p2p_ops,
    pending_collectives,
    pending_p2p_ops,
    settle_completion,
)
from frtrace.analysis.facts.segments import rank_group_spans
from frtrace.load.dumpset import DumpSet
from frtrace.load.hooks import give_back_memory, release_pages

__all__ = ["match"]


def _lookup(
    codes_: np.ndarray,
    values: list[str | None],
    table: dict[str, Any],
    default: Any,
    dtype: type[np.generic],
) -> np.ndarray:
    """Map codes (-1: null) through ``table`` (by value), as ``dtype``; nulls and unknown
    values get ``default``. One comparison of the codes per value the table maps elsewhere
    (no more than the table holds: the values are distinct), not a gather through int64
    indices (a copy of the codes as wide again, then one as wide as the result)."""
    out = np.full(len(codes_), default, dtype=dtype)
    for code, value in enumerate(values):
        mapped = table.get(value, default) if value is not None else default
        if mapped != default:
            out[codes_ == code] = mapped
    return out


def _state_rank(entries: pa.Table) -> np.ndarray:
    state, values = codes(entries.column("state"))
    return _lookup(state, values, {"started": 1, "completed": 2}, 0, np.int8)


# Pairs of (rank, group name) looked up through a table of every pair's place (marked in one
# pass: 10 ms at 4,096 ranks, where hashing 8 million pairs took 0.1-0.2 s) where there are
# at most this many more places than rows (the table's 5 bytes a place then never exceed the
# 8 bytes a row of the hash's codes); else hashed (ranks numbered far apart).
_PAIRS_COUNTED = 1 << 16


def _gid_column(entries: pa.Table, membership: Membership) -> np.ndarray:
    """Group id per entry row (-1 where the group is unknown)."""
    names, values = codes(entries.column("group_name"))
    width = len(values) + 1
    ranks = entries.column("rank").to_numpy()
    # (int32 where every pair fits: 4 bytes per entry, not 8; in place, 65M rows at 32K)
    top = (int(ranks.max()) + 1) * width if len(ranks) else 0
    pair = ranks.astype(np.int32 if top < np.iinfo(np.int32).max else np.int64)
    pair *= width
    pair += names
    pair += 1
    del names, ranks

    def gid(p: int) -> int:
        n = p % width - 1
        return -1 if n < 0 else membership.of_rank.get((p // width, str(values[n])), -1)

    space = int(pair.max()) + 1 if len(pair) else 0
    if space <= len(pair) + _PAIRS_COUNTED:  # (ranks x names: a table, in one pass)
        seen = np.zeros(space, dtype=bool)
        seen[pair] = True  # (a count would first copy the pairs as int64)
        present = np.flatnonzero(seen)
        del seen
        table = np.full(space, -1, dtype=np.int32)
        table[present] = [gid(int(p)) for p in present]
        looked_up: np.ndarray = table[pair]
        return looked_up
    inverse, unique = pd.factorize(pair)  # hashing: linear, 10x np.unique's sort
    del pair
    gids = np.array([gid(int(p)) for p in unique], dtype=np.int32)
    out: np.ndarray = gids[inverse]
    return out


def _done_column(dumps: DumpSet, state_rank: np.ndarray) -> np.ndarray:
    """Did the op finish, per entry? From ``state`` wherever a rank's recorder shows states; from
    ``retired`` only for Gloo's generic recorder (and dumps that name no backend), which
    never moves ``state``."""
    entries = dumps.entries
    rank = entries.column("rank").to_numpy()
    retired = entries.column("retired").fill_null(False).to_numpy(zero_copy_only=False)
    backend_codes, backends = codes(entries.column("backend"))
    # (-1: no backend in the profiling name, e.g. torch 2.2 dumps and damaged names)
    stateless = _lookup(backend_codes, backends, {"gloo": True}, False, np.bool_) | (
        backend_codes < 0
    )
    # (per rank and recorder: a flag, not a sort of the ranks; a rank read from several
    # recorders' dumps, ``load.recorders``, has Gloo's and NCCL's entries side by side)
    width, ranks = len(backends) + 1, int(rank.max()) + 1 if len(rank) else 0
    kind = np.int32 if ranks * width < 2**31 else np.int64
    recorder = rank.astype(kind) * width + (backend_codes.astype(kind) + 1)
    with_states = np.zeros(ranks * width, dtype=bool)
    with_states[recorder[state_rank > 0]] = True
    by_rank = np.zeros(ranks, dtype=bool)
    by_rank[rank[state_rank > 0]] = True  # (a name without a backend: its rank's, as before)
    shows = np.where(backend_codes < 0, by_rank[rank], with_states[recorder])
    del recorder, with_states
    # Gloo's recorder never moves `state`: completion shows only through `retired` (which it
    # sets a moment after the op finished, so the newest op can lag; matching forgives that,
    # and `failure` catches the ops it retired because they failed). On NCCL, `retired`
    # without `completed` means the watchdog gave up (timeout, abort). The hook-based
    # recorders of newer torch (`nccl2:`, `c10d:`, ...) retire an entry when it is issued and
    # complete it when the backend says so: `retired` says nothing there, `state` does.
    use_retired = stateless & ~shows
    done: np.ndarray = np.where(use_retired, retired, state_rank == 2).astype(bool)
    return done


# Entries whose signatures are worked out at a time: the temporaries are a block's (8 MB), not
# 8 bytes per entry beside the result.
SIG_BLOCK_ROWS = 1 << 20


def _sig_columns(entries: pa.Table, op: np.ndarray, ops: list[str | None]) -> np.ndarray:
    """One int64 per entry that is equal across ranks exactly when the op's rules say so."""
    uneven_ops, input_ops, output_ops = (
        dict.fromkeys(names, True)
        for names in (UNEVEN_OPS, COMPARE_INPUT_ONLY, COMPARE_OUTPUT_ONLY)
    )
    dtype_in, dtype_out, size_in, size_out = (
        fixed_values(entries.column(name))
        for name in ("input_dtype_sig", "output_dtype_sig", "input_sig", "output_sig")
    )
    n = entries.num_rows
    mixed = np.empty(n, dtype=np.uint64)
    part = np.empty(min(n, SIG_BLOCK_ROWS), dtype=np.uint64)

    def sig(column: tuple[np.ndarray, np.ndarray | None], at: slice, out: np.ndarray) -> None:
        values, nulls = column
        np.copyto(out, values[at])
        if nulls is not None:
            out[nulls[at]] = 0

    # mixed = sig_in * A ^ sig_out * B ^ (dt_in * C ^ dt_out) * D, where the root-only side
    # is empty on non-roots (gather: output, scatter: input) and skipped; built in place,
    # one block of entries at a time
    with np.errstate(over="ignore"):
        for start in range(0, n, SIG_BLOCK_ROWS):
            at = slice(start, min(n, start + SIG_BLOCK_ROWS))
            codes_ = op[at]
            uneven = _lookup(codes_, ops, uneven_ops, False, np.bool_)
            input_only = _lookup(codes_, ops, input_ops, False, np.bool_)
            output_only = _lookup(codes_, ops, output_ops, False, np.bool_)
            out, tmp = mixed[at], part[: at.stop - at.start]
            sig(dtype_in, at, out)
            out[output_only] = 0
            out *= np.uint64(0x27D4EB2F165667C5)
            sig(dtype_out, at, tmp)
            tmp[input_only] = 0
            out ^= tmp
            out *= np.uint64(0x165667B19E3779F9)
            sig(size_in, at, tmp)
            tmp[uneven | output_only] = 0
            tmp *= np.uint64(0x9E3779B97F4A7C15)
            out ^= tmp
            sig(size_out, at, tmp)
            tmp[uneven | input_only] = 0
            tmp *= np.uint64(0xC2B2AE3D27D4EB4F)
            out ^= tmp
    result: np.ndarray = mixed.view(np.int64)
    return result


def _nullable_int64(column: pa.ChunkedArray) -> pd.Series:
    """An int64 column as pandas' Int64 (values and a mask: no float64 on the way; a null's
    value 0), in memory of its own: the Series copies the values, as pandas 3 does an
    extension array by default. Measured at 4,096 ranks, the table's own (mapped) values
    kept instead (``copy=False``) made the entry frame 0.3 s faster but matching no faster,
    and its peak 100 MB higher: ``logical_collectives`` then reads the mapped pages, which
    stay resident beside its output until the next ``release_pages``."""
    stored, nulls = fixed_values(column)
    if nulls is None:
        values = stored.astype(np.int64, copy=False)
        mask = np.zeros(len(values), dtype=bool)
    else:
        values = np.array(stored, dtype=np.int64)  # (its own: nulls' values set to 0)
        mask = nulls
        values[mask] = 0
    return pd.Series(pd.arrays.IntegerArray(values, mask), copy=True)


def match(dumps: DumpSet, groups: Membership | Future[Membership]) -> MatchResult:
    """Line up the entries of ``dumps`` by (group, seq); see the module docstring.
    ``groups``: the groups' members, or their future (being resolved beside: the entry
    frame's columns but its group ids are built meanwhile)."""
    entries = dumps.entries
    frame, has_p2p_seq = _entry_frame(dumps, groups)
    membership = _resolved(groups)
    p2p_rows = frame[frame["is_p2p"] & (frame["gid"] >= 0)]
    p2p_rows.insert(0, "row", p2p_rows.index.to_numpy().astype(np.int32))
    if not has_p2p_seq:  # (no p2p op: an empty frame, with every column p2p_ops reads)
        p2p_rows = p2p_rows.assign(p2p_seq=pd.Series([], dtype="Int64"))
    # each rank's first row: the least of its runs' first rows (a rank's rows are one run, or
    # a few: the frame is in row order), not a group-by of every row
    rank = frame["rank"].to_numpy()
    runs = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rank) else rank[:0]
    first_row = pd.Series(runs.astype(np.int32)).groupby(rank[runs]).min()  # (row: place)
    del rank, runs
    is_coll = (~frame["is_p2p"] & frame["seq"].notna() & (frame["gid"] >= 0)).to_numpy()
    # The frame (~60 bytes x 8M entries) is handed over, never copied whole: logical_collectives
    # consumes it column by column, keeping the collectives' rows of each.
    keep = None if is_coll.all() else is_coll
    del is_coll
    collectives = drop_truncated_runs(dumps, first_row, logical_collectives(frame, keep))
    del frame, keep
    collectives = settle_collectives_by_status(collectives, dumps, p2p_rows)
    # The per-entry columns are gone: hand their memory back, or it stays in the process
    # (glibc keeps freed numpy/pandas buffers: ~90 bytes per entry, 6 GB at 32,768 ranks)
    give_back_memory()
    with ThreadPoolExecutor(1, thread_name_prefix="frtrace-spans") as beside:
        # each member's span of each group (a sort of its rows: without the GIL) beside the
        # ops' consensus; both only read the collectives
        spanned = beside.submit(rank_group_spans, collectives)
        consensus = consensus_of(collectives)
        spans = spanned.result()
    collectives, consensus, failed = settle_completion(
        dumps, membership, collectives, consensus, spans
    )
    extent = {
        (r, g): (lo, hi)
        for r, g, lo, hi in zip(
            spans["rank"].tolist(),
            spans["gid"].tolist(),
            spans["min"].tolist(),
            spans["max"].tolist(),
            strict=True,
        )
    }
    del spans
    p2p = p2p_ops(p2p_rows, membership, entries)
    # each p2p entry's batch: its p2p_seq (torch 2.4+), else the seq_id that before 2.4
    # counted collectives and p2p alike
    keys = p2p_rows[["rank", "gid"]].assign(p2p_seq=p2p_rows["p2p_seq"].fillna(p2p_rows["seq"]))
    closed = keys[p2p_rows["op"].eq("coalesced").to_numpy()].dropna().astype(np.int64)
    p2p = settle_by_status(p2p, closed, dumps, set(extent))
    pending = pending_collectives(collectives, consensus)
    pending_p2p = pending_p2p_ops(p2p)
    return MatchResult(
        collectives=collectives,
        consensus=consensus,
        p2p=p2p,
        extent=extent,
        pending=pending,
        pending_p2p=pending_p2p,
        blocked=blocked_ops(pending, pending_p2p),
        failed=failed,
        p2p_partners=pair_p2p(p2p, keys, _wrapped(dumps)),
    )


def _wrapped(dumps: DumpSet) -> set[int]:
    files = dumps.files
    ranks, wrapped = files.column("rank").to_pylist(), files.column("wrapped").to_pylist()
    return {int(r) for r, w in zip(ranks, wrapped, strict=True) if w}


def _numbers(entries: pa.Table) -> tuple[pd.Series, pd.Series]:
    """The entries' collective seq and creation time, as pandas' Int64."""
    seq = _nullable_int64(entries.column("collective_seq"))
    return seq, _nullable_int64(entries.column("time_created_ns"))


def _resolved(groups: Membership | Future[Membership]) -> Membership:
    return groups.result() if isinstance(groups, Future) else groups


def _entry_frame(
    dumps: DumpSet, groups: Membership | Future[Membership]
) -> tuple[pd.DataFrame, bool]:
    """One row per entry with what matching reads (group id, seq, op, signature, state), its
    p2p batches marked; and whether it has the ``p2p_seq`` column."""
    entries = dumps.entries
    # Each step reads a few columns of every entry; where the table is mapped from disk
    # (``frtrace.load.handover.spill``) their pages are dropped from memory after each step, so that
    # the table never sits in memory whole beside the frame built from it.
    with ThreadPoolExecutor(1, thread_name_prefix="frtrace-frame") as beside:
        # the two int64 columns copied beside the others' passes (both mostly without the
        # GIL: 0.3-0.4 s of 1.0-1.2 s at 4,096 ranks)
        numbers = beside.submit(_numbers, entries)
        op_codes, ops = codes(entries.column("op"))
        state_rank = _state_rank(entries)
        done = _done_column(dumps, state_rank)
        release_pages()
        sig = _sig_columns(entries, op_codes, ops)
        release_pages()
        names = [*(v if v is not None else "?" for v in ops), "?"]  # the last one: null op
        distinct = list(dict.fromkeys(names))
        # (the categorical's own width: int8 below 127 values, as pandas would narrow them;
        # a null's code, -1, takes the last)
        width = np.int8 if len(distinct) < 127 else np.int32
        remap = np.array([distinct.index(name) for name in names], dtype=width)
        op_index = remap[op_codes]
        op_cat = pd.Categorical.from_codes(op_index, dtype=pd.CategoricalDtype(distinct))
        gid = _gid_column(entries, _resolved(groups))
        seq, created = numbers.result()
    release_pages()
    # (each entry's row is its place in the frame: its index, not a column of 4 bytes each)
    frame = pd.DataFrame(
        {
            "rank": entries.column("rank").to_numpy().astype(np.int32, copy=False),
            "gid": gid,
            "seq": seq,
            "is_p2p": entries.column("is_p2p").fill_null(False).to_numpy(zero_copy_only=False),
            "op": op_cat,
            "op_code": op_cat.codes,  # (the same codes, as narrow as the categorical keeps them)
            "sig": sig,
            "done": done,
            "state_rank": state_rank,
            "created_ns": created,
        },
        copy=False,  # fresh arrays: not copied into one block per dtype (55 bytes per entry)
    )
    del gid, seq, created
    del op_codes, state_rank, done, sig, op_index, op_cat  # (the frame holds them now)
    frame["is_p2p"] = frame["is_p2p"].astype(bool) | frame["op"].isin(["send", "recv"])
    # p2p_seq is read for p2p ops and the ``coalesced`` entries that may close a batch of
    # them: a job without either (most) does without the column (9 bytes per entry)
    has_p2p_seq = bool((frame["is_p2p"] | frame["op"].eq("coalesced")).any())
    if has_p2p_seq:
        frame["p2p_seq"] = _nullable_int64(entries.column("p2p_seq"))
    give_back_memory()  # (the pages of the table's columns, read above, where they are mapped)
    mark_p2p_batches(frame)
    return frame, has_p2p_seq
