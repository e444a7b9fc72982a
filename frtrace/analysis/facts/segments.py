"""An op's rows side by side: per-(group, seq) arithmetic on the logical collectives.

``logical_collectives`` returns one row per (rank, group, seq) in (group, seq, rank) order, so
the members' rows of one op are a segment of consecutive rows, and ``consensus`` has one row
per segment, in the same order, with its first row (``start``) and length (``n_present``).
Anything per op is then a segment reduction (``numpy.ufunc.reduceat``) and anything per member
row a repeat of the per-op value: no join on (group, seq), whose hash tables cost ~50 bytes per
row (3 GB at 32,768 ranks), and no sort.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

__all__ = ["locate_ops", "op_blocks", "op_starts", "per_row", "rank_group_spans"]

# Rows per block where a step works block by block (``op_blocks``): its temporaries stay a few
# tens of MB whatever the size of the job. Measured at 4,096 ranks (8.2 million rows), the
# stragglers' blocks of 4 million rows peaked 135 MB above what they started from and took
# 0.47-0.51 s; of a million, 78 MB and 0.27-0.31 s (no lower with fewer rows).
BLOCK_ROWS = 1 << 20


def op_starts(gid: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """The first row of each (gid, seq) segment of rows sorted by (gid, seq)."""
    n = len(gid)
    if not n:
        return np.zeros(0, dtype=np.int64)
    change = np.empty(n, dtype=bool)
    change[0] = True
    np.not_equal(gid[1:], gid[:-1], out=change[1:])
    change[1:] |= seq[1:] != seq[:-1]
    starts: np.ndarray = np.flatnonzero(change)
    return starts


def op_blocks(starts: np.ndarray, n_rows: int) -> Iterator[tuple[int, int, int, int]]:
    """Whole ops in blocks of about ``BLOCK_ROWS`` rows: (first op, end op, first row, end
    row)."""
    bounds = np.append(starts, n_rows)  # op i is rows [bounds[i], bounds[i + 1])
    first = 0
    while first < len(starts):
        row = int(bounds[first])
        end = int(np.searchsorted(bounds, row + BLOCK_ROWS, side="right")) - 1
        end = max(first + 1, end)  # (an op larger than a block is a block of its own)
        yield first, end, row, int(bounds[end])
        first = end


def per_row(per_op: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A per-op value for each of the op's rows."""
    out: np.ndarray = np.repeat(per_op, counts)
    return out


def locate_ops(gid: np.ndarray, seq: np.ndarray, keys: Iterable[tuple[int, int]]) -> np.ndarray:
    """Positions, ascending, in ops sorted by (gid, seq) of the (gid, seq) ``keys`` that are
    there."""
    wanted = np.array(list(keys), dtype=np.int64).reshape(-1, 2)
    if not len(wanted) or not len(gid):
        return np.zeros(0, dtype=np.int64)
    low = min(int(seq.min()), int(wanted[:, 1].min()))
    width = max(int(seq.max()), int(wanted[:, 1].max())) - low + 1
    top = max(int(gid.max()), int(wanted[:, 0].max())) + 1
    if width * top < 1 << 62:  # one int64 key per op, ascending as the ops are
        flat = gid.astype(np.int64) * width + (seq - low)
        query = wanted[:, 0] * width + (wanted[:, 1] - low)
        at = np.minimum(np.searchsorted(flat, query), len(flat) - 1)
        return np.unique(at[flat[at] == query])
    found = []  # (sequence numbers far apart: damaged dumps) two binary searches per key
    for g, s in wanted.tolist():
        lo, hi = np.searchsorted(gid, g, "left"), np.searchsorted(gid, g, "right")
        at_ = lo + int(np.searchsorted(seq[lo:hi], s, "left"))
        if at_ < hi and seq[at_] == s:
            found.append(at_)
    return np.unique(np.array(found, dtype=np.int64))


_KEY_ROWS = 1 << 18  # rows keyed and sorted at a time in rank_group_spans


def _first_of(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of the parts (keys, values), sorted, and each one's value in the
    first part that has it."""
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    keys = np.concatenate([k for k, _ in parts])
    values = np.concatenate([v for _, v in parts]).astype(np.int64)
    distinct, first = np.unique(keys, return_index=True)
    return distinct.astype(np.int64), values[first]


def _first_and_last(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct keys, sorted, and the positions of each one's first and last occurrence:
    one stable sort (``np.unique`` twice, once reversed, sorted twice)."""
    if not len(key):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.argsort(key, kind="stable")  # (equal keys keep their order)
    ordered = key[order]
    begin = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    end = np.append(begin[1:], len(ordered)) - 1
    return ordered[begin], order[begin], order[end]


def rank_group_spans(collectives: pd.DataFrame, where: np.ndarray | None = None) -> pd.DataFrame:
    """Per (rank, gid): the lowest and highest seq of its logical collectives (only the rows
    ``where`` is true, if given); columns rank, gid, min, max, sorted by rank, gid.

    Part by part (``_KEY_ROWS`` rows), in the rows' (gid, seq) order: a member's rows in a
    group come in ascending seq, so its first row is its lowest and its last its highest. One
    int64 key per (rank, gid): a group-by on two columns builds a MultiIndex over every row.
    The parts are slices of the rows: no index of every row (64 MB at 4,096 ranks, beside
    the stragglers' blocks where the two run side by side).
    """
    firsts: list[tuple[np.ndarray, np.ndarray]] = []  # each part's keys, and their seq
    lasts: list[tuple[np.ndarray, np.ndarray]] = []
    width = 1
    if not collectives.empty:
        ranks = collectives["rank"].to_numpy()
        gids = collectives["gid"].to_numpy()
        seqs = collectives["seq"].to_numpy(dtype=np.int64)
        width = int(gids.max()) + 1
        for at in range(0, len(collectives), _KEY_ROWS):  # (a sort's memory: a part's)
            stop = min(at + _KEY_ROWS, len(collectives))
            part = np.arange(at, stop) if where is None else np.flatnonzero(where[at:stop]) + at
            key = ranks[part].astype(np.int64)
            key *= width
            key += gids[part]
            distinct, first, last = _first_and_last(key)
            firsts.append((distinct, seqs[part[first]]))
            lasts.append((distinct, seqs[part[last]]))
    keys, low = _first_of(firsts)
    _, high = _first_of(lasts[::-1])  # (the last part that has a key: its highest)
    return pd.DataFrame({"rank": keys // width, "gid": keys % width, "min": low, "max": high})
