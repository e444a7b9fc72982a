"""Stuck or slow from periodic stack samples alone: which ranks' stacks moved between moments.

torch's debug server writes every rank's stacks every ``dump_interval`` seconds
(:mod:`frtrace.pystack.periodic`); a folder of them is a time series, so telling stuck from
slow needs no second collection. A rank whose main thread's stack (every frame: function, file
and line) differs between two moments has moved: it is not stuck. One whose stack is the same
at every moment is stuck there, or was in the same call each time it was sampled.
"""

from __future__ import annotations

import os
from collections import defaultdict

from frtrace.detail.series import RankMotion, StackSeries
from frtrace.pystack.model import ProcessStacks
from frtrace.pystack.where import where

__all__ = ["stack_series"]

Key = tuple[tuple[str, str, int | None], ...]


def _key(sample: ProcessStacks) -> Key:
    thread = sample.main_thread
    if thread is None:
        return ()
    return tuple((f.function, f.filename, f.line) for f in thread.frames)


def stack_series(samples: tuple[ProcessStacks, ...]) -> StackSeries | None:
    """The series of the periodic samples (trigger ``periodic: ...``), or None where there are
    fewer than two moments."""
    periodic = [
        s
        for s in samples
        if (s.trigger or "").startswith("periodic") and s.rank is not None and s.taken_at_ns
    ]
    # one kind of file (faulthandler's or py-spy's): the two spell the same frame differently
    kinds: dict[str, set[int]] = defaultdict(set)
    for s in periodic:
        kinds[s.source].add(s.taken_at_ns or 0)
    if kinds:
        kind = max(sorted(kinds), key=lambda k: len(kinds[k]))
        periodic = [s for s in periodic if s.source == kind]
    moments = sorted({s.taken_at_ns for s in periodic if s.taken_at_ns is not None})
    if len(moments) < 2:
        return None
    by_rank: dict[int, list[ProcessStacks]] = defaultdict(list)
    for s in periodic:
        assert s.rank is not None
        by_rank[s.rank].append(s)
    ranks = []
    for rank in sorted(by_rank):
        seq = sorted(by_rank[rank], key=lambda s: s.taken_at_ns or 0)
        last = seq[-1]
        keys = [_key(s) for s in seq]
        same_from = len(seq) - 1
        while same_from > 0 and keys[same_from - 1] == keys[-1]:
            same_from -= 1
        still_ns = (last.taken_at_ns or 0) - (seq[same_from].taken_at_ns or 0)
        ranks.append(
            RankMotion(
                rank=rank,
                samples=len(seq),
                moved=len(set(keys)) > 1,
                place=where(last).summary,
                still_s=still_ns / 1e9,
            )
        )
    files = sorted({os.path.basename(s.path) for s in periodic}, key=lambda n: n)
    return StackSeries(
        moments=len(moments),
        first_ns=moments[0],
        last_ns=moments[-1],
        files=tuple(files),
        ranks=tuple(ranks),
    )
