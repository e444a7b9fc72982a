"""The one place where findings are weighed against each other: culprits and the verdict.

Every rule (``analysis.rules``) says what it sees; ``verdict`` decides, in this order of
precedence:

1. **Desync.** A member that called another op, size or dtype than its peers (or a shifted
   sequence) is the culprit, whatever else is seen: ``DESYNC``. So is a rank that made its
   groups in another order (``group_order``) or ran a group's ops in another order
   (``op_order``); the mismatches that follow from it (and, for groups, the groups no other
   member recorded) are its own evidence, not findings; with no majority its ranks are
   suspected.
2. **Positive evidence names culprits.** Two kinds, each trusted:

   - what the job said: the first rank to fail with a cause of its own (``first_failure``),
     ranks an error message names (``named_by_error``);
   - what the entries show: a member with a dump never joined the op its peers wait in, a
     p2p peer never posted, a GPU never started the op, a cross-group cycle.

   A member "one op behind" in a group of its own, where no dump time is known and several
   groups look so at the same moment (``running_snapshot``: a running job dumped at one
   instant), is not positive evidence: its finding stays a warning.
   A rank the entries name whose own failures are all symptoms that came at or after the
   first cause (it timed out or lost its connection, then stopped) is a victim of that cause,
   not a culprit. Where the two kinds still name different ranks, both are named and
   ``Report.disagreements`` says which evidence named whom. Any positive culprit: ``HANG``.
3. **Suspicion from a missing dump** (a rank without a dump that its peers wait on) counts
   only when nothing positive names a culprit; a missing rank that sits in a group whose
   other members wait on a named culprit is presumed a victim (``_explain_missing``).
4. **The stacks** (``stack_outlier``) name culprits only where something is wrong that
   nothing above pins on a rank (ranks blocked unexplained, a failure reported, unrecorded
   send/recv, collectives the recorder cannot see, groups no other member recorded): ``HANG``
   with medium confidence. Elsewhere
   they are a running job's ordinary picture and are dropped. Where no dump was read at all,
   the stacks alone name a rank they observe outside the one collective every other rank is
   in (``stacks_only``: not suspected, its basis is its stack); else nobody: ``CANNOT_TELL``,
   never ``HEALTHY`` (nothing was read that could say so).
5. **Something is wrong, nobody is named**: an op every member entered that did not finish,
   members that disagree with no majority where members without a dump would settle which
   side is wrong (a desync warning), a suspect without a dump, a rank blocked in an op that
   nothing explains (not finished, not in flight at a known dump time, not matched by its
   group's members), unrecorded send/recv, collectives the recorder cannot see (a group's
   sequence ids skipped, a CUDA graph replay in the stacks: ``facts.blind``), a reported
   failure: ``CANNOT_TELL``. Never ``HEALTHY``.
6. ``HEALTHY_WITH_STRAGGLERS`` when ranks were consistently late, else ``HEALTHY``.
7. **What the stacks lend**, once the culprits are decided (it never changes who is named): a
   finding of medium confidence whose culprits' stacks are where its entries put them is of
   high confidence (one of low confidence rests on missing data the stacks do not give). The
   waiting ranks' stacks in the op alone confirm that they wait, not whom for (an inferred
   membership may name a rank that is not in the group): said, not raised.

The rules decide their own findings' severity and confidence from the facts (``hang``
demotes a "never joined" whose rank may be blocked in an op its buffer does not show); this
module alone weighs one finding against another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frtrace.analysis.facts import Facts
from frtrace.analysis.missing import explain_missing
from frtrace.analysis.notes import unexplained_ranks
from frtrace.analysis.rules.first_failure import TOGETHER_NS
from frtrace.analysis.stackjoin import stacks_agree
from frtrace.detail import Disagreement, LaterFailure, NamedApart, StackOutlier, UnrecordedOps
from frtrace.detail.order import GroupOrder, OpOrder
from frtrace.evidence.model import Role
from frtrace.model import (
    ENTRIES_OBSERVE,
    JOB_OBSERVES,
    Confidence,
    Finding,
    FindingKind,
    Severity,
    Straggler,
    Verdict,
)

__all__ = ["Decision", "verdict"]

DESYNC_KINDS = frozenset(
    {
        FindingKind.OP_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.SEQUENCE_SHIFT,
        FindingKind.GROUP_ORDER,
        FindingKind.OP_ORDER,
    }
)
ORDER_KINDS = frozenset({FindingKind.GROUP_ORDER, FindingKind.OP_ORDER})
FROM_THE_JOB = frozenset({FindingKind.FIRST_FAILURE, FindingKind.NAMED_BY_ERROR})
# Warnings that say something is wrong without naming who (step 5)
WRONG_UNNAMED = frozenset(
    {
        FindingKind.STUCK_IN_COLLECTIVE,
        FindingKind.MISSING_DUMP,
        FindingKind.UNRECORDED_OPS,
        FindingKind.UNSEEN_MEMBERS,
        FindingKind.RUNNING_SNAPSHOT,
        FindingKind.NOTHING_RECORDED,
        FindingKind.NEVER_JOINED,  # kept as a warning: the rank may be in an unrecorded op
        FindingKind.P2P_UNMATCHED,  # kept as a warning: the peer is blocked before it
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The verdict, the findings it rests on, and who is named."""

    verdict: Verdict
    findings: tuple[Finding, ...]  # sorted, most severe first
    culprits: tuple[int, ...]
    suspected: tuple[int, ...]  # named only from missing dumps
    presumed: dict[
        int, tuple[str, tuple[int, ...], str | None]
    ]  # no dump, presumed held up: (where, by)
    disagreements: tuple[Disagreement, ...]


def verdict(found: list[Finding], facts: Facts, stragglers: tuple[Straggler, ...]) -> Decision:
    """Weigh the rules' findings; see the module docstring for the order."""
    found = _order_explains(_snapshot_is_not_a_hang(_stuck_explained(_skip_explains(found))))
    errors = [f for f in found if f.severity == Severity.ERROR]
    job = [f for f in errors if f.kind in FROM_THE_JOB]
    entries = [
        f
        for f in errors
        if f.kind not in FROM_THE_JOB
        and f.kind not in (FindingKind.STACK_OUTLIER, FindingKind.MISSING_DUMP)
    ]
    found, job, entries, disagreements = _job_against_entries(found, job, entries, facts)
    has_positive = bool(job or entries)
    something_wrong = bool(
        any(f.kind in WRONG_UNNAMED or f.kind in DESYNC_KINDS for f in found)
        or unexplained_ranks(facts.matched, facts.waits)
        or facts.evidence.failures
        or facts.blind  # collectives the recorder cannot see (``facts.blind``)
    )
    missing = [f for f in errors if f.kind == FindingKind.MISSING_DUMP]
    outliers = [f for f in found if f.kind == FindingKind.STACK_OUTLIER]
    kept = [f for f in found if f.severity != Severity.ERROR] + job + entries + missing
    # step 4: the stacks decide only where nothing else named anyone and something is wrong,
    # or where no dump was read and the stacks alone observe the rank (``_its_stack``)
    alone = any(_its_stack(f) for f in outliers)
    use_stacks = not has_positive and not missing and (something_wrong or alone) and bool(outliers)
    if use_stacks:
        kept += outliers
    kept, presumed = explain_missing(kept, facts)
    kept.sort(key=Finding.sort_key)

    def names_culprits(f: Finding) -> bool:
        if f.severity != Severity.ERROR:
            return False
        if has_positive:  # step 2 outranks step 3: a missing dump is only a suspicion
            return f.kind not in (FindingKind.MISSING_DUMP, FindingKind.STACK_OUTLIER)
        return f.kind in (FindingKind.MISSING_DUMP, FindingKind.STACK_OUTLIER)

    positive = [f for f in kept if names_culprits(f)]
    culprits = tuple(sorted({r for f in positive for r in f.culprit_ranks}))
    suspected = _suspected(kept, positive, facts.loaded)
    return Decision(
        verdict=_decided(
            positive, something_wrong or bool(suspected) or not facts.loaded, stragglers
        ),
        findings=tuple(_stacks_lend(f, facts) for f in kept),  # step 7
        culprits=culprits,
        suspected=suspected,
        presumed=presumed,
        disagreements=tuple(disagreements),
    )


def _suspected(
    kept: list[Finding], positive: list[Finding], loaded: frozenset[int]
) -> tuple[int, ...]:
    """The ranks named only on an inference (naming discipline, issue 50): a rank without a
    dump that its peers wait on, and a culprit no finding observes (``model.OBSERVED_KINDS``:
    from the entries only where the rank has a dump; a group's unseen members named by
    elimination, the stacks alone). A rank one finding observes is never suspected."""
    observed = {
        r
        for f in positive
        for r in f.culprit_ranks
        if f.kind in JOB_OBSERVES or (f.kind in ENTRIES_OBSERVE and r in loaded) or _its_stack(f)
    }
    no_dump = {r for f in kept if f.kind == FindingKind.MISSING_DUMP for r in f.culprit_ranks}
    no_dump |= {r for f in kept for r in _order_suspects(f)}  # (no majority)
    named = {r for f in positive for r in f.culprit_ranks}
    return tuple(sorted((no_dump | named) - observed))


def _its_stack(f: Finding) -> bool:
    """No dump was read, and the stacks alone observe the rank: every rank of the job has one,
    all but it in one place of one collective (``rules.stack_outlier``, basis "its stack")."""
    return isinstance(f.detail, StackOutlier) and f.detail.stacks_only


def _order_suspects(f: Finding) -> tuple[int, ...]:
    """The ranks an order finding with no majority suspects (it names no culprit)."""
    if f.severity == Severity.ERROR:
        return ()
    if isinstance(f.detail, GroupOrder):
        return f.detail.suspects
    return f.detail.odd if isinstance(f.detail, OpOrder) else ()


def _order_explains(found: list[Finding]) -> list[Finding]:
    """Step 1: a group made in another order explains the mismatches in the groups of the
    names ranks hold apart (and, where it names a rank, the groups no other member recorded);
    a group's ops run in another order explains the mismatches in its window. Those findings
    are dropped: the order finding holds their ops (and their sides, with no majority)."""
    names: set[str] = set()
    spans: dict[str, tuple[int, int]] = {}
    unseen = False
    for f in found:
        if isinstance(f.detail, GroupOrder):
            names |= {c.name for c in f.detail.conflicts}
            unseen = unseen or f.severity == Severity.ERROR
        elif isinstance(f.detail, OpOrder) and f.group is not None:
            spans[f.group.name] = (f.detail.first, f.detail.last)
    if not names and not spans:
        return found

    def explained(f: Finding) -> bool:
        if f.kind == FindingKind.UNSEEN_MEMBERS:
            return unseen
        if f.kind in ORDER_KINDS or f.kind not in DESYNC_KINDS or f.group is None:
            return False
        first, last = spans.get(f.group.name, (1, 0))
        return f.group.name in names or (f.seq is not None and first <= f.seq <= last)

    return [f for f in found if not explained(f)]


def _skip_explains(found: list[Finding]) -> list[Finding]:
    """A rank that left a send or recv out (FR012 naming it) explains the members that never
    reached the collective after it: they are presumably blocked in the other half, so they
    are not culprits of "never joined" that collective (its waiting ranks wait on the rank
    that left it out)."""
    behind: dict[tuple[str, int], set[int]] = {}
    for f in found:
        if isinstance(f.detail, UnrecordedOps) and f.detail.skipped and f.group is not None:
            for k in f.detail.skipped:
                behind.setdefault((f.group.name, k.seq), set()).update(k.behind)
    if not behind:
        return found
    out = []
    for f in found:
        held = behind.get((f.group.name, f.seq or -1), set()) if f.group is not None else set()
        if f.kind != FindingKind.NEVER_JOINED or not set(f.culprit_ranks) & held:
            out.append(f)
        elif rest := tuple(r for r in f.culprit_ranks if r not in held):
            out.append(replace(f, culprit_ranks=rest))
    return out


def _stuck_explained(found: list[Finding]) -> list[Finding]:
    """An op that did not finish because members called different things is not also "stuck
    with matching arguments" (the same (group, seq) as a desync or split finding)."""
    explained = {
        (f.group.name, f.seq)
        for f in found
        if f.group is not None and f.kind != FindingKind.STUCK_IN_COLLECTIVE
    }
    return [
        f
        for f in found
        if f.kind != FindingKind.STUCK_IN_COLLECTIVE
        or f.group is None
        or (f.group.name, f.seq) not in explained
    ]


def _snapshot_is_not_a_hang(found: list[Finding]) -> list[Finding]:
    """A running job dumped at one instant (no dump time): its "one op behind" members are
    not culprits (step 5: cannot tell), the findings stay as warnings."""
    snapshot = {
        (f.group.name, f.seq)
        for f in found
        if f.kind == FindingKind.RUNNING_SNAPSHOT and f.group is not None
    }
    return [
        replace(f, severity=Severity.WARNING, confidence=Confidence.LOW)
        if f.kind == FindingKind.NEVER_JOINED
        and f.group is not None
        and (f.group.name, f.seq) in snapshot
        else f
        for f in found
    ]


def _job_against_entries(
    found: list[Finding], job: list[Finding], entries: list[Finding], facts: Facts
) -> tuple[list[Finding], list[Finding], list[Finding], list[Disagreement]]:
    """Step 2: what the job said against what the entries show. A first failure that came
    after the hang began is demoted; a rank the entries name whose failures are all symptoms
    of the first cause is its victim; where the two still name different ranks, both are
    named and the disagreement said."""
    disagreements: list[Disagreement] = []
    if not (job and entries):
        return found, job, entries, disagreements
    late, note = _after_the_hang_began(job, entries, facts)
    if note is not None:
        disagreements.append(note)
        demoted = [replace(f, severity=Severity.WARNING, confidence=Confidence.LOW) for f in late]
        found = [f for f in found if f not in late] + demoted
        job = [f for f in job if f not in late]
    if not job:
        return found, job, entries, disagreements
    victims = _victims_of_first_cause(facts)
    entries = [_without(f, victims) for f in entries]
    entries = [f for f in entries if f.culprit_ranks or f.kind in DESYNC_KINDS]
    named_by_job = {r for f in job for r in f.culprit_ranks}
    named_by_entries = {r for f in entries for r in f.culprit_ranks}
    if named_by_entries and named_by_job and named_by_entries != named_by_job:
        disagreements.append(
            NamedApart(
                by_job=tuple(sorted(named_by_job)), by_entries=tuple(sorted(named_by_entries))
            )
        )
    return found, job, entries, disagreements


def _decided(
    positive: list[Finding], something_wrong: bool, stragglers: tuple[Straggler, ...]
) -> Verdict:
    if {f.kind for f in positive} & DESYNC_KINDS:
        return Verdict.DESYNC
    if positive:
        return Verdict.HANG
    if something_wrong:
        return Verdict.CANNOT_TELL
    return Verdict.STRAGGLERS if stragglers else Verdict.HEALTHY


def _stacks_lend(f: Finding, facts: Facts) -> Finding:
    """Step 7: a finding of medium confidence whose culprits' stacks are where its entries
    put them is of high confidence; the waiting ranks' stacks alone are said, not raised."""
    if f.confidence != Confidence.MEDIUM or facts.classes is None:
        return f
    agree = stacks_agree(f, facts.sampled, facts.classes.classes)
    if agree is None:
        return f
    if agree == "waiting":
        return replace(f, stacks_agree=agree)
    return replace(f, confidence=Confidence.HIGH, stacks_agree=agree)


def _after_the_hang_began(
    job: list[Finding], entries: list[Finding], facts: Facts
) -> tuple[list[Finding], LaterFailure | None]:
    """First failures that cannot have started a hang the entries pin on another rank.

    The entries name a member (with a dump) that never joined, or never posted, the op its
    peers wait in; the job's first cause is on another rank, and either no file says when it
    happened, or it happened after the peers had begun to wait (their op was created more
    than ``TOGETHER_NS`` before it). A rank killed while waiting is then a later event, not
    the cause: the entries' culprit is named, the failure shown beside it.
    """
    named = {r for f in entries for r in f.culprit_ranks}
    waiting = sorted(
        {
            r
            for f in entries
            if f.kind
            in (FindingKind.NEVER_JOINED, FindingKind.P2P_UNMATCHED, FindingKind.NOT_STARTED)
            for r in f.waiting_ranks
            if r in facts.matched.blocked
        }
    )
    began: list[int] = []
    if waiting:
        created = facts.dumps.entries.column("time_created_ns")
        rows = [facts.matched.blocked[r].row for r in waiting]
        began = [t for t in created.take(rows).fill_null(0).to_pylist() if t > 0]
    late: list[Finding] = []
    for f in job:
        if f.kind != FindingKind.FIRST_FAILURE or set(f.culprit_ranks) & named:
            continue
        times = [x.at_ns for x in f.failures if x.rank in f.culprit_ranks and x.at_ns is not None]
        if not times or (began and min(times) > min(began) + TOGETHER_NS):
            late.append(f)
    if not late:
        return [], None
    return late, LaterFailure(
        failed=tuple(sorted({r for f in late for r in f.culprit_ranks})), named=tuple(sorted(named))
    )


def _victims_of_first_cause(facts: Facts) -> set[int]:
    """Ranks whose own failures are all symptoms at or after the first cause's time."""
    failures = facts.evidence.failures
    causes = [f.at_ns for f in failures if f.role == Role.CAUSE and f.at_ns is not None]
    if not causes:
        return set()
    t0 = min(causes)
    by_rank: dict[int, list[bool]] = {}
    for f in failures:
        if f.rank is None:
            continue
        after = f.role == Role.SYMPTOM and (f.at_ns is None or f.at_ns >= t0)
        by_rank.setdefault(f.rank, []).append(after)
    return {r for r, flags in by_rank.items() if flags and all(flags)}


def _without(f: Finding, victims: set[int]) -> Finding:
    if f.kind in DESYNC_KINDS or not set(f.culprit_ranks) & victims:
        return f
    return replace(f, culprit_ranks=tuple(r for r in f.culprit_ranks if r not in victims))
