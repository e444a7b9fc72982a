"""What matching produces: one rank's op (``OpRef``), all of them lined up (``MatchResult``),
and the op families whose members may legitimately differ."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.analysis.facts.failure import FailedOp
from frtrace.load.opkinds import COMPARE_INPUT_ONLY, COMPARE_OUTPUT_ONLY, UNEVEN_OPS

__all__ = [
    "COLLECTIVE",
    "COMPARE_INPUT_ONLY",
    "COMPARE_OUTPUT_ONLY",
    "MARKER_OPS",
    "P2P",
    "UNEVEN_OPS",
    "MatchResult",
    "OpRef",
    "codes",
    "filled",
    "fixed_values",
]

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
    # One row per (gid, seq), in the collectives' order: start (its first row there; its
    # rows are side by side, see ``segments``), n_present, done_any, consistent (all
    # members' sig equal), finished (every member that recorded it finished it, see
    # ``pending.settle_completion``).
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
    # Collectives retired on some members that cannot have completed, by (gid, seq).
    failed: dict[tuple[int, int], FailedOp] = field(default_factory=dict)
    # Unfinished send/recv (entries row) -> the row of the op it meets, -1 where its peer has
    # not posted that one; absent where the pair's histories cannot be counted (``p2ppairs``).
    p2p_partners: dict[int, int] = field(default_factory=dict)


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
    parts = [
        c.indices.to_numpy()  # (no null: the table's own codes; Arrow's fill_null copies them)
        if not c.indices.null_count
        else c.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        for c in column.chunks
    ]
    # (one chunk, as a loaded table has: its codes as they are, read-only where they are the
    # table's own, not copied by a concatenation of one)
    joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return joined.astype(np.int32, copy=False), values


def filled(column: pa.ChunkedArray, fill: int) -> np.ndarray:
    """A fixed-width column's values, ``fill`` where null: the table's own (read-only) where
    it has no null, else a copy."""
    values, nulls = fixed_values(column)
    if nulls is None:
        return values
    out = values.copy()
    out[nulls] = fill
    return out


def fixed_values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A fixed-width column's values as stored (a null's value is any) and where it is null
    (None: nowhere), read from its buffers: not copied where it has one chunk, as a loaded
    table has (Arrow's ``fill_null`` made a copy of every value to fill a few)."""
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    dtype = np.dtype(array.type.to_pandas_dtype())
    n = len(array)
    if not n:
        return np.zeros(0, dtype=dtype), None
    values = np.frombuffer(array.buffers()[1], dtype, n, array.offset * dtype.itemsize)
    nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    return values, nulls
