"""Join the collected Python stacks with the verdict: where each culprit is, and whether the
ranks' stacks agree with what the Flight Recorder dumps say.

Flight Recorder shows a rank's *last* collective; a rank stuck in host code (a data loader on
a file system read, a checkpoint write, a deadlocked thread) looks the same whatever it is
doing. Its Python stack says where. For each culprit with a stack sample this adds a
``CulpritWhere`` and its frames (``CulpritStack``) to its findings (``report.wording`` adds
where it is to the finding's one-line summary, so every format shows it where the finding is
named, and its frames to the evidence), and a ``StackEvidence`` on the report: every rank's
stack in STAT-style classes and its reading (``detail.stacks``; ``report.words_stacks`` says
it): whether the outliers corroborate the verdict (the culprits are the ranks elsewhere) or
question it (an outlier that no finding explains, or a culprit with the same stack as the
ranks waiting on it); where no dump was read, what the stacks alone say (``StacksAlone``) and
the basis of a culprit they observe (``with_stack_basis``: its stack). It writes no sentence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.places import culprit_where
from frtrace.analysis.facts.signatures import call_site
from frtrace.analysis.series import stack_series
from frtrace.detail import NeverJoined, StackOutlier
from frtrace.detail.notes import NoStackFor, StackFileProblem
from frtrace.detail.stacks import (
    AlsoElsewhere,
    Corroborates,
    NoCulpritStack,
    NothingMore,
    NothingStandsOut,
    SharesWaitingStack,
    SinglesOut,
    StackReading,
    StacksAlone,
)
from frtrace.model import (
    Basis,
    CulpritStack,
    CulpritWhere,
    Finding,
    NamedAs,
    Report,
    Severity,
    StackEvidence,
    Verdict,
)
from frtrace.pystack.classes import StackClass
from frtrace.pystack.model import ProcessStacks
from frtrace.pystack.where import frame_label, where

__all__ = [
    "Named",
    "stack_evidence",
    "stack_notes",
    "stacks_agree",
    "with_stack_basis",
    "with_stacks",
]

_MAX_STACK_IN_EVIDENCE = 6  # frames in an evidence line (the JSON has them all)


def _joined(cw: CulpritWhere, sample: ProcessStacks) -> CulpritStack:
    thread = where(sample).thread
    frames = () if thread is None else tuple(f for f in thread.frames if not f.native)
    return CulpritStack(
        where=cw,
        frames=tuple(frame_label(f) for f in frames[:_MAX_STACK_IN_EVIDENCE]),
        more_frames=max(0, len(frames) - _MAX_STACK_IN_EVIDENCE),
    )


def _with_where(f: Finding, found: dict[int, tuple[CulpritWhere, ProcessStacks]]) -> Finding:
    mine = [found[r] for r in f.culprit_ranks if r in found]
    if not mine:
        return f
    wheres = tuple(cw for cw, _ in mine)
    return replace(f, where=wheres, stacks=tuple(_joined(cw, s) for cw, s in mine))


def _frame_key(frame: str) -> tuple[str, str] | None:
    """``train_step (/job/train.py:37)`` -> (``train_step``, ``train.py``)."""
    name, sep, rest = frame.partition(" (")
    if not sep or not rest.endswith(")"):
        return None
    path = rest[:-1].rsplit(":", 1)[0] if rest[:-1].rpartition(":")[2].isdigit() else rest[:-1]
    return name.rsplit(".", 1)[-1], path.replace("\\", "/").rsplit("/", 1)[-1]


def _in_op(w: CulpritWhere, op: str | None, stack: tuple[str, ...]) -> bool:
    """Is a rank's stack in this op: inside the torch.distributed call of that name, or its
    innermost frame of user code in the function that called it (the call site of the entry's
    recorded stack: an async op is waited on a few lines after it was issued)?"""
    if w.place == "collective" and w.library_call is not None and op is not None:
        called = w.library_call.partition(" (")[0].rsplit(".", 1)[-1]
        if called == op or op.startswith(called) or called.startswith(op):
            return True
    site = call_site(stack)
    if w.function is None or w.file is None or site is None:
        return False
    return _frame_key(site) == (w.function.rsplit(".", 1)[-1], w.file.rsplit("/", 1)[-1])


def stacks_agree(
    f: Finding,
    by_rank: Mapping[int, ProcessStacks],
    classes: tuple[StackClass, ...],
) -> Literal["waiting", "culprits", "both"] | None:
    """Whether the stacks agree with a finding: every waiting rank with a stack is in the op
    it waits in, or every culprit with a stack is where its entries put it (the op they name;
    host code, for a culprit that finished every op it recorded); never where a culprit has
    the same stack as a rank waiting on it (that questions the finding)."""
    class_of = {r: i for i, c in enumerate(classes) for r in c.ranks}
    culprits = [r for r in f.culprit_ranks if r in by_rank]
    waiting = [r for r in f.waiting_ranks if r in by_rank]
    waiting_classes = {class_of[r] for r in waiting if r in class_of}
    if any(class_of.get(r) in waiting_classes for r in culprits):
        return None
    expected = f.expected
    waits = bool(waiting) and expected is not None
    for r in waiting if waits else ():
        assert expected is not None
        waits = waits and _in_op(culprit_where(r, by_rank[r]), expected.op, expected.stack)
    in_theirs = bool(culprits)
    for r in culprits if in_theirs else ():
        w = culprit_where(r, by_rank[r])
        if isinstance(f.detail, NeverJoined):  # the entries say where: in host code
            in_theirs = in_theirs and r in f.detail.host and w.place == "host code"
        else:
            sig = f.actual.get(r)
            in_theirs = in_theirs and sig is not None and _in_op(w, sig.op, sig.stack)
    if waits and in_theirs:
        return "both"
    return "waiting" if waits else "culprits" if in_theirs else None


def _agreement(
    named: Named, classes: tuple[StackClass, ...], have: set[int]
) -> tuple[str, StackReading, tuple[int, ...]]:
    culprits = [r for r in named.culprits if r not in set(named.suspected)]
    waiting = set(named.victims)
    class_of = {r: i for i, c in enumerate(classes) for r in c.ranks}
    outliers = {r for c in classes if c.outlier for r in c.ranks}
    unexplained = tuple(sorted(outliers - set(culprits) - waiting))
    with_stack = [r for r in culprits if r in class_of]
    if not culprits:
        if named.verdict in (Verdict.HEALTHY, Verdict.STRAGGLERS) and not unexplained:
            return "no_culprit", NothingMore(), unexplained
        if unexplained:
            place = _class_text(classes[class_of[unexplained[0]]])
            return "no_culprit", SinglesOut(ranks=unexplained, place=place), unexplained
        return "no_culprit", NothingStandsOut(), ()
    if not with_stack:
        return "no_culprit_stack", NoCulpritStack(culprits=tuple(culprits)), unexplained
    waiting_classes = {class_of[r] for r in waiting if r in class_of}
    shared = [r for r in with_stack if class_of[r] in waiting_classes]
    if shared:
        place = _class_text(classes[class_of[shared[0]]])
        return "questions", SharesWaitingStack(culprits=tuple(shared), place=place), unexplained
    if unexplained:
        place = _class_text(classes[class_of[unexplained[0]]])
        also = AlsoElsewhere(culprits=tuple(with_stack), others=unexplained, place=place)
        return "questions", also, unexplained
    places = sorted({_class_text(classes[class_of[r]]) for r in with_stack})
    rest = have - set(with_stack)
    said = Corroborates(culprits=tuple(with_stack), places=tuple(places), others=len(rest))
    return "corroborates", said, unexplained


def _class_text(c: StackClass) -> str:
    return c.description


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """What the verdict named, which the stacks are held against."""

    verdict: Verdict
    culprits: tuple[int, ...]
    suspected: tuple[int, ...]
    victims: tuple[int, ...]


def with_stacks(
    findings: tuple[Finding, ...], culprits: tuple[int, ...], facts: Facts
) -> tuple[Finding, ...]:
    """Each finding with where the stacks put those of its culprits the verdict names
    (``culprits``): their place and frames."""
    by_rank = facts.sampled
    if not by_rank:
        return findings
    found = {r: (culprit_where(r, by_rank[r]), by_rank[r]) for r in culprits if r in by_rank}
    return tuple(_with_where(f, found) for f in findings)


def stack_evidence(facts: Facts, named: Named) -> StackEvidence | None:
    """Every rank's stack in STAT-style classes, held against what the verdict named; None
    without a stack sample."""
    by_rank, classes = facts.sampled, facts.classes
    if not by_rank or classes is None or facts.stacks is None:
        return None
    if facts.loaded:
        agreement, reading, unexplained = _agreement(named, classes.classes, set(by_rank))
    else:
        agreement, unexplained = "stacks_only", ()
        reading = _alone(named, classes.classes, set(by_rank), facts.dumps.world.size)
    sources = Counter(s.source for s in by_rank.values())
    return StackEvidence(
        classes=classes,
        ranks_with_stacks=tuple(sorted(by_rank)),
        sources=tuple(sorted(sources.items())),
        agreement=agreement,
        reading=reading,
        unexplained_ranks=unexplained,
        problems=tuple(p.message for p in facts.stacks.problems),
        series=stack_series(facts.stacks.samples),
    )


def _alone(
    named: Named, classes: tuple[StackClass, ...], have: set[int], world: int
) -> StacksAlone:
    """No dump was read: the culprits the stacks alone name (``rules.stack_outlier``), where
    they are and where the others wait; else the ranks without a stack and the stacks' places."""
    class_of = {r: c for c in classes for r in c.ranks}
    culprits = tuple(r for r in named.culprits if r in class_of)
    waiting = [class_of[r] for r in named.victims if r in class_of]
    return StacksAlone(
        named=culprits,
        place=_class_text(class_of[culprits[0]]) if culprits else None,
        waiting_in=_class_text(waiting[0]) if culprits and waiting else None,
        others=len(have - set(culprits)),
        missing=tuple(r for r in range(world) if r not in have),
        places=len(classes),
    )


def with_stack_basis(report: Report) -> Report:
    """The report with each culprit the stacks alone observe (no dump read; ``StackOutlier``'s
    ``stacks_only``) named on the basis of its stack: not inferred, nor observed by a dump."""
    seen = {
        r
        for f in report.findings
        if f.severity == Severity.ERROR
        and isinstance(f.detail, StackOutlier)
        and f.detail.stacks_only
        for r in f.culprit_ranks
    }
    if not seen:
        return report
    named = tuple(
        replace(n, basis=Basis.STACK, rests_on=(*n.rests_on, "its stack"))
        if n.rank in seen and n.role == NamedAs.CULPRIT
        else n
        for n in report.named_ranks
    )
    return replace(report, named_ranks=named)


def stack_notes(facts: Facts) -> tuple[NoStackFor | StackFileProblem, ...]:
    """What the stacks could not show: ranks without a sample, stack files not read."""
    if facts.stacks is None:
        return ()
    problems = tuple(StackFileProblem(message=p.message) for p in facts.stacks.problems)
    loaded = facts.dumps.loaded_ranks
    no_stack = [r for r in loaded if r not in facts.sampled]
    if not facts.sampled or not no_stack or len(no_stack) >= len(loaded):
        return problems
    return (NoStackFor(ranks=tuple(no_stack)), *problems)
