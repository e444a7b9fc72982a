"""Everything the rules read, computed once: the ``Facts`` of one dump set.

Membership, the matched ops, when each dump was written, the wait graph, the ops the recorder
counted but did not write (and the ranks that may be blocked in one), the failures the job's
logs, error files and sidecars report (``frtrace.evidence``), where each rank's Python stack
says it is and the classes those stacks fall into, and each rank's process (host, pid). Each
rule (``analysis.rules``) is a function of this one frozen value; none computes a fact of its
own that another rule also needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from frtrace.analysis.facts.blind import BlindSpots, blind_spots
from frtrace.analysis.facts.capture import DumpMoments, dump_moments, dump_times_from_entries
from frtrace.analysis.facts.clocks import (
    Clocks,
    aligned,
    estimate_clocks,
    evidence_on_one_clock,
)
from frtrace.analysis.facts.creation import CreationOrder, creation_order
from frtrace.analysis.facts.elsewhere import maybe_elsewhere
from frtrace.analysis.facts.groups import Membership, resolve_groups
from frtrace.analysis.facts.match import match
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.places import culprit_where
from frtrace.analysis.facts.processes import rank_processes, seen_in_collected, seen_in_stacks
from frtrace.analysis.facts.reorder import Reorder, reorders
from frtrace.analysis.facts.unrecorded import unrecorded_ops
from frtrace.analysis.facts.waitgraph import WaitGraph, build_wait_graph
from frtrace.detail import MaybeElsewhere
from frtrace.detail.notes import ManifestTimes
from frtrace.evidence.collected import Collected, manifest_times
from frtrace.evidence.model import JobEvidence
from frtrace.load.dumpset import DumpSet
from frtrace.load.hooks import give_back_memory
from frtrace.model import CulpritWhere, RankProcess
from frtrace.pystack.classes import StackClasses, group_stacks
from frtrace.pystack.discover import StackSet
from frtrace.pystack.model import ProcessStacks

__all__ = ["Facts", "facts_of", "gather_facts", "stateless_ranks"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """One dump set, read once, for every rule."""

    dumps: DumpSet
    membership: Membership
    matched: MatchResult
    moments: DumpMoments
    waits: WaitGraph
    unrecorded: Mapping[tuple[int, int], int]  # (rank, gid) -> ops counted, not written
    stateless: frozenset[int] = frozenset()  # ranks whose entries never change state (Gloo)
    evidence: JobEvidence = field(default_factory=JobEvidence)
    stacks: StackSet | None = None
    places: Mapping[int, CulpritWhere] = field(default_factory=dict)  # per rank with a stack
    sampled: Mapping[int, ProcessStacks] = field(default_factory=dict)  # ranks of the job only
    classes: StackClasses | None = None  # the sampled ranks' stacks, STAT-style
    processes: Mapping[int, RankProcess] = field(default_factory=dict)  # host, pid per rank
    claimed: tuple[ManifestTimes, ...] = ()  # dump times only collect's manifest gave
    # ranks that never joined an op their peers wait in, but may be blocked in one their
    # buffer does not show (a send/recv Gloo does not record): why (``elsewhere``)
    elsewhere: Mapping[int, MaybeElsewhere] = field(default_factory=dict)
    # the clock offsets taken out of the ranks' times before anything read them (``clocks``)
    clocks: Clocks = field(default_factory=Clocks)
    # collectives the recorder counted but did not write, and ranks in a CUDA graph replay
    # (``blind``): a clean buffer there proves nothing
    blind: BlindSpots = field(default_factory=BlindSpots)
    # group names ranks hold as different groups, and who made its groups in another order
    creation: CreationOrder = field(default_factory=CreationOrder)
    reorders: tuple[Reorder, ...] = ()  # groups whose members ran the same ops in other orders

    @property
    def loaded(self) -> frozenset[int]:
        return frozenset(self.dumps.loaded_ranks)

    def in_comm(self, rank: int) -> bool | None:
        """Is the rank's main thread inside a torch.distributed call? None: no stack."""
        place = self.places.get(rank)
        return None if place is None else place.place == "collective"


def facts_of(
    dumps: DumpSet,
    stacks: StackSet | None = None,
    evidence: JobEvidence | None = None,
    collected: Collected | None = None,
) -> Facts:
    """The facts of a dump set with what else the job left: its Python ``stacks``, the
    failures its logs, error files and sidecars report (``evidence``), and what ``frtrace
    collect`` knew of each rank (``collected``: its dump time, host and pid)."""
    clocks = estimate_clocks(dumps)  # every time on one clock before anything reads one
    dumps = aligned(dumps, clocks)
    if evidence is not None:
        evidence = evidence_on_one_clock(evidence, dumps, clocks)
    with ThreadPoolExecutor(1, thread_name_prefix="frtrace-facts") as beside:
        # The groups resolved, then when each dump was written (what (NCCL) the dump itself
        # discovered, the sidecars, collect's manifests) and what that says of each rank,
        # beside the matching, which needs none of it until its group id column (Arrow,
        # pandas and numpy passes over every entry, most without the GIL)
        groups = beside.submit(resolve_groups, dumps)
        timed = beside.submit(_dump_moments, dumps, stacks, collected, clocks)
        matched = match(dumps, groups)
        membership = groups.result()
        moments, sources = timed.result()
    facts = gather_facts(
        dumps,
        evidence=evidence,
        stacks=stacks,
        collected=collected,
        moments=moments,
        lined_up=(membership, matched),
    )
    claimed = tuple(ManifestTimes(manifest=rel, ranks=ranks) for rel, ranks in sources)
    return replace(facts, claimed=claimed, clocks=clocks)


def _dump_moments(
    dumps: DumpSet, stacks: StackSet | None, collected: Collected | None, clocks: Clocks
) -> tuple[DumpMoments, tuple[tuple[str, tuple[int, ...]], ...]]:
    """When each rank's dump was written and what that says of it (``dump_moments``), and
    the manifests of ``frtrace collect`` that alone gave a rank's time (each with its ranks);
    every time on the reference's clock (``clocks``: the entries' are already)."""
    times = dump_times_from_entries(dumps)
    failed: frozenset[int] = frozenset()
    if stacks is not None:  # the recorder's sidecar, written with the dump
        times |= {
            r: t - clocks.of(r) for r in stacks.ranks if (t := stacks.taken_at_ns(r)) is not None
        }
        failed = frozenset(
            r for r in stacks.ranks if (stacks.trigger(r) or "").startswith("exception")
        )
    used, sources = manifest_times(collected, times)  # collect's, where the dumps say none
    used = {r: t - clocks.of(r) for r, t in used.items()}  # (each host's collect, its clock)
    moments = dump_moments(dumps, times | used, failed)
    return replace(moments, component=clocks.component), sources


def gather_facts(
    dumps: DumpSet,
    dumped_at_ns: Mapping[int, int] | None = None,
    failed_ranks: frozenset[int] = frozenset(),
    evidence: JobEvidence | None = None,
    stacks: StackSet | None = None,
    collected: Collected | None = None,
    *,
    lined_up: tuple[Membership, MatchResult] | None = None,
    moments: DumpMoments | None = None,
) -> Facts:
    """The facts of a loaded dump set; ``dumped_at_ns``: when each rank's dump was written,
    where known; ``failed_ranks``: ranks whose dump was written because something failed;
    ``lined_up``: its groups and matched ops, and ``moments``: what the dump times say of
    each rank (``dump_moments``; for it, ``dumped_at_ns`` and ``failed_ranks`` are then not
    read), where the caller has them already."""
    if lined_up is None:
        membership = resolve_groups(dumps)
        matched = match(dumps, membership)
    else:
        membership, matched = lined_up
    give_back_memory()  # (matching's per-entry temporaries: before the next steps allocate)
    if moments is None:
        moments = dump_moments(dumps, dumped_at_ns or {}, failed_ranks)
    waits = build_wait_graph(dumps, membership, matched, running=moments.running, moments=moments)
    places: dict[int, CulpritWhere] = {}
    sampled: dict[int, ProcessStacks] = {}
    classes = None
    if stacks is not None:
        places = {r: culprit_where(r, s) for r, s in stacks.by_rank.items()}
        world = max(dumps.world.size, 1)
        sampled = {r: s for r, s in stacks.by_rank.items() if r < world}
        classes = group_stacks(sampled) if sampled else None
    seen = seen_in_stacks(stacks) + seen_in_collected(collected)
    unrecorded = unrecorded_ops(dumps, membership)
    evidence = evidence if evidence is not None else JobEvidence()  # (problems, no failure)
    return Facts(
        dumps=dumps,
        membership=membership,
        matched=matched,
        moments=moments,
        waits=waits,
        unrecorded=unrecorded,
        stateless=stateless_ranks(dumps),
        evidence=evidence,
        stacks=stacks,
        places=places,
        sampled=sampled,
        classes=classes,
        processes=rank_processes(seen, dumps.world.size),
        elsewhere=maybe_elsewhere(waits, matched, membership, places, unrecorded, evidence),
        blind=blind_spots(dumps, membership, sampled),
        creation=creation_order(dumps, membership, matched),
        reorders=reorders(dumps, membership, matched),
    )


def stateless_ranks(dumps: DumpSet) -> frozenset[int]:
    """Ranks whose entries never change state: Gloo's (no ``scheduled`` -> ``started`` ->
    ``completed``; ``retired`` also on failure)."""
    files = dumps.files
    ranks, backends = files.column("rank").to_pylist(), files.column("backend").to_pylist()
    return frozenset(int(r) for r, b in zip(ranks, backends, strict=True) if b == "gloo")
