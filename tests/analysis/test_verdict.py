"""``analysis.verdict`` alone: the rules' findings, stated by hand, weighed against each other on
facts built without a dump on disk (``facts_builder``).

Pinned here: the precedence order of the module docstring (desync > what the job said and what
the entries show > a missing dump > the stacks > "something is wrong, nobody named" > healthy),
for each pair both ways round; who is a culprit, who only suspected, who presumed held up;
the job's word against the entries' (a later failure, a victim of the first cause, both named
apart); a running snapshot and an explained stuck op; what the stacks lend (step 7); and, on
every decision (``_decide``), the invariants: the input order never matters, the findings
come most severe first, a verdict names culprits exactly when it is a hang or a desync, and
every culprit is an error finding's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import pytest

from frtrace.analysis.facts import Facts
from frtrace.analysis.rules.first_failure import TOGETHER_NS
from frtrace.analysis.verdict import Decision, verdict
from frtrace.detail import InFlight, LaterFailure, NamedApart
from frtrace.detail.notes import StragglerBasis
from frtrace.evidence.model import Failure
from frtrace.model import (
    Confidence,
    Finding,
    FindingKind,
    GroupRef,
    OpSignature,
    Severity,
    Straggler,
    Verdict,
)
from tests.analysis.facts_builder import Job, cause, in_call, symptom

K = FindingKind
ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
HIGH, MEDIUM, LOW = Confidence.HIGH, Confidence.MEDIUM, Confidence.LOW

DESYNC_KINDS = (K.OP_MISMATCH, K.SIZE_MISMATCH, K.DTYPE_MISMATCH, K.SEQUENCE_SHIFT)
# the positive kinds of the entries (step 2) other than desync
ENTRY_KINDS = (K.NEVER_JOINED, K.NOT_STARTED, K.P2P_UNMATCHED, K.DEADLOCK)
# warnings that say something is wrong without naming anyone (step 5)
WRONG_UNNAMED = (
    K.STUCK_IN_COLLECTIVE,
    K.MISSING_DUMP,
    K.UNRECORDED_OPS,
    K.UNSEEN_MEMBERS,
    K.RUNNING_SNAPSHOT,
    K.NOTHING_RECORDED,
    K.NEVER_JOINED,
    K.P2P_UNMATCHED,
)

# The builder's default group of a world of 4 (``test_the_default_group_is_the_facts``)
G0 = GroupRef(name="0", desc="default_pg", members=(0, 1, 2, 3), inferred=False)
# groups only the findings name (verdict reads a finding's group for its members alone)
G013 = GroupRef(name="7", desc="g013", members=(0, 1, 3), inferred=False)
G012 = GroupRef(name="8", desc="g012", members=(0, 1, 2), inferred=False)

HANG_AT_S = 100.0  # when the waiting ranks of ``_hung`` entered all_reduce #7


def _sig(op: str) -> OpSignature:
    return OpSignature(
        op=op,
        input_sizes=((4,),),
        output_sizes=((4,),),
        input_dtypes=("Float",),
        output_dtypes=("Float",),
    )


def _f(
    kind: FindingKind,
    culprits: Sequence[int] = (),
    *,
    severity: Severity = ERROR,
    waiting: Sequence[int] = (),
    group: GroupRef | None = G0,
    seq: int | None = 7,
    confidence: Confidence = HIGH,
    failures: Sequence[Failure] = (),
    expected: OpSignature | None = None,
    actual: dict[int, OpSignature] | None = None,
) -> Finding:
    """A finding as a rule would state it. verdict.py never reads ``detail`` (the stacks read
    it for a NeverJoined only), so every finding carries the same placeholder."""
    return Finding(
        kind=kind,
        severity=severity,
        culprit_ranks=tuple(sorted(culprits)),
        waiting_ranks=tuple(sorted(waiting)),
        group=group,
        seq=seq,
        op=None if expected is None else expected.op,
        expected=expected,
        actual=actual or {},
        confidence=confidence,
        failures=tuple(failures),
        detail=InFlight(because="running"),
    )


STRAGGLER = Straggler(
    rank=1,
    collectives=20,
    last_share=0.9,
    median_late_ms=40.0,
    groups=("0",),
    corroborated=True,
    basis=StragglerBasis.CORROBORATED,
)


# --- facts -----------------------------------------------------------------------------------


@cache
def _quiet(failures: tuple[Failure, ...] = ()) -> Facts:
    """World of 4, every rank finished all_reduce #1-#3: nothing in the dumps says anything
    is wrong (no blocked rank); ``failures``: what the job's logs said."""
    return Job(world=4).done("all_reduce", range(1, 4)).facts(failures=failures)


@cache
def _hung(failures: tuple[Failure, ...] = ()) -> Facts:
    """World of 4: ranks 0, 1, 3 entered all_reduce #7 at ``HANG_AT_S``, rank 2 finished #6
    and never entered it (the wait graph: 0, 1, 3 -> 2, every blocked rank explained)."""
    job = Job(world=4).done("all_reduce", range(1, 7), at_s=HANG_AT_S - 1.0)
    job.enter("all_reduce", 7, ranks=(0, 1, 3), at_s=HANG_AT_S)
    return job.facts(failures=failures)


@cache
def _unexplained() -> Facts:
    """World of 2: rank 0 is blocked in group {0,1}'s #2, which rank 1 skipped (it has #1 and
    #3): rank 0 waits on no one the dumps show, a blocked rank nothing explains."""
    job = Job(world=2).done("all_reduce", range(1, 3))
    job.group("1", (0, 1))
    job.enter("all_reduce", 1, group="1", state="completed")
    job.enter("all_reduce", 3, group="1", ranks=(1,), state="completed")
    return job.enter("all_reduce", 2, group="1", ranks=(0,)).facts()


@cache
def _missing_3(free: bool) -> Facts:
    """World of 4, rank 3 left no dump; groups "1" and {1,3}. Group "1" is {0,1,2} and ranks
    0 and 1 entered its #1, or (``free``) it is {0,2} and rank 0 alone entered it (rank 1 is
    blocked nowhere); rank 2 never entered it."""
    job = Job(world=4, missing=(3,)).done("all_reduce", range(1, 3), ranks=(0, 1, 2))
    job.group("1", (0, 2) if free else (0, 1, 2))
    job.group("2", (1, 3))
    return job.enter("all_reduce", 1, group="1", ranks=(0,) if free else (0, 1)).facts()


@cache
def _stacked(culprit_call: str) -> Facts:
    """The quiet job with a Python stack per rank: 0, 1, 3 inside all_reduce, rank 2 inside
    ``culprit_call``."""
    calls = {0: "all_reduce", 1: "all_reduce", 2: culprit_call, 3: "all_reduce"}
    job = Job(world=4).done("all_reduce", range(1, 4))
    return job.facts(stacks={r: in_call(c) for r, c in calls.items()})


# --- the decision, and what holds of every decision ------------------------------------------


def _decide(
    found: Sequence[Finding], facts: Facts, stragglers: tuple[Straggler, ...] = ()
) -> Decision:
    """verdict() of the findings in the given order; the invariants every decision keeps."""
    d = verdict(list(found), facts, stragglers)
    # the order the rules reported in never matters (reversed, and rotated by one)
    assert verdict(list(reversed(found)), facts, stragglers) == d
    assert verdict([*found[1:], *found[:1]], facts, stragglers) == d
    assert list(d.findings) == sorted(d.findings, key=Finding.sort_key)  # most severe first
    # culprits exactly when a hang or a desync; each named by an error finding that is kept
    assert bool(d.culprits) == (d.verdict in (Verdict.HANG, Verdict.DESYNC))
    errors = {r for f in d.findings if f.severity == ERROR for r in f.culprit_ranks}
    assert set(d.culprits) <= errors
    assert d.culprits == tuple(sorted(set(d.culprits)))
    assert d.suspected == tuple(sorted(set(d.suspected)))
    # a presumed victim is neither named nor suspected
    assert not set(d.presumed) & (set(d.culprits) | set(d.suspected))
    if d.verdict in (Verdict.HEALTHY, Verdict.STRAGGLERS):
        assert (d.culprits, d.suspected, d.presumed) == ((), (), {})
    return d


def _kinds(d: Decision) -> list[tuple[FindingKind, Severity]]:
    return [(f.kind, f.severity) for f in d.findings]


def test_the_default_group_is_the_facts() -> None:
    """The findings' default group is the one the builder's facts hold (so "a member of the
    group" means the same to verdict's missing-dump check as to these tests)."""
    assert _quiet().membership.groups[0] == G0
    assert _hung().membership.groups[0] == G0


# --- step 1: desync before everything --------------------------------------------------------

# (the other finding, the culprits it adds, what is suspected, the disagreement said)
AGAINST_DESYNC = {
    "never_joined": (_f(K.NEVER_JOINED, (2,), waiting=(0, 1)), (2,), (), ()),
    "not_started": (_f(K.NOT_STARTED, (2,), waiting=(0, 1)), (2,), (), ()),
    "p2p_unmatched": (_f(K.P2P_UNMATCHED, (2,), waiting=(1,), seq=None), (2,), (), ()),
    "deadlock": (_f(K.DEADLOCK, (1, 2)), (1, 2), (), ()),
    "named_by_error": (
        _f(K.NAMED_BY_ERROR, (2,), group=None, seq=None),
        (2,),
        (),
        (NamedApart(by_job=(2,), by_entries=(3,)),),
    ),
    "first_failure_timed": (
        _f(K.FIRST_FAILURE, (2,), group=None, seq=None, failures=[cause(2, at_s=1.0)]),
        (2,),
        (),
        (NamedApart(by_job=(2,), by_entries=(3,)),),
    ),
    "first_failure_untimed": (  # no time: a later event, shown beside the desync (step 2)
        _f(K.FIRST_FAILURE, (2,), group=None, seq=None, failures=[cause(2)]),
        (),
        (),
        (LaterFailure(failed=(2,), named=(3,)),),
    ),
    "missing_dump": (_f(K.MISSING_DUMP, (2,), waiting=(0, 1), confidence=LOW), (), (2,), ()),
    "stack_outlier": (
        _f(K.STACK_OUTLIER, (2,), group=None, seq=None, confidence=MEDIUM),
        (),
        (),
        (),
    ),
}


@pytest.mark.parametrize("other", list(AGAINST_DESYNC))
@pytest.mark.parametrize("kind", DESYNC_KINDS)
def test_a_desync_wins_over_every_other_finding(kind: FindingKind, other: str) -> None:
    """Rank 3 desynced in group {0,1,3}; whatever else is seen (either order), the verdict is
    DESYNC with rank 3 named; the other positive findings name theirs beside it, a missing
    dump stays a suspicion, the stacks are dropped, and a job's word that differs is said."""
    finding, adds, suspected, said = AGAINST_DESYNC[other]
    desync = _f(kind, (3,), group=G013, seq=2)
    d = _decide([desync, finding], _quiet())
    assert d.verdict == Verdict.DESYNC
    assert d.culprits == tuple(sorted({3, *adds}))
    assert d.suspected == suspected
    assert d.disagreements == said
    assert desync in d.findings
    assert (K.STACK_OUTLIER in {f.kind for f in d.findings}) is False


@pytest.mark.parametrize("kind", DESYNC_KINDS)
def test_a_desync_warning_is_no_desync(kind: FindingKind) -> None:
    """A desync the rule could only warn of (no majority: members without a dump would
    settle it) names nobody: beside a never-joined it is a HANG on that rank, alone it is
    CANNOT_TELL (never HEALTHY, even with stragglers)."""
    warning = _f(kind, (3,), severity=WARNING, group=G013, seq=2, confidence=LOW)
    d = _decide([warning, _f(K.NEVER_JOINED, (2,), waiting=(0, 1))], _quiet())
    assert (d.verdict, d.culprits) == (Verdict.HANG, (2,))
    d = _decide([warning], _quiet(), (STRAGGLER,))
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.CANNOT_TELL, (), ())


# --- step 2 before steps 3 and 4: positive evidence names, a missing dump is a suspicion -----

POSITIVE = {
    **{k.value: _f(k, (2,), waiting=(0, 1), group=G012) for k in ENTRY_KINDS},
    "named_by_error": _f(K.NAMED_BY_ERROR, (2,), group=None, seq=None),
    "first_failure": _f(K.FIRST_FAILURE, (2,), group=None, seq=None, failures=[cause(2, 1.0)]),
    "unseen_members": _f(K.UNSEEN_MEMBERS, (2,), group=G012, seq=None),
}
# rank 3 without a dump, waited on by 0 and 1, in no group of a positive finding: suspected
MISSING_3 = _f(K.MISSING_DUMP, (3,), waiting=(0, 1), group=G013, seq=2, confidence=LOW)
OUTLIER_3 = _f(K.STACK_OUTLIER, (3,), group=None, seq=None, confidence=MEDIUM)


@pytest.mark.parametrize("weaker", ["missing_dump", "stack_outlier", "both"])
@pytest.mark.parametrize("positive", list(POSITIVE))
def test_positive_evidence_wins_over_a_missing_dump_and_the_stacks(
    positive: str, weaker: str
) -> None:
    """A positive finding naming rank 2, with a missing dump and/or a stack outlier naming
    rank 3 (either order): HANG on rank 2 alone; rank 3's missing dump is kept and suspected
    (not a culprit), its stack outlier dropped. Rank 2 named by elimination (unseen members)
    is suspected too (an inference, issue 50)."""
    found = {
        "missing_dump": [MISSING_3],
        "stack_outlier": [OUTLIER_3],
        "both": [MISSING_3, OUTLIER_3],
    }[weaker]
    d = _decide([POSITIVE[positive], *found], _quiet())
    assert (d.verdict, d.culprits) == (Verdict.HANG, (2,))
    inferred = (2,) if positive == "unseen_members" else ()
    assert d.suspected == inferred + ((3,) if weaker != "stack_outlier" else ())
    assert (MISSING_3 in d.findings) == (weaker != "stack_outlier")
    assert OUTLIER_3 not in d.findings
    assert POSITIVE[positive] in d.findings and d.disagreements == ()


@pytest.mark.parametrize("with_outlier", [False, True])
def test_a_missing_dump_names_its_rank_when_nothing_positive_does(with_outlier: bool) -> None:
    """Only a missing dump names anyone: HANG, rank 3 both the culprit and (named only from a
    missing dump) suspected; a stack outlier beside it is dropped (step 3 before step 4)."""
    found = [MISSING_3, OUTLIER_3] if with_outlier else [MISSING_3]
    d = _decide(found, _quiet())
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.HANG, (3,), (3,))
    assert d.findings == (MISSING_3,)


@pytest.mark.parametrize("kind", [K.FIRST_FAILURE, K.NAMED_BY_ERROR])
def test_a_rank_without_a_dump_the_job_names_is_a_culprit_not_a_suspect(kind: FindingKind) -> None:
    """Rank 3 left no dump and its peers wait on it; the job's logs name it too: HANG on
    rank 3, named (positive evidence), so no longer only suspected."""
    job = _f(kind, (3,), group=None, seq=None, failures=[cause(3, 1.0)])
    d = _decide([job, MISSING_3], _quiet())
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.HANG, (3,), ())
    assert MISSING_3 in d.findings


def test_a_warning_missing_dump_is_suspected_but_names_nobody() -> None:
    """A missing dump the rule only warns of (the op was stopped): CANNOT_TELL, rank 3
    suspected, nobody named."""
    warning = _f(K.MISSING_DUMP, (3,), severity=WARNING, waiting=(0, 1), confidence=LOW)
    d = _decide([warning], _quiet())
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.CANNOT_TELL, (), (3,))


# --- step 3: a missing rank presumed held up by a named culprit ------------------------------


def test_a_missing_rank_in_the_group_of_a_named_culprit_is_presumed_held_up() -> None:
    """Rank 2 never joined #7 of the default group; rank 3 (no dump, a member of it) is
    presumed stuck in that same op: not suspected, its finding gone, the presumption said
    with the group and who holds it up."""
    d = _decide([_f(K.NEVER_JOINED, (2,), waiting=(0, 1)), MISSING_3], _quiet())
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.HANG, (2,), ())
    assert d.presumed == {3: (G0.label, (2,), None)}
    assert K.MISSING_DUMP not in {f.kind for f in d.findings}


def test_only_the_missing_ranks_outside_the_culprits_group_stay_suspected() -> None:
    """One missing-dump finding for ranks 1 and 3; the culprit's group is {0,1,2}: rank 1 is
    presumed held up, rank 3 stays suspected, its finding now naming rank 3 alone."""
    missing = _f(K.MISSING_DUMP, (1, 3), waiting=(0,), group=G0, seq=9, confidence=LOW)
    d = _decide([_f(K.NEVER_JOINED, (2,), waiting=(0,), group=G012), missing], _quiet())
    assert (d.culprits, d.suspected) == ((2,), (3,))
    assert d.presumed == {1: (G012.label, (2,), None)}
    (left,) = [f for f in d.findings if f.kind == K.MISSING_DUMP]
    assert left.culprit_ranks == (3,)


@pytest.mark.parametrize(("free", "presumed"), [(False, True), (True, False)])
def test_a_missing_rank_whose_peers_are_all_held_up_is_presumed(free: bool, presumed: bool) -> None:
    """Rank 3 (no dump) is in no group of the culprit's; its peers with a dump are 0 and 1
    (the default group and {1,3}). Rank 2 never joined group "1"'s #1. Where 0 and 1 both
    wait in it, every peer is held up by rank 2: rank 3 cannot have got further, presumed
    held up ("groups with ranks ..."). Where rank 1 is free (not in group "1"), rank 3 may be
    what keeps it: suspected."""
    facts = _missing_3(free)
    waiting = (0,) if free else (0, 1)
    assert facts.waits.roots == (2,)
    assert {e.waiter for e in facts.waits.edges} == set(waiting)
    group = facts.membership.groups[1]
    assert group.name == "1" and 3 not in group.members
    never = _f(K.NEVER_JOINED, (2,), waiting=waiting, group=group, seq=1)
    missing = _f(K.MISSING_DUMP, (3,), waiting=(), group=None, seq=None, confidence=LOW)
    d = _decide([never, missing], facts)
    assert (d.verdict, d.culprits) == (Verdict.HANG, (2,))
    if presumed:
        assert d.suspected == () and set(d.presumed) == {3}
        where, by, symptom = d.presumed[3]
        assert symptom is None
        assert where.startswith("groups with ranks") and by == (2,)
        assert K.MISSING_DUMP not in {f.kind for f in d.findings}
    else:
        assert (d.suspected, d.presumed) == ((3,), {})
        assert missing in d.findings


# --- step 4: the stacks only where something is wrong and nobody is named --------------------

# what says something is wrong without naming anyone: a warning finding, or the facts
WRONG = {
    **{
        f"warning:{k.value}": (
            [_f(k, (2,) if k == K.NEVER_JOINED else (), severity=WARNING)],
            _quiet,
        )
        for k in WRONG_UNNAMED
        if k != K.MISSING_DUMP  # a missing dump (an error or not) keeps the stacks out
    },
    "failure_reported": ([], lambda: _quiet((cause(1, 5.0),))),
    "blocked_unexplained": ([], _unexplained),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_stacks_name_a_culprit_only_where_something_is_wrong(wrong: str) -> None:
    """A stack outlier on rank 1 beside what says something is wrong (a warning of each kind
    that names nobody, a failure in the job's logs, a blocked rank nothing explains): HANG,
    rank 1 named by its stack, suspected (the stacks alone are an inference); without it,
    CANNOT_TELL."""
    found, facts = WRONG[wrong]
    outlier = _f(K.STACK_OUTLIER, (1,), group=None, seq=None, confidence=MEDIUM)
    d = _decide([*found, outlier], facts())
    assert (d.verdict, d.culprits, d.suspected) == (Verdict.HANG, (1,), (1,))
    assert outlier in d.findings
    d = _decide(found, facts(), (STRAGGLER,))
    assert (d.verdict, d.culprits) == (Verdict.CANNOT_TELL, ())


def test_the_stacks_alone_are_a_running_jobs_ordinary_picture() -> None:
    """A stack outlier and nothing wrong: dropped, HEALTHY."""
    d = _decide([_f(K.STACK_OUTLIER, (1,), group=None, seq=None, confidence=MEDIUM)], _quiet())
    assert (d.verdict, d.findings) == (Verdict.HEALTHY, ())


# --- steps 5 and 6: cannot tell, never healthy; healthy only when nothing is wrong -----------


@pytest.mark.parametrize("stragglers", [(), (STRAGGLER,)], ids=["no-stragglers", "stragglers"])
@pytest.mark.parametrize("kind", [*WRONG_UNNAMED, *DESYNC_KINDS])
def test_a_warning_that_names_nobody_is_cannot_tell_never_healthy(
    kind: FindingKind, stragglers: tuple[Straggler, ...]
) -> None:
    """Each warning that says something is wrong (a never-joined the rule demoted, a desync
    without a majority, a stuck op, unrecorded ops...): CANNOT_TELL with nobody named, with
    stragglers or not; the warning kept."""
    warning = _f(kind, (2,), severity=WARNING, confidence=LOW)
    d = _decide([warning], _quiet(), stragglers)
    assert (d.verdict, d.culprits) == (Verdict.CANNOT_TELL, ())
    assert d.suspected == ((2,) if kind == K.MISSING_DUMP else ())
    assert d.findings == (warning,)


@pytest.mark.parametrize(
    "facts", [lambda: _quiet((cause(1, 5.0),)), _unexplained], ids=["failure", "unexplained"]
)
def test_the_facts_alone_can_say_something_is_wrong(facts: Callable[[], Facts]) -> None:
    """No finding at all, but a failure in the job's logs, or a blocked rank nothing
    explains: CANNOT_TELL, never HEALTHY."""
    assert _decide([], facts(), (STRAGGLER,)).verdict == Verdict.CANNOT_TELL


@pytest.mark.parametrize(
    ("found", "stragglers", "want"),
    [
        ([], (), Verdict.HEALTHY),
        ([], (STRAGGLER,), Verdict.STRAGGLERS),
        ([_f(K.IN_FLIGHT, (), severity=INFO, waiting=(0, 1, 2, 3))], (), Verdict.HEALTHY),
        ([_f(K.IN_FLIGHT, (), severity=INFO, waiting=(0, 1))], (STRAGGLER,), Verdict.STRAGGLERS),
    ],
    ids=["nothing", "stragglers", "in-flight", "in-flight+stragglers"],
)
def test_healthy_only_when_nothing_points_to_a_hang(
    found: list[Finding], stragglers: tuple[Straggler, ...], want: Verdict
) -> None:
    """Nothing found, or only an op in flight in a running job: HEALTHY, or
    HEALTHY_WITH_STRAGGLERS where ranks were consistently late; the info finding kept."""
    d = _decide(found, _quiet(), stragglers)
    assert d.verdict == want
    assert list(d.findings) == found


def test_the_order_of_precedence_step_by_step() -> None:
    """Everything at once, then the strongest taken away one at a time: desync (rank 3),
    never-joined (2), missing dump (0), stack outlier (1), a stuck op, stragglers. Each step
    down the verdict and the named ranks are those of the next step of the order."""
    desync = _f(
        K.OP_MISMATCH,
        (3,),
        group=GroupRef(name="a", desc=None, members=(1, 3), inferred=False),
        seq=2,
    )
    never = _f(
        K.NEVER_JOINED,
        (2,),
        waiting=(1,),
        group=GroupRef(name="b", desc=None, members=(1, 2), inferred=False),
        seq=3,
    )
    missing = _f(K.MISSING_DUMP, (0,), waiting=(1,), group=None, seq=None, confidence=LOW)
    outlier = _f(K.STACK_OUTLIER, (1,), group=None, seq=None, confidence=MEDIUM)
    stuck = _f(K.STUCK_IN_COLLECTIVE, (), severity=WARNING, waiting=(0, 1, 2, 3), seq=9)
    ladder: list[
        tuple[list[Finding], tuple[Straggler, ...], Verdict, tuple[int, ...], tuple[int, ...]]
    ] = [
        ([desync, never, missing, outlier, stuck], (STRAGGLER,), Verdict.DESYNC, (2, 3), (0,)),
        ([never, missing, outlier, stuck], (STRAGGLER,), Verdict.HANG, (2,), (0,)),
        ([missing, outlier, stuck], (STRAGGLER,), Verdict.HANG, (0,), (0,)),
        ([outlier, stuck], (STRAGGLER,), Verdict.HANG, (1,), (1,)),
        ([stuck], (STRAGGLER,), Verdict.CANNOT_TELL, (), ()),
        ([], (STRAGGLER,), Verdict.STRAGGLERS, (), ()),
        ([], (), Verdict.HEALTHY, (), ()),
    ]
    got = [
        (d.verdict, d.culprits, d.suspected)
        for d in (_decide(found, _quiet(), s) for found, s, *_ in ladder)
    ]
    assert got == [(v, c, s) for *_, v, c, s in ladder]


# --- a running snapshot; a stuck op a desync explains ----------------------------------------


@pytest.mark.parametrize(
    ("group", "seq", "demoted"),
    [(G0, 7, True), (G0, 8, False), (G012, 7, False)],
    ids=["same-op", "other-seq", "other-group"],
)
def test_a_never_joined_in_a_running_snapshot_is_only_a_warning(
    group: GroupRef, seq: int, demoted: bool
) -> None:
    """A running-snapshot warning at the never-joined's very (group, seq): rank 2 is one op
    behind in a running job, not a culprit (a low-confidence warning, CANNOT_TELL). At
    another seq or group the never-joined stands (HANG on rank 2)."""
    never = _f(K.NEVER_JOINED, (2,), waiting=(0, 1, 3))
    snapshot = _f(K.RUNNING_SNAPSHOT, (), severity=WARNING, group=group, seq=seq, confidence=LOW)
    d = _decide([never, snapshot], _quiet())
    (kept,) = [f for f in d.findings if f.kind == K.NEVER_JOINED]
    if demoted:
        assert (d.verdict, d.culprits) == (Verdict.CANNOT_TELL, ())
        assert (kept.severity, kept.confidence) == (WARNING, LOW)
        assert kept.culprit_ranks == (2,)  # still says who is behind
    else:
        assert (d.verdict, d.culprits) == (Verdict.HANG, (2,))
        assert kept == never


@pytest.mark.parametrize("kind", DESYNC_KINDS)
@pytest.mark.parametrize(("seq", "dropped"), [(7, True), (8, False)], ids=["same-op", "other-op"])
def test_a_stuck_op_a_desync_explains_is_not_also_stuck(
    kind: FindingKind, seq: int, dropped: bool
) -> None:
    """Members called different things at #7: the op did not finish because of that, so a
    "stuck with matching arguments" at #7 is dropped; one at #8 is kept."""
    stuck = _f(K.STUCK_IN_COLLECTIVE, (), severity=WARNING, waiting=(0, 1, 2, 3), seq=seq)
    d = _decide([_f(kind, (3,)), stuck], _quiet())
    assert (d.verdict, d.culprits) == (Verdict.DESYNC, (3,))
    assert (stuck in d.findings) is not dropped


# --- step 2: what the job said against what the entries show ---------------------------------

NEVER_2 = _f(K.NEVER_JOINED, (2,), waiting=(0, 1, 3))


@pytest.mark.parametrize(
    ("at_s", "late"),
    [
        (None, True),  # no file says when: cannot have started the hang the entries pin
        (HANG_AT_S - 30.0, False),  # before the peers began to wait
        (HANG_AT_S + 0.5 * TOGETHER_NS / 1e9, False),  # together with it
        (HANG_AT_S + 2.0 * TOGETHER_NS / 1e9, True),  # after the peers had been waiting
    ],
    ids=["untimed", "before", "together", "after"],
)
def test_a_first_failure_after_the_hang_began_is_a_later_event(
    at_s: float | None, late: bool
) -> None:
    """Rank 1 failed on its own; the entries say rank 2 never joined the op 0, 1, 3 wait in.
    A failure with no time, or more than TOGETHER_NS after they began to wait, is demoted to a
    low-confidence warning (rank 2 alone named, the later failure said); one before or
    together with it stands: both named, and that they name different ranks said."""
    failure = cause(1, at_s)
    first = _f(K.FIRST_FAILURE, (1,), group=None, seq=None, failures=[failure])
    d = _decide([first, NEVER_2], _hung((failure,)))
    assert d.verdict == Verdict.HANG
    (kept,) = [f for f in d.findings if f.kind == K.FIRST_FAILURE]
    if late:
        assert d.culprits == (2,)
        assert (kept.severity, kept.confidence) == (WARNING, LOW)
        assert d.disagreements == (LaterFailure(failed=(1,), named=(2,)),)
    else:
        assert d.culprits == (1, 2)
        assert kept == first
        assert d.disagreements == (NamedApart(by_job=(1,), by_entries=(2,)),)


def test_an_error_message_naming_a_rank_is_never_a_later_event() -> None:
    """An error message names rank 1 (no time): only a first failure can come too late, so
    both rank 1 and the entries' rank 2 are named, apart."""
    named = _f(K.NAMED_BY_ERROR, (1,), group=None, seq=None)
    d = _decide([named, NEVER_2], _hung())
    assert (d.verdict, d.culprits) == (Verdict.HANG, (1, 2))
    assert d.disagreements == (NamedApart(by_job=(1,), by_entries=(2,)),)


@pytest.mark.parametrize("kind", [K.FIRST_FAILURE, K.NAMED_BY_ERROR])
def test_the_job_and_the_entries_naming_the_same_rank_agree(kind: FindingKind) -> None:
    """The job's word and the entries both name rank 2: named once, nothing to say."""
    job = _f(kind, (2,), group=None, seq=None, failures=[cause(2, HANG_AT_S - 30.0)])
    d = _decide([job, NEVER_2], _hung((cause(2, HANG_AT_S - 30.0),)))
    assert (d.verdict, d.culprits, d.disagreements) == (Verdict.HANG, (2,), ())


@pytest.mark.parametrize(
    ("rank_2_said", "victim"),
    [
        ((symptom(2, HANG_AT_S - 10.0),), True),  # timed out after rank 1's fault
        ((symptom(2),), True),  # a symptom at no known time
        ((symptom(2, HANG_AT_S - 40.0),), False),  # its symptom came before the first cause
        ((symptom(2, HANG_AT_S - 10.0), cause(2, HANG_AT_S - 5.0)), False),  # a fault of its own
    ],
    ids=["symptom-after", "symptom-untimed", "symptom-before", "own-cause"],
)
def test_a_rank_the_entries_name_whose_failures_are_all_symptoms_is_a_victim(
    rank_2_said: tuple[Failure, ...], victim: bool
) -> None:
    """Rank 1's fault came first (30 s before the hang); the entries name rank 2. If rank 2's
    own failures are all symptoms at or after that, it is rank 1's victim: the entries'
    finding names no one and is gone, rank 1 alone is named. Otherwise both are named, apart."""
    first_cause = cause(1, HANG_AT_S - 30.0)
    facts = _hung((first_cause, *rank_2_said))
    first = _f(K.FIRST_FAILURE, (1,), group=None, seq=None, failures=[first_cause])
    d = _decide([first, NEVER_2], facts)
    assert d.verdict == Verdict.HANG
    if victim:
        assert (d.culprits, d.disagreements) == ((1,), ())
        assert [f.kind for f in d.findings] == [K.FIRST_FAILURE]
    else:
        assert d.culprits == (1, 2)
        assert d.disagreements == (NamedApart(by_job=(1,), by_entries=(2,)),)


@pytest.mark.parametrize("kind", DESYNC_KINDS)
def test_a_desync_is_never_cleared_as_a_victim(kind: FindingKind) -> None:
    """Rank 2 desynced; its only failure is a symptom after rank 1's first cause: it still
    called the wrong thing, so it stays named (DESYNC on 1 and 2)."""
    first_cause = cause(1, HANG_AT_S - 30.0)
    facts = _hung((first_cause, symptom(2, HANG_AT_S - 10.0)))
    first = _f(K.FIRST_FAILURE, (1,), group=None, seq=None, failures=[first_cause])
    d = _decide([first, _f(kind, (2,))], facts)
    assert (d.verdict, d.culprits) == (Verdict.DESYNC, (1, 2))


def test_only_the_victims_are_taken_off_a_finding() -> None:
    """A deadlock names ranks 2 and 3; rank 3's failures are symptoms after rank 1's cause:
    the deadlock keeps rank 2 only, and rank 1 and rank 2 are named."""
    first_cause = cause(1, HANG_AT_S - 30.0)
    facts = _hung((first_cause, symptom(3, HANG_AT_S - 10.0)))
    first = _f(K.FIRST_FAILURE, (1,), group=None, seq=None, failures=[first_cause])
    d = _decide([first, _f(K.DEADLOCK, (2, 3))], facts)
    assert d.culprits == (1, 2)
    (deadlock,) = [f for f in d.findings if f.kind == K.DEADLOCK]
    assert deadlock.culprit_ranks == (2,)


# --- step 7: what the stacks lend -----------------------------------------------------------


@pytest.mark.parametrize(
    ("confidence", "culprit_call", "culprit_sig", "want_confidence", "want_agree"),
    [
        (MEDIUM, "broadcast", "broadcast", HIGH, "both"),  # waiting and culprit where said
        (MEDIUM, "broadcast", None, MEDIUM, "waiting"),  # the waiting ranks' alone: said only
        (MEDIUM, "all_reduce", "all_reduce", MEDIUM, None),  # the culprit looks like its waiters
        (HIGH, "broadcast", "broadcast", HIGH, None),  # nothing to raise
        (LOW, "broadcast", "broadcast", LOW, None),  # rests on missing data: not raised
    ],
    ids=["both", "waiting-only", "culprit-shares-stack", "high", "low"],
)
def test_the_stacks_lend_confidence_but_never_change_who_is_named(
    confidence: Confidence,
    culprit_call: str,
    culprit_sig: str | None,
    want_confidence: Confidence,
    want_agree: str | None,
) -> None:
    """Ranks 0, 1, 3 wait in all_reduce; rank 2's GPU never started it and its stack is in
    ``culprit_call``. A medium finding whose waiting ranks' and culprit's stacks are where
    the entries put them is raised to high; the waiting ranks' alone are said, not raised;
    a culprit with its waiters' stack lends nothing. The verdict and the named ranks are
    those without stacks."""
    actual = {} if culprit_sig is None else {2: _sig(culprit_sig)}
    found = _f(
        K.NOT_STARTED,
        (2,),
        waiting=(0, 1, 3),
        confidence=confidence,
        expected=_sig("all_reduce"),
        actual=actual,
    )
    d = _decide([found], _stacked(culprit_call))
    (f,) = d.findings
    assert (f.confidence, f.stacks_agree) == (want_confidence, want_agree)
    bare = _decide([found], _quiet())
    assert bare.findings == (found,)
    assert (d.verdict, d.culprits, d.suspected) == (bare.verdict, bare.culprits, bare.suspected)


@pytest.mark.parametrize("first", ["cause", "symptom"])
def test_a_missing_rank_stopped_after_an_observed_first_cause_is_presumed_a_victim(
    first: str,
) -> None:
    """Rank 2 crashed first (its own cause); rank 3 left no dump, and its only failure is a
    symptom (a timeout after it): its dump was lost to rank 2's cause, not suspected. Where
    rank 2's failure is a symptom too, no first cause is observed: rank 3 stays suspected."""
    failures = (
        (cause(2, 10.0) if first == "cause" else symptom(2, 10.0)),
        symptom(3, 12.0),
    )
    facts = _quiet(failures)
    f013 = _f(K.FIRST_FAILURE, (2,), waiting=(0, 1), group=None, seq=None, confidence=MEDIUM)
    missing = _f(K.MISSING_DUMP, (3,), waiting=(0, 1), group=None, seq=None, confidence=LOW)
    d = _decide([f013, missing], facts)
    if first == "cause":
        assert d.suspected == () and d.presumed == {3: ("", (2,), "timeout")}
    else:
        assert d.suspected == (3,) and not d.presumed
