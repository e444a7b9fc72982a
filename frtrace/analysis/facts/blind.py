"""What the recorder cannot see: collectives it counted but never wrote, and CUDA graph replays.

A recorder writes an entry for the collectives it sees, and its group's collective sequence
counter says how many there were. Two blind spots follow from torch's own code:

- **Sequence ids skipped.** Between two entries of one group in a rank's buffer, with no entry
  of that recorder missing between them (``record_id``\\ s consecutive: not an ``onlyActive``
  dump, which drops finished entries), the group's ``collective_seq_id`` may jump: the
  collectives in between were counted and not written. Stock ProcessGroupNCCL counts a
  collective issued while a CUDA graph is captured and does not record it (its work is never
  enqueued for the watchdog); Gloo counts ``monitored_barrier`` (two ids on torch 2.13, seen on
  a real job) and writes nothing. A p2p entry carries the group's current count without
  adding to it (before torch 2.4, one ``seq_id`` counted both); the ops of one coalesced group
  share one id. The torch 2.15+ hook recorder
  counts only what it records, so no id is skipped there, and an op issued under a graph
  capture is simply absent.
- **A CUDA graph replay in the stacks.** A graph's collectives run again at every replay with
  no entry at all (torch: "ops issued while a capture is active are not recorded"), so a hang
  inside a replay leaves a clean ring buffer. A rank whose Python stack (py-spy, the
  recorder's sidecar) is in ``CUDAGraph.replay`` (or inductor's cudagraph tree running its
  graph) may be blocked in one.

Neither names anybody: a rank's blind spot says only that a clean buffer is not proof that
the job is fine (``analysis.verdict``: never ``HEALTHY`` on such evidence), and
``analysis.notes`` says what would settle it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import codes
from frtrace.load.dumpset import DumpSet
from frtrace.pystack.model import Frame, ProcessStacks

__all__ = ["BlindSpots", "blind_spots", "replaying", "skipped_collectives"]

# (function, the end of its file's path): the frames of a CUDA graph replay (torch's Python,
# and py-spy --native's C++ symbol)
_REPLAY_FRAMES = (
    ("replay", "torch/cuda/graphs.py"),
    ("replay", "torch/accelerator/graphs.py"),
    ("replay", "torch/xpu/graphs.py"),
    ("run_graph", "torch/_inductor/cudagraph_trees.py"),
)
_NATIVE_REPLAY = ("CUDAGraph::replay", "cudaGraphLaunch")


@dataclass(frozen=True, slots=True, kw_only=True)
class BlindSpots:
    """The collectives a rank's recorder did not write, per (rank, group), and the ranks whose
    stack shows a CUDA graph replay."""

    skipped: Mapping[tuple[int, int], int] = field(default_factory=dict)
    replaying: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.skipped or self.replaying)


def blind_spots(
    dumps: DumpSet, membership: Membership, sampled: Mapping[int, ProcessStacks]
) -> BlindSpots:
    """Both blind spots of a dump set and its ranks' stack samples."""
    return BlindSpots(skipped=skipped_collectives(dumps, membership), replaying=replaying(sampled))


def skipped_collectives(dumps: DumpSet, membership: Membership) -> dict[tuple[int, int], int]:
    """(rank, gid) -> collectives counted and not written between two of the rank's entries of
    the group (module docstring); only where there are any."""
    entries = dumps.entries
    if not entries.num_rows:
        return {}
    backend, _ = codes(entries.column("backend"))
    name, names = codes(entries.column("group_name"))
    frame = pd.DataFrame(
        {
            "rank": entries.column("rank").to_numpy(),
            "backend": backend,
            "pg": entries.column("pg_id").fill_null(-1).to_numpy(),
            "name": name,
            "rid": entries.column("record_id").fill_null(-1).to_numpy(),
            "seq": entries.column("collective_seq").fill_null(-1).to_numpy(),
            "p2p": entries.column("is_p2p").fill_null(False).to_numpy(zero_copy_only=False),
            # (before torch 2.4 one seq_id counted p2p ops too: no p2p_seq_id then)
            "own": entries.column("p2p_seq").is_valid().to_numpy(zero_copy_only=False),
        }
    )
    # a recorder's buffer with every record_id between its first and its last: nothing dropped
    span = frame.groupby(["rank", "backend"], sort=False)["rid"].agg(["min", "max", "count"])
    whole = span[(span["min"] >= 0) & (span["max"] - span["min"] + 1 == span["count"])]
    if whole.empty:
        return {}
    frame = frame.join(whole[[]].assign(whole=True), on=["rank", "backend"])
    frame = frame[frame["whole"].notna() & (frame["seq"] >= 0)]
    previous = frame.groupby(["rank", "backend", "pg", "name"], sort=False)["seq"].shift()
    step = np.where(frame["p2p"].to_numpy(bool) & frame["own"].to_numpy(bool), 0, 1)
    missing = frame["seq"] - previous - step
    gaps = frame.assign(missing=missing)[previous.notna() & (missing > 0)]
    if gaps.empty:
        return {}
    out: dict[tuple[int, int], int] = {}
    per = gaps.groupby(["rank", "name"], sort=True)["missing"].sum()
    for key, count in zip(per.index.tolist(), per.tolist(), strict=True):
        rank, code = int(key[0]), int(key[1])
        label = names[code] if code >= 0 else None
        gid = membership.of_rank.get((rank, label)) if label is not None else None
        if gid is not None:
            out[(rank, gid)] = out.get((rank, gid), 0) + int(count)
    return out


def replaying(sampled: Mapping[int, ProcessStacks]) -> tuple[int, ...]:
    """The ranks one of whose threads is in a CUDA graph replay."""
    return tuple(
        sorted(
            rank
            for rank, sample in sampled.items()
            if any(_replays(f) for t in sample.threads for f in t.frames)
        )
    )


def _replays(frame: Frame) -> bool:
    if frame.native:
        return any(s in frame.function for s in _NATIVE_REPLAY)
    path = frame.filename.replace("\\", "/")
    name = frame.function.rpartition(".")[2]  # ("CUDAGraph.replay": a sidecar's qualified name)
    return any(name == fn and path.endswith(end) for fn, end in _REPLAY_FRAMES)
