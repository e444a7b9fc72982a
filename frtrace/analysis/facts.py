"""Everything the rules read, computed once: the ``Facts`` of one dump set.

Membership, the matched ops, when each dump was written, the wait graph, the ops the recorder
counted but did not write, the failures the job's logs, error files and sidecars report
(``frtrace.evidence``), and where each rank's Python stack says it is. Each rule
(``analysis.rules``) is a function of this one frozen value; none computes a fact of its own
that another rule also needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from frtrace.analysis.capture import DumpMoments, dump_moments
from frtrace.analysis.groups import Membership, resolve_groups
from frtrace.analysis.match import match
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.stackjoin import culprit_where
from frtrace.analysis.unrecorded import unrecorded_ops
from frtrace.analysis.waitgraph import WaitGraph, build_wait_graph
from frtrace.evidence.model import JobEvidence
from frtrace.load.tables import DumpSet, give_back_memory
from frtrace.model import CulpritWhere
from frtrace.pystack.discover import StackSet

__all__ = ["Facts", "gather_facts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """One dump set, read once, for every rule."""

    dumps: DumpSet
    membership: Membership
    matched: MatchResult
    moments: DumpMoments
    waits: WaitGraph
    unrecorded: Mapping[tuple[int, int], int]  # (rank, gid) -> ops counted, not written
    evidence: JobEvidence = field(default_factory=JobEvidence)
    stacks: StackSet | None = None
    places: Mapping[int, CulpritWhere] = field(default_factory=dict)  # per rank with a stack

    @property
    def loaded(self) -> frozenset[int]:
        return frozenset(self.dumps.loaded_ranks)

    def in_comm(self, rank: int) -> bool | None:
        """Is the rank's main thread inside a torch.distributed call? None: no stack."""
        place = self.places.get(rank)
        return None if place is None else place.place == "collective"


def gather_facts(
    dumps: DumpSet,
    dumped_at_ns: Mapping[int, int] | None = None,
    failed_ranks: frozenset[int] = frozenset(),
    evidence: JobEvidence | None = None,
    stacks: StackSet | None = None,
) -> Facts:
    """The facts of a loaded dump set; ``dumped_at_ns``: when each rank's dump was written,
    where known; ``failed_ranks``: ranks whose dump was written because something failed."""
    membership = resolve_groups(dumps)
    matched = match(dumps, membership)
    give_back_memory()  # (matching's per-entry temporaries: before the next steps allocate)
    moments = dump_moments(dumps, dumped_at_ns or {}, failed_ranks)
    waits = build_wait_graph(dumps, membership, matched, running=moments.running)
    places = {}
    if stacks is not None:
        places = {r: culprit_where(r, s) for r, s in stacks.by_rank.items()}
    return Facts(
        dumps=dumps,
        membership=membership,
        matched=matched,
        moments=moments,
        waits=waits,
        unrecorded=unrecorded_ops(dumps, membership),
        evidence=evidence if evidence is not None else JobEvidence(),  # (problems, no failure)
        stacks=stacks,
        places=places,
    )
