"""A large set on a Dask cluster, in two passes: the frontier, folded and merged on the
workers; then the files read again, each keeping only its entries at and near the frontier.

1. ``summarize_files`` (a task per batch of files) folds each dump it reads into a
   ``frontier.Partial``; ``merge_partials`` tasks merge them ``FAN_IN`` at a time on the
   workers, level by level; the last, ``cut_partials``, merges and cuts: only a cutoff per
   group (and the paths it folded) comes back to the coordinator.
2. ``parse_kept``: the ordinary read of a batch, each dump's entries cut by the frontier
   (``Frontier.keep``), and the batch's dumps sent as one ``bundle.Bundle``: one entries
   table, the file, group and pg_status rows as small tables, the large member lists left
   out (the root sent them; the coordinator has them). A dump the first pass did not fold
   (it failed there, or appeared since) is kept whole.

A first pass that fails (a worker lost beyond the scheduler's retries, a bug) costs only the
cut: the second pass then reads every entry, as for a small set, and the report has no note
of a cut.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from frtrace.errors import DumpFormatError
from frtrace.incident.discover import Candidate
from frtrace.load.handover.shipped import ShippedDump
from frtrace.load.read.parse import ParsedDump
from frtrace.load.workers.bundle import Bundle, bundle
from frtrace.load.workers.frontier import MARGIN, Frontier, Partial, cut, fold, merge
from frtrace.load.workers.parallel import file_timeout_s, parse_candidates

__all__ = [
    "FAN_IN",
    "FRONTIER_MIN_BYTES",
    "Cut",
    "FirstPass",
    "Folded",
    "cut_partials",
    "dask_frontier",
    "local_frontier",
    "merge_partials",
    "parse_kept",
    "summarize_files",
]

# Partials merged per task: a tree of log_8(tasks) levels (100,000 ranks in 128-file tasks:
# 782 leaves, 4 levels), each merge reading 8 partials of the same few groups.
FAN_IN = 8
# Torch 2.3 and older (``DumpMeta.layout``) name a group by a per-process id: two groups can
# share a name across ranks, and their history is never cut.
OLD_LAYOUTS = frozenset({"list", "1.x"})
# Member lists from this long are sent to the coordinator once, not with every dump.
LARGE_MEMBERS = 256
# Dumps (bytes) from which a cluster's load cuts the history: below it the coordinator holds
# every entry (~130 bytes each: 1 GB of dumps is ~1 GB there) and the report is exact.
FRONTIER_MIN_BYTES = 1 << 30


Members = dict[bytes, Any]  # a large member list (numpy int32) by its digest (``ranks_key``)


@dataclasses.dataclass(frozen=True, slots=True)
class Folded:
    """A partial, the dumps it folded, and the large member lists they record."""

    partial: Partial | None
    paths: frozenset[str]
    whole: bool = False  # a dump the frontier cannot speak for was read: keep every entry
    members: Members = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Cut:
    """The root's answer: the frontier, the dumps it was folded from, and every distinct
    large member list (each dump's copy of them stays on the workers: at 100,000 ranks the
    default group's list is 400 KB in every one of 100,000 dumps)."""

    frontier: Frontier
    paths: frozenset[str]
    members: Members


def summarize_files(candidates: Sequence[Candidate]) -> Folded:
    """The first pass's task: fold a batch of dumps (a file that cannot be read folds nothing:
    the second pass reports it)."""
    partials, paths, whole, members = [], set(), False, {}
    # (read as the second pass reads: in a watched process where the worker allows one)
    for cand, result in zip(candidates, parse_candidates(candidates, jobs=1), strict=True):
        if isinstance(result, ParsedDump):
            partials.append(fold(result.entries))
            paths.add(str(cand.path))
            whole |= result.meta.layout in OLD_LAYOUTS
            members.update(_large_lists(result))
    return Folded(merge(*partials) if partials else None, frozenset(paths), whole, members)


def _large_lists(result: ParsedDump) -> Members:
    out: Members = {}
    for row in result.groups:
        ranks, key = row.get("ranks"), row.get("ranks_key")
        if key and ranks is not None and len(ranks) >= LARGE_MEMBERS:
            out[key] = ranks
    return out


def merge_partials(*folded: Folded) -> Folded:
    """An inner node of the tree."""
    partials = [f.partial for f in folded if f.partial is not None]
    paths = frozenset().union(*(f.paths for f in folded))
    whole = any(f.whole for f in folded)
    members = {k: v for f in folded for k, v in f.members.items()}
    return Folded(merge(*partials) if partials else None, paths, whole, members)


def cut_partials(*folded: Folded, margin: int = MARGIN) -> Cut:
    """The root: the frontier of everything folded, and which dumps that was."""
    root = merge_partials(*folded)
    if root.partial is None or root.whole:
        return Cut(Frontier(margin=margin, cutoffs={}, settled=0), root.paths, {})
    return Cut(cut(root.partial, margin), root.paths, root.members)


def parse_kept(candidates: Sequence[Candidate], answer: Cut) -> Bundle:
    """The second pass's task: read a batch, each folded dump cut by the frontier, as one
    bundle (``load.workers.bundle``: one entries table, the side rows as small tables), the large
    member lists the root holds left out."""
    out: list[ParsedDump | DumpFormatError] = []
    for cand, result in zip(candidates, parse_candidates(candidates, jobs=1), strict=True):
        if isinstance(result, ShippedDump):  # (not asked for: no ship_to)
            raise TypeError(f"{cand.path}: a shipped result where none was asked for")
        if isinstance(result, ParsedDump) and str(cand.path) in answer.paths:
            result = dataclasses.replace(result, entries=answer.frontier.keep(result.entries))
        out.append(result)
    return bundle(candidates, out, held=set(answer.members))


@dataclasses.dataclass(frozen=True, slots=True)
class FirstPass:
    """The first pass, for an executor: given the batches of the second, ``run`` answers the
    handle its tasks take (``parse_kept``'s second argument: a value, or a cluster's future of
    it) and the root's answer; None where it failed and the history is kept whole. It runs
    from ``min_bytes`` of dumps (``applies``)."""

    run: Callable[[Sequence[Sequence[Candidate]]], tuple[Any, Cut] | None]
    min_bytes: int = FRONTIER_MIN_BYTES

    def applies(self, candidates: Sequence[Candidate]) -> bool:
        return sum(c.size_bytes for c in candidates) >= self.min_bytes


def _limit_s(batches: Sequence[Sequence[Candidate]], workers: int) -> float:
    # every file's own limit, shared among the workers, twice over: a first pass this slow is
    # a stalled cluster, and the second pass reads the files whole instead
    total = sum(file_timeout_s(c) for batch in batches for c in batch)
    return 2 * total / max(1, workers) + 60


def dask_frontier(
    client: Any, *, workers: int, min_bytes: int = FRONTIER_MIN_BYTES, margin: int = MARGIN
) -> FirstPass:
    """The first pass on a ``distributed.Client``: the folds and the tree of merges run on the
    workers; the answer stays there as a future the second pass's tasks take (only the
    frontier itself comes back here)."""

    def run(batches: Sequence[Sequence[Candidate]]) -> tuple[Any, Cut] | None:
        level = [client.submit(summarize_files, batch, pure=False) for batch in batches]
        while len(level) > FAN_IN:
            level = [
                client.submit(merge_partials, *level[i : i + FAN_IN], pure=False)
                for i in range(0, len(level), FAN_IN)
            ]
        root = client.submit(cut_partials, *level, margin=margin, pure=False)
        try:
            answer: Cut = root.result(timeout=_limit_s(batches, workers))
        except Exception:  # a lost worker past the retries, a timeout: everything kept
            root.cancel()
            return None
        return (root, answer) if answer.frontier.cutoffs else None

    return FirstPass(run, min_bytes)


def local_frontier(
    executor: cf.Executor, *, min_bytes: int = FRONTIER_MIN_BYTES, margin: int = MARGIN
) -> FirstPass:
    """The first pass on any ``concurrent.futures`` executor: folds there, merges here."""

    def run(batches: Sequence[Sequence[Candidate]]) -> tuple[Any, Cut] | None:
        futures = [executor.submit(summarize_files, b) for b in batches]
        try:
            answer = cut_partials(*[f.result() for f in futures], margin=margin)
        except Exception:  # (as on a cluster: the second pass keeps every entry)
            for future in futures:
                future.cancel()
            return None
        return (answer, answer) if answer.frontier.cutoffs else None

    return FirstPass(run, min_bytes)
