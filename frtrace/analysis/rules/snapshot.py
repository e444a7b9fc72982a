"""A set dumped at one instant of a running job, where no dump says when it was written.

``torch._C._distributed_c10d._dump_fr_trace()`` called on every rank at once (a timer, a
signal handler of the job's own) writes no dump time. In a job running many small groups, such
a snapshot catches some groups between two ops: one member already inside op k, its partner
done with k - 1 and about to enter. Read as a hang, each such group gets a culprit of its own.

A hang rarely looks like that: one stalled rank holds up everyone who waits on it, and several
stalls that happen independently do not happen within the same few milliseconds. So where no
dump time is known, two or more ranks are each "one op behind" in a group of their own, hold
up no one outside it, and every one of those waits began, and every one of those ranks last
recorded an op, within ``WINDOW_S`` of the newest entry of a rank on a clock known against
its own (``facts.clocks``: hosts' clocks are compared only where their ranks recorded
collectives together; ranks dump one after the other, and a dump itself takes a moment: real
snapshots spread over up to a second), the
picture is a running job's as much as a hang's: one warning per group,
and the verdict does not name them (``analysis.verdict``). A dump time (``frtrace.recorder``)
or a second snapshot (``frtrace compare``) settles it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.ops import filled
from frtrace.analysis.facts.waitgraph import Edge, EdgeKind, victims_of
from frtrace.detail import RunningSnapshot
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["WINDOW_S", "check"]

WINDOW_S = 2.0  # as analysis.capture's longest "running" idle time


def check(facts: Facts) -> list[Finding]:
    if facts.moments.dumped_at_ns:
        return []  # the dump times say it (analysis.capture)
    roots = set(facts.waits.roots)
    by_culprit: dict[int, list[Edge]] = defaultdict(list)
    for e in facts.waits.edges:
        if e.kind == EdgeKind.NEVER_JOINED and e.target in roots and e.seq is not None:
            by_culprit[e.target].append(e)
    if len(by_culprit) < 2:
        return []
    groups = {c: {e.gid for e in edges} for c, edges in by_culprit.items()}
    if any(len(g) != 1 for g in groups.values()) or len({min(g) for g in groups.values()}) < len(
        groups
    ):
        return []  # each one op behind in a group of its own, and no two in the same group
    for c, edges in by_culprit.items():
        members = set(facts.membership.groups[edges[0].gid].members)
        if not victims_of(facts.waits, (c,)) <= members:
            return []  # it holds up ranks outside its group: a real chain of waits
    times = filled(facts.dumps.entries.column("time_created_ns"), 0)
    culprits = np.fromiter(by_culprit, dtype=np.int64)
    ranks = facts.dumps.entries.column("rank").to_numpy()
    mine = np.isin(ranks, culprits)  # one pass over the entries, not one per culprit
    last = pd.Series(times[mine]).groupby(ranks[mine]).max().to_dict()
    newest = _newest_by_clock(ranks, times, facts)
    clocks = facts.clocks
    for c, edges in by_culprit.items():
        began = [int(times[e.row]) for e in edges] + ([int(last[c])] if c in last else [])
        # the newest entry of a rank whose clock is known against the culprit's
        now = newest.get(clocks.component.get(c), max(newest.values(), default=0))
        if not began or min(began) <= 0 or now - min(began) > WINDOW_S * 1e9:
            return []
    out = []
    for c, edges in sorted(by_culprit.items()):
        group = facts.membership.groups[edges[0].gid]
        waiters = tuple(sorted({e.waiter for e in edges}))
        seq = edges[0].seq
        out.append(
            Finding(
                kind=FindingKind.RUNNING_SNAPSHOT,
                severity=Severity.WARNING,
                culprit_ranks=(),
                waiting_ranks=waiters,
                group=group,
                seq=seq,
                confidence=Confidence.LOW,
                detail=RunningSnapshot(
                    behind=c, ahead=waiters, groups=len(by_culprit), window_s=WINDOW_S
                ),
            )
        )
    return out


def _newest_by_clock(ranks: np.ndarray, times: np.ndarray, facts: Facts) -> dict[int | None, int]:
    """The newest entry time of each clock component (``facts.clocks``: ranks whose times are
    known against each other's; a job of disjoint groups on hosts whose clocks are unknown has
    several), every rank without one (no collective: no time) counted in each."""
    component = facts.clocks.component
    if len(times) == 0:
        return {}
    newest = pd.Series(times).groupby(ranks).max()
    out: dict[int | None, int] = {}
    for r, t in zip(newest.index.tolist(), newest.tolist(), strict=True):
        home = component.get(int(r))
        out[home] = max(out.get(home, 0), int(t))
    free = out.pop(None, 0)
    if not out:
        return {None: free}
    return {home: max(t, free) for home, t in out.items()}
