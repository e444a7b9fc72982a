"""A dump set (and what else the job left) in, a ``Report`` out: facts, rules, verdict.

1. ``facts.gather_facts``: everything the rules read, computed once (groups, matched ops,
   dump moments, the wait graph, unrecorded ops, the job's failures, where each rank's stack is);
2. every rule of ``rules.RULES`` reads the facts and says what it sees (``check(facts)``);
3. ``verdict.verdict`` weighs the findings against each other (its docstring is the order
   of precedence) into the verdict and the culprits;
4. the report, made once: stragglers (``stragglers``), where the culprits' stacks put them
   and what every rank's stack says against the verdict (``stackjoin``), each rank's process,
   and what the dumps could not show (``notes``);
5. what NCCL RAS's answers add to it (``ras``), and its fingerprint (``fingerprint``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from frtrace.analysis.facts import Facts, facts_of
from frtrace.analysis.facts.clocks import clock_notes
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.segments import rank_group_spans
from frtrace.analysis.facts.waitgraph import victims_of
from frtrace.analysis.fingerprint import with_fingerprint
from frtrace.analysis.notes import blind_notes, data_notes
from frtrace.analysis.ras import with_ras
from frtrace.analysis.rules import RULES
from frtrace.analysis.stackjoin import (
    Named,
    stack_evidence,
    stack_notes,
    with_stack_basis,
    with_stacks,
)
from frtrace.analysis.stragglers import find_stragglers
from frtrace.analysis.verdict import verdict
from frtrace.detail.notes import PresumedHeldUp
from frtrace.evidence.collected import Collected
from frtrace.evidence.model import JobEvidence
from frtrace.load.dumpset import DumpSet
from frtrace.load.hooks import give_back_memory
from frtrace.model import GroupProgress, Report, Severity
from frtrace.pystack.discover import StackSet

__all__ = ["diagnose", "diagnose_facts"]


def diagnose(
    dumps: DumpSet,
    stacks: StackSet | None = None,
    evidence: JobEvidence | None = None,
    collected: Collected | None = None,
) -> Report:
    """Analyse a loaded dump set with what else the job left: the ranks' Python ``stacks``,
    the failures its logs, error files and sidecars report (``evidence``), and what ``frtrace
    collect`` knew of each rank (``collected``: its dump time, host and pid)."""
    return diagnose_facts(facts_of(dumps, stacks, evidence, collected))


def diagnose_facts(facts: Facts) -> Report:
    """Run every rule over the facts and decide."""
    # The stragglers are found beside the rules and the groups' progress, which they do not
    # need: numpy passes over every collective, most of them without the GIL
    with ThreadPoolExecutor(1, thread_name_prefix="frtrace-stragglers") as beside:
        late = beside.submit(find_stragglers, facts.dumps, facts.membership, facts.matched)
        found = [finding for rule in RULES for finding in rule(facts)]
        progress = _progress(facts.membership, facts.matched)
        stragglers = late.result()
    give_back_memory()  # (the pages of mapped columns the findings read, and their garbage)
    decision = verdict(found, facts, stragglers)
    notes = data_notes(facts.dumps, facts.membership, facts.matched, facts.waits, decision.verdict)
    notes += blind_notes(facts.blind, facts.membership)  # (what the recorder cannot see)
    notes += [
        PresumedHeldUp(rank=r, where=label, by=by, symptom=symptom)
        for r, (label, by, symptom) in sorted(decision.presumed.items())
    ]
    culprits = decision.culprits
    errors = [f for f in decision.findings if f.severity == Severity.ERROR]
    victims = victims_of(facts.waits, culprits) | {r for f in errors for r in f.waiting_ranks}
    victims |= set(decision.presumed) | victims_of(facts.waits, tuple(decision.presumed))
    victim_ranks = tuple(sorted(victims - set(culprits)))
    named = Named(
        verdict=decision.verdict,
        culprits=culprits,
        suspected=decision.suspected,
        victims=victim_ranks,
    )
    dumps = facts.dumps
    report = Report(
        verdict=decision.verdict,
        culprit_ranks=culprits,
        findings=with_stacks(decision.findings, culprits, facts),
        stragglers=stragglers,
        world_size=dumps.world.size,
        ranks_loaded=dumps.loaded_ranks,
        ranks_missing=dumps.missing_ranks,
        ranks_unreadable=dumps.unreadable_ranks,
        data_notes=(*clock_notes(facts.clocks), *notes, *stack_notes(facts), *facts.claimed),
        groups=facts.membership.groups,
        wait_edges=tuple(sorted({(e.waiter, e.target, str(e.kind)) for e in facts.waits.edges})),
        suspected_ranks=decision.suspected,
        victim_ranks=victim_ranks,
        progress=progress,
        timeline=facts.evidence.failures,
        evidence_files=facts.evidence.files,
        evidence_problems=facts.evidence.problems,
        disagreements=decision.disagreements,
        stacks=stack_evidence(facts, named),
        processes=facts.processes,
    )
    report = with_stack_basis(report)  # (a culprit the stacks alone observe: its stack)
    return with_fingerprint(with_ras(report, facts.evidence.ras))  # (RAS never names anyone)


def _progress(membership: Membership, matched: MatchResult) -> tuple[GroupProgress, ...]:
    """Per group and member: highest seq entered and highest seq finished (by anyone)."""
    coll = matched.collectives
    done = rank_group_spans(coll, where=coll["done"].to_numpy(dtype=bool))
    finished = {
        (r, g): top
        for r, g, top in zip(
            done["rank"].tolist(), done["gid"].tolist(), done["max"].tolist(), strict=True
        )
    }
    out = []
    for gid, group in enumerate(membership.groups):
        out.append(
            GroupProgress(
                group=group,
                entered=tuple(
                    (matched.extent.get((m, gid)) or (None, None))[1] for m in group.members
                ),
                finished=tuple(finished.get((m, gid)) for m in group.members),
            )
        )
    return tuple(out)
