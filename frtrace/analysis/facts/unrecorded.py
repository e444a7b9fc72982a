"""Ops the recorder counted but never wrote: Gloo's send/recv.

Gloo's Flight Recorder writes no entry for a send or recv, but counts it: ``op_id`` (per
group) goes up by one for every op, ``collective_seq_id`` only for collectives. So on a Gloo
rank, an entry whose ``op_id`` is ahead of its ``collective_seq_id`` shows that many ops on
that group the buffer does not hold (checked on real Gloo dumps: a 4-rank pipeline chain has
op_id 13 at collective #5 on the middle ranks, 9 on the ends; without p2p the two are equal).

What it means for a diagnosis: a rank blocked in a send or recv looks exactly like a rank that
finished everything it recorded. Such a rank cannot be called "stuck in host code", and a
dump set where every recorded op finished cannot be called healthy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import codes
from frtrace.load.dumpset import DumpSet

__all__ = ["unrecorded_ops"]


def unrecorded_ops(dumps: DumpSet, membership: Membership) -> dict[tuple[int, int], int]:
    """(rank, gid) -> ops on that group before the rank's newest collective entry that its
    buffer does not hold, for Gloo ranks where there are any."""
    entries = dumps.entries
    backend, names = codes(entries.column("backend"))  # (no 8M strings: a Gloo set is small,
    if "gloo" not in names:  # but an NCCL one is not)
        return {}
    gloo = pa.array(backend == names.index("gloo"))
    rows = entries.filter(gloo).select(["rank", "group_name", "collective_seq", "op_id"])
    frame = rows.to_pandas().dropna(subset=["group_name", "collective_seq", "op_id"])
    if frame.empty:
        return {}
    newest = frame.sort_values("collective_seq").groupby(["rank", "group_name"]).tail(1)
    gap = newest["op_id"].to_numpy(np.int64) - newest["collective_seq"].to_numpy(np.int64)
    out: dict[tuple[int, int], int] = {}
    for rank, name, n in zip(
        newest["rank"].tolist(),
        newest["group_name"].astype(str).tolist(),
        gap.tolist(),
        strict=True,
    ):
        gid = membership.of_rank.get((int(rank), name))
        if n > 0 and gid is not None:
            out[(int(rank), gid)] = int(n)
    return out
