"""Line up every group's ops across its members: by sequence id, never by record_id.

``record_id`` counts every op of one process, so it differs between ranks as soon as they are
in different groups, and ring buffers that wrapped at different points shift it further. The
key that means the same collective on every member is (group, ``collective_seq_id``).

Matching produces, vectorised over all entries:

- one *logical collective* per (rank, group, seq): a coalesced run (several entries sharing one
  seq, ended by a ``*coalesced`` entry) counts once, its signature built from all its entries;
- per (group, seq): who recorded it, whether any member finished it (a collective cannot finish
  on one member unless every member joined it), and whether the members agree on what it is;
- per (rank, group): the highest and lowest seq its buffer holds, to tell "never reached this
  seq" (above its highest) from "cannot know" (below its lowest, once the buffer wrapped);
- per rank: the oldest op it has not finished (where it is blocked), including p2p ops, whose
  state in a ``batch_isend_irecv`` is carried by the batch's closing ``coalesced`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.analysis.groups import Membership
from frtrace.load.tables import DumpSet

__all__ = ["MatchResult", "match"]

# Ops whose members legitimately pass different sizes: only op and dtypes are compared.
UNEVEN_OPS = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_to_all_v_single",
        "alltoall",
        "alltoall_base",
        "all_gather_v",
        "reduce_scatter_v",
        "allgather_v",
    }
)
# The root passes a list (gather: output, scatter: input), the others pass nothing there.
COMPARE_INPUT_ONLY = frozenset({"gather", "_gather_base"})
COMPARE_OUTPUT_ONLY = frozenset({"scatter", "_scatter_base"})
# Sizes are compared only where the ops are equal; these never carry sizes of their own.
MARKER_OPS = frozenset({"coalesced", "barrier", "all_reduce_barrier"})

COLLECTIVE, P2P = "collective", "p2p"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpRef:
    """One logical op of one rank, as matching sees it."""

    rank: int
    gid: int  # index into Membership.groups
    seq: int | None  # collective seq; None for p2p
    p2p_seq: int | None  # p2p ops only
    kind: str  # COLLECTIVE or P2P
    op: str  # "all_reduce", ...; "send"/"recv" for p2p
    sig: int  # comparable signature (equal across ranks when the op's rules say so)
    state_rank: int  # 0 scheduled, 1 started, 2 completed
    row: int  # entries-table row (the first entry of a coalesced run)
    peer: int | None = None  # p2p: the other end, as a global rank
    done: bool = False  # this member finished its part (a mismatched op can, on one side)


@dataclass(frozen=True, slots=True, kw_only=True)
class MatchResult:
    """Entries lined up across ranks; frames are indexed as their docstrings say."""

    # One row per logical collective: rank, gid, seq, row (first entry's row in the entries
    # table), last_row, op, sig (comparable signature), done, state_rank (0 scheduled,
    # 1 started, 2 completed), created_ns, n_entries.
    collectives: pd.DataFrame
    # One row per (gid, seq): n_present, done_any, consistent (all members' sig equal),
    # finished (every member that recorded it finished it, see _settle_completion).
    consensus: pd.DataFrame
    # One row per p2p op: rank, gid, peer (global), kind ("send"/"recv"), row, done, p2p_seq.
    p2p: pd.DataFrame
    # (rank, gid) -> (lowest, highest) seq of its logical collectives in that group.
    extent: dict[tuple[int, int], tuple[int, int]]
    # Every member's op at (group, seq)s that not every member finished, keyed (rank, gid,
    # seq); ``OpRef.done`` says whether that member finished its part.
    pending: dict[tuple[int, int, int], OpRef]
    # Unfinished send/recv ops per rank, oldest first.
    pending_p2p: dict[int, list[OpRef]]
    # Each rank's oldest unfinished op: where it is blocked. Ranks with none are absent.
    blocked: dict[int, OpRef]


def codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str | None]]:
    """A dictionary column as (int32 codes, -1 for null; the distinct values).

    Works on the codes, never on one Python string per entry: 8 million entries stay cheap.
    """
    column = column.unify_dictionaries() if pa.types.is_dictionary(column.type) else column
    if not pa.types.is_dictionary(column.type):
        column = pa.chunked_array(
            [c.dictionary_encode() for c in column.chunks], pa.dictionary(pa.int32(), column.type)
        )
    if column.num_chunks == 0:
        return np.zeros(0, dtype=np.int32), []
    values: list[str | None] = column.chunk(0).dictionary.to_pylist()
    parts = [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in column.chunks]
    return np.concatenate(parts).astype(np.int32, copy=False), values


def _lookup(
    codes_: np.ndarray, values: list[str | None], table: dict[str, Any], default: Any
) -> np.ndarray:
    """Map codes through ``table`` (by value); nulls and unknown values get ``default``."""
    mapped = np.array(
        [table.get(v, default) if v is not None else default for v in values] + [default]
    )
    return mapped[np.where(codes_ < 0, len(values), codes_)]


def _state_rank(entries: pa.Table) -> np.ndarray:
    state, values = codes(entries.column("state"))
    ranks: np.ndarray = _lookup(state, values, {"started": 1, "completed": 2}, 0).astype(np.int8)
    return ranks


def _gid_column(entries: pa.Table, membership: Membership) -> np.ndarray:
    """Group id per entry row (-1 where the group is unknown)."""
    names, values = codes(entries.column("group_name"))
    rank = entries.column("rank").to_numpy().astype(np.int64)
    width = len(values) + 1
    pair = rank * width + (names.astype(np.int64) + 1)
    unique, inverse = np.unique(pair, return_inverse=True)
    gids = np.array(
        [
            -1
            if (n := int(p % width) - 1) < 0
            else membership.of_rank.get((int(p // width), str(values[n])), -1)
            for p in unique
        ],
        dtype=np.int32,
    )
    out: np.ndarray = gids[inverse]
    return out


def _done_column(dumps: DumpSet, state_rank: np.ndarray) -> np.ndarray:
    """Did the op finish, per entry? NCCL: state completed; Gloo (no states): retired."""
    entries = dumps.entries
    rank = entries.column("rank").to_numpy()
    retired = entries.column("retired").fill_null(False).to_numpy(zero_copy_only=False)
    backend_codes, backends = codes(entries.column("backend"))
    gloo = _lookup(backend_codes, backends, {"gloo": True}, False).astype(bool)
    nccl = _lookup(backend_codes, backends, {"nccl": True}, False).astype(bool)
    ranks_with_states = np.unique(rank[state_rank > 0])
    # Gloo's recorder never moves `state`: completion shows only through `retired` (which it
    # sets a moment after the op finished, so the newest op can lag; matching forgives that).
    # On NCCL, `retired` without `completed` means the watchdog gave up (timeout, abort).
    # Another backend whose rank never shows a state is read like Gloo.
    use_retired = gloo | (~nccl & ~np.isin(rank, ranks_with_states))
    done: np.ndarray = np.where(use_retired, retired, state_rank == 2).astype(bool)
    return done


def _sig_columns(entries: pa.Table, op: np.ndarray, ops: list[str | None]) -> np.ndarray:
    """One int64 per entry that is equal across ranks exactly when the op's rules say so."""

    def family(names: frozenset[str]) -> np.ndarray:
        flags: np.ndarray = _lookup(op, ops, dict.fromkeys(names, True), False).astype(bool)
        return flags

    def sig(column: str) -> np.ndarray:
        values: np.ndarray = entries.column(column).fill_null(0).to_numpy().astype(np.uint64)
        return values

    uneven = family(UNEVEN_OPS)
    input_only = family(COMPARE_INPUT_ONLY)
    output_only = family(COMPARE_OUTPUT_ONLY)
    # mixed = sig_in * A ^ sig_out * B ^ (dt_in * C ^ dt_out) * D, where the root-only side
    # is empty on non-roots (gather: output, scatter: input) and skipped; built in place,
    # one 8M-entry column at a time
    with np.errstate(over="ignore"):
        mixed = sig("input_dtype_sig")
        mixed[output_only] = 0
        mixed *= np.uint64(0x27D4EB2F165667C5)
        part = sig("output_dtype_sig")
        part[input_only] = 0
        mixed ^= part
        mixed *= np.uint64(0x165667B19E3779F9)
        part = sig("input_sig")
        part[uneven | output_only] = 0
        part *= np.uint64(0x9E3779B97F4A7C15)
        mixed ^= part
        part = sig("output_sig")
        part[uneven | input_only] = 0
        part *= np.uint64(0xC2B2AE3D27D4EB4F)
        mixed ^= part
        del part
    out: np.ndarray = mixed.view(np.int64)
    return out


def match(dumps: DumpSet, membership: Membership) -> MatchResult:
    """Line up the entries of ``dumps`` by (group, seq); see the module docstring."""
    entries = dumps.entries
    n = entries.num_rows
    op_codes, ops = codes(entries.column("op"))
    state_rank = _state_rank(entries)
    done = _done_column(dumps, state_rank)
    sig = _sig_columns(entries, op_codes, ops)
    names = [*(v if v is not None else "?" for v in ops), "?"]  # the last one: null op
    distinct = list(dict.fromkeys(names))
    remap = np.array([distinct.index(name) for name in names], dtype=np.int32)
    op_index = remap[np.where(op_codes < 0, len(ops), op_codes)]
    op_cat = pd.Categorical.from_codes(op_index, dtype=pd.CategoricalDtype(distinct))
    frame = pd.DataFrame(
        {
            "row": np.arange(n, dtype=np.int32),
            "rank": entries.column("rank").to_numpy().astype(np.int32),
            "gid": _gid_column(entries, membership),
            "seq": entries.column("collective_seq").to_pandas().astype("Int64"),
            "p2p_seq": entries.column("p2p_seq").to_pandas().astype("Int64"),
            "is_p2p": entries.column("is_p2p").fill_null(False).to_numpy(zero_copy_only=False),
            "op": op_cat,
            "op_code": op_index,
            "sig": sig,
            "done": done,
            "state_rank": state_rank,
            "created_ns": entries.column("time_created_ns").to_pandas().astype("Int64"),
        }
    )
    frame["is_p2p"] = frame["is_p2p"].astype(bool) | frame["op"].isin(["send", "recv"])
    _mark_p2p_batches(frame)

    p2p_rows = frame[frame["is_p2p"] & (frame["gid"] >= 0)]
    first_row = pd.Series(frame["row"].to_numpy()).groupby(frame["rank"].to_numpy()).min()
    is_coll = ~frame["is_p2p"] & frame["seq"].notna() & (frame["gid"] >= 0)
    # The frame (~60 bytes x 8M entries) is handed over, not copied, when every row is a
    # collective: _logical_collectives consumes it column by column.
    coll = frame if is_coll.all() else frame[is_coll]
    del frame, is_coll
    collectives = _drop_truncated_runs(dumps, first_row, _logical_collectives(coll))
    del coll
    consensus = _consensus(collectives)
    collectives, consensus = _settle_completion(dumps, membership, collectives, consensus)
    spans = collectives.groupby(["rank", "gid"], sort=True)["seq"].agg(["min", "max"])
    extent = {
        (int(r), int(g)): (int(lo), int(hi))
        for (r, g), lo, hi in zip(
            spans.index.tolist(), spans["min"].tolist(), spans["max"].tolist(), strict=True
        )
    }
    p2p = _p2p_ops(p2p_rows, membership, entries)
    pending = _pending_collectives(collectives, consensus)
    pending_p2p = _pending_p2p(p2p)
    return MatchResult(
        collectives=collectives,
        consensus=consensus,
        p2p=p2p,
        extent=extent,
        pending=pending,
        pending_p2p=pending_p2p,
        blocked=_blocked(pending, pending_p2p),
    )


def _mark_p2p_batches(frame: pd.DataFrame) -> None:
    """A ``coalesced`` entry closing a batch of p2p ops is itself p2p, and carries their state.

    Inside ``batch_isend_irecv`` the individual send/recv entries stay ``scheduled``; the
    closing ``coalesced`` entry (same rank, group and p2p_seq) is the one that completes. It is
    recorded with ``is_p2p`` false, so it is recognised by following p2p entries.
    """
    is_marker = frame["op"].eq("coalesced")
    prev_p2p = frame["is_p2p"].shift(1, fill_value=False) & frame["rank"].eq(frame["rank"].shift(1))
    frame.loc[is_marker & prev_p2p, "is_p2p"] = True
    # the batch's key: p2p_seq (torch 2.4+); before that one seq_id counted both kinds of op
    batch = frame["p2p_seq"].fillna(frame["seq"])
    framed = frame.assign(batch=batch)
    markers = framed[is_marker & framed["is_p2p"] & framed["batch"].notna()]
    if markers.empty:
        return
    batch_state = markers.groupby(["rank", "gid", "batch"])[["done", "state_rank"]].max()
    ops = framed[framed["is_p2p"] & ~is_marker & framed["batch"].notna()]
    joined = (
        ops.reset_index()
        .merge(
            batch_state.reset_index(),
            on=["rank", "gid", "batch"],
            how="left",
            suffixes=("", "_batch"),
        )
        .set_index("index")
    )
    has_batch = joined["done_batch"].notna()
    idx = joined.index[has_batch]
    frame.loc[idx, "done"] = joined.loc[has_batch, "done_batch"].astype(bool)
    frame.loc[idx, "state_rank"] = joined.loc[has_batch, "state_rank_batch"].astype(np.int8)


def _logical_collectives(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, gid, seq), in (gid, seq, rank) order; coalesced runs folded into
    one signature. Consumes ``coll`` (its columns are taken out one by one).

    One sort of the rows by (gid, seq, rank, row) puts each run's entries side by side; every
    logical op is then a segment of that order (one row, or a run), and each output column is
    one gather or one segment reduction: no hash of 8M keys, no copy of the whole frame.
    """
    gid = coll["gid"].to_numpy()
    seq = coll["seq"].to_numpy(dtype=np.int64)  # (no nulls: coll holds collectives only)
    rank = coll["rank"].to_numpy()
    order = np.lexsort((coll["row"].to_numpy(), rank, seq, gid))
    n = len(order)
    start = np.zeros(n, dtype=bool)  # the first row of each logical op, in sorted order
    start[:1] = True
    for column in (gid, seq, rank):
        ordered = column[order]
        start[1:] |= ordered[1:] != ordered[:-1]
    del gid, seq, rank, ordered
    first = np.flatnonzero(start)
    del start
    last = np.append(first[1:], n) - 1 if n else first
    runs = bool(n) and bool((last > first).any())

    def take(name: str, at: np.ndarray) -> np.ndarray:
        values: np.ndarray = coll[name].to_numpy()[order[at]]
        return values

    out: dict[str, Any] = {}
    out["rank"] = take("rank", first)
    out["gid"] = take("gid", first)
    out["seq"] = coll["seq"].take(order[first]).reset_index(drop=True)
    out["row"] = take("row", first)
    out["last_row"] = take("row", last)
    out["op"] = coll["op"].take(order[last]).reset_index(drop=True)  # a run's closing entry
    out["op_code"] = take("op_code", last)
    sig = take("sig", first)
    if runs:
        # the run's signature: every member entry's op and sizes, in order (position-weighted
        # so that two runs with the same entries in another order differ)
        segment = np.repeat(np.arange(len(first)), last - first + 1)
        position = (np.arange(n) - first[segment]).astype(np.uint64)
        with np.errstate(over="ignore"):
            part = (
                coll["sig"].to_numpy()[order].view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                + coll["op_code"].to_numpy()[order].astype(np.uint64)
                * np.uint64(0x632BE59BD9B4E019)
            ) * (position * np.uint64(2) + np.uint64(1))
        folded = np.add.reduceat(part, first).view(np.int64)
        sig = np.where(last > first, folded, sig)
        del segment, position, part, folded
    out["sig"] = sig
    done = coll["done"].to_numpy(dtype=bool)[order]
    out["done"] = np.logical_or.reduceat(done, first) if runs else done
    del done
    state = coll["state_rank"].to_numpy()[order]
    out["state_rank"] = np.maximum.reduceat(state, first) if runs else state
    del state
    out["created_ns"] = _first_valid(coll["created_ns"], order, first, last)
    out["n_entries"] = (last - first + 1).astype(np.int64)
    for name in list(coll.columns):  # consumed
        del coll[name]
    return pd.DataFrame(out)[_LOGICAL_COLUMNS]


def _first_valid(
    column: pd.Series, order: np.ndarray, first: np.ndarray, last: np.ndarray
) -> pd.Series:
    """Per segment [first, last] of ``order``: the first non-null value (as pandas' "first")."""
    values = column.to_numpy(dtype=np.int64, na_value=0)[order]
    valid = column.notna().to_numpy()[order]
    if valid[first].all() or not len(first):
        return pd.Series(pd.array(values[first], dtype="Int64"))
    candidate = np.where(valid, np.arange(len(order)), len(order))
    at = np.minimum.reduceat(candidate, first)
    found = at <= last
    picked = pd.array(np.where(found, values[np.minimum(at, len(order) - 1)], 0), dtype="Int64")
    picked[~found] = pd.NA
    return pd.Series(picked)


_LOGICAL_COLUMNS = [
    "rank",
    "gid",
    "seq",
    "row",
    "last_row",
    "op",
    "op_code",
    "sig",
    "done",
    "state_rank",
    "created_ns",
    "n_entries",
]


def _drop_truncated_runs(
    dumps: DumpSet, first_row: pd.Series, collectives: pd.DataFrame
) -> pd.DataFrame:
    """Forget a coalesced run cut in half by the ring buffer.

    When a buffer wraps inside a coalesced run, the oldest surviving entries are its tail
    (often just the closing ``*_coalesced`` marker, with no sizes): comparing that with a
    peer's whole run would be a false mismatch. Only a wrapped rank's oldest op can be cut.
    ``first_row``: each rank's first entry row.
    """
    files = dumps.files
    wrapped = [
        r
        for r, w in zip(
            files.column("rank").to_pylist(), files.column("wrapped").to_pylist(), strict=True
        )
        if w
    ]
    if not wrapped:
        return collectives
    oldest = collectives["rank"].map(first_row[first_row.index.isin(wrapped)])
    coalesced = (collectives["n_entries"] > 1) | collectives["op"].str.contains(
        "coalesced", case=False, regex=False
    )
    cut = (collectives["row"] == oldest) & coalesced
    if not cut.any():
        return collectives
    return collectives[~cut].reset_index(drop=True)


def _settle_completion(
    dumps: DumpSet, membership: Membership, collectives: pd.DataFrame, consensus: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decide, per (group, seq) and member, whether the op finished.

    A collective cannot finish on one member unless every member joined it, so one member's
    "finished" vouches for all — this forgives Gloo marking an op retired a moment late. It
    does not hold when the members disagree (a mismatched op can return garbage on one side),
    nor for Gloo when a member has no dump (Gloo retires a *failed* op, e.g. after its peer
    crashed, exactly like a finished one). There, each member speaks only for itself.

    Adds ``done`` (effective, per member) to collectives and ``finished`` (every member that
    recorded it is done) to consensus; ``done_any`` keeps "some member finished it".
    """
    loaded = set(dumps.loaded_ranks)
    complete = {
        gid for gid, g in enumerate(membership.groups) if all(m in loaded for m in g.members)
    }
    files = dumps.files
    gloo_ranks = {
        r
        for r, b in zip(
            files.column("rank").to_pylist(), files.column("backend").to_pylist(), strict=True
        )
        if b == "gloo"
    }
    keys = [collectives["gid"], collectives["seq"]]
    if gloo_ranks:
        gloo_group = collectives["rank"].isin(gloo_ranks).groupby(keys).any()
        consensus = consensus.join(gloo_group.rename("gloo"), on=["gid", "seq"])
    else:
        consensus = consensus.assign(gloo=False)
    vouch = (
        consensus["consistent"].astype(bool)
        & consensus["done_any"].astype(bool)
        & (~consensus["gloo"].astype(bool) | consensus["gid"].isin(complete))
    )
    consensus = consensus.assign(vouch=vouch)
    # (column by column: the collectives frame is ~60 bytes x 8M rows, never copied whole)
    vouched = (
        collectives[["gid", "seq"]]
        .merge(consensus[["gid", "seq", "vouch"]], on=["gid", "seq"], how="left")["vouch"]
        .fillna(False)
        .to_numpy(dtype=bool)
    )
    collectives["done"] = collectives["done"].to_numpy(dtype=bool) | vouched
    del vouched
    finished = collectives["done"].groupby(keys).all().rename("finished")
    consensus = consensus.join(finished, on=["gid", "seq"]).drop(columns=["gloo", "vouch"])
    return collectives, consensus


def _consensus(collectives: pd.DataFrame) -> pd.DataFrame:
    grouped = collectives.groupby(["gid", "seq"], sort=True)
    consensus = grouped.agg(
        n_present=("rank", "size"),
        done_any=("done", "any"),
        sig_min=("sig", "min"),
        sig_max=("sig", "max"),
        op_min=("op_code", "min"),
        op_max=("op_code", "max"),
    )
    consensus["consistent"] = (consensus["sig_min"] == consensus["sig_max"]) & (
        consensus["op_min"] == consensus["op_max"]
    )
    return consensus[["n_present", "done_any", "consistent"]].reset_index()


def _p2p_ops(p2p: pd.DataFrame, membership: Membership, entries: pa.Table) -> pd.DataFrame:
    """Send/recv ops with their peer as a global rank (null where it cannot be known)."""
    ops = p2p[p2p["op"].isin(["send", "recv"])]
    rows = pa.array(ops["row"].to_numpy(), type=pa.int64())
    ops = ops.assign(
        src=entries.column("p2p_src_local").take(rows).to_pandas().astype("Int64").to_numpy(),
        dst=entries.column("p2p_dst_local").take(rows).to_pandas().astype("Int64").to_numpy(),
    )
    # group-local rank -> global rank, for every group at once
    lookup = pd.DataFrame(
        [
            (gid, local, rank)
            for gid, g in enumerate(membership.groups)
            for local, rank in enumerate(g.members)
        ],
        columns=["gid", "local", "global"],
    )
    is_send = (ops["op"] == "send").to_numpy()
    local = np.where(is_send, ops["dst"].fillna(-1), ops["src"].fillna(-1)).astype(np.int64)
    me = np.where(is_send, ops["src"].fillna(-1), ops["dst"].fillna(-1)).astype(np.int64)
    gid = ops["gid"].to_numpy().astype(np.int64)
    peer = _to_global(lookup, gid, local)
    mine = _to_global(lookup, gid, me)
    # the name's other end must be this rank, else the names are not group-local
    wrong = (me >= 0) & (mine != ops["rank"].to_numpy())
    unknown = wrong | (peer < 0)
    peers = pd.array(np.where(unknown, 0, peer), dtype="Int64")
    peers[unknown] = pd.NA
    out = ops[["rank", "gid", "row", "done", "state_rank", "p2p_seq", "created_ns"]].copy()
    out["kind"] = ops["op"].to_numpy()
    out["peer"] = peers
    return out.reset_index(drop=True)


def _to_global(lookup: pd.DataFrame, gid: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Global rank of (group, group-local rank); -1 where there is none."""
    query = pd.DataFrame({"gid": gid, "local": local})
    found = query.merge(lookup, on=["gid", "local"], how="left")["global"]
    out: np.ndarray = found.fillna(-1).to_numpy().astype(np.int64)
    return out


def _ints(series: pd.Series) -> list[int | None]:
    """A nullable integer column as Python ints and None."""
    return [None if pd.isna(v) else int(v) for v in series.tolist()]


def _pending_collectives(
    collectives: pd.DataFrame, consensus: pd.DataFrame
) -> dict[tuple[int, int, int], OpRef]:
    """Logical collectives at (group, seq)s no member finished, keyed (rank, gid, seq)."""
    open_keys = consensus.loc[~consensus["finished"].astype(bool), ["gid", "seq"]]
    rows = collectives.merge(open_keys, on=["gid", "seq"], how="inner")
    out: dict[tuple[int, int, int], OpRef] = {}
    for rank, gid, seq, op, sig, state, row, done in zip(
        rows["rank"].tolist(),
        rows["gid"].tolist(),
        _ints(rows["seq"]),
        rows["op"].tolist(),
        rows["sig"].tolist(),
        rows["state_rank"].tolist(),
        rows["row"].tolist(),
        rows["done"].tolist(),
        strict=True,
    ):
        assert seq is not None  # collectives always carry a seq
        out[(rank, gid, seq)] = OpRef(
            rank=rank,
            gid=gid,
            seq=seq,
            p2p_seq=None,
            kind=COLLECTIVE,
            op=str(op),
            sig=int(sig),
            state_rank=int(state),
            row=int(row),
            done=bool(done),
        )
    return out


def _pending_p2p(p2p: pd.DataFrame) -> dict[int, list[OpRef]]:
    """Unfinished send/recv ops per rank, oldest first."""
    open_ops = p2p[~p2p["done"].astype(bool)].sort_values("row")
    out: dict[int, list[OpRef]] = {}
    for rank, gid, p2p_seq, kind, peer, state, row in zip(
        open_ops["rank"].tolist(),
        open_ops["gid"].tolist(),
        _ints(open_ops["p2p_seq"]),
        open_ops["kind"].tolist(),
        _ints(open_ops["peer"]),
        open_ops["state_rank"].tolist(),
        open_ops["row"].tolist(),
        strict=True,
    ):
        out.setdefault(rank, []).append(
            OpRef(
                rank=rank,
                gid=gid,
                seq=None,
                p2p_seq=p2p_seq,
                kind=P2P,
                op=str(kind),
                sig=0,
                state_rank=int(state),
                row=int(row),
                peer=peer,
            )
        )
    return out


def _blocked(
    pending: dict[tuple[int, int, int], OpRef], pending_p2p: dict[int, list[OpRef]]
) -> dict[int, OpRef]:
    """Each rank's oldest unfinished op (a collective counts only if no member finished it)."""
    out: dict[int, OpRef] = {}
    for op in [*pending.values(), *(o for ops in pending_p2p.values() for o in ops)]:
        if op.done:
            continue
        best = out.get(op.rank)
        if best is None or op.row < best.row:
            out[op.rank] = op
    return dict(sorted(out.items()))
