"""The result of an analysis: findings, stragglers, culprits, a verdict. Reporters read only this.

Every finding has a stable ``kind``, its code (``FR001``...) its place in ``FindingKind``:
the table of codes, what each means and whether it observes the ranks it names is
docs/json-report.md; a code is never reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Literal

from frtrace.detail import CulpritStack, CulpritWhere, Detail, Disagreement, GroupRef, OpSignature
from frtrace.detail.notes import DataNote, PresumedHeldUp, StragglerBasis
from frtrace.detail.series import StackSeries
from frtrace.detail.stacks import StackReading
from frtrace.evidence.model import Failure, FailureKind
from frtrace.pystack.classes import StackClasses

__all__ = [
    "KIND_CODES",
    "OBSERVED_KINDS",
    "AttemptSummary",
    "Basis",
    "Confidence",
    "CulpritStack",
    "CulpritWhere",
    "Detail",
    "Disagreement",
    "Finding",
    "FindingKind",
    "GroupProgress",
    "GroupRef",
    "History",
    "NamedAs",
    "NamedRank",
    "OpSignature",
    "RankProcess",
    "RepeatOffender",
    "Report",
    "Severity",
    "StackEvidence",
    "Straggler",
    "Verdict",
    "named_ranks",
]


class Severity(IntEnum):
    """How much a finding matters; ERROR findings make the exit code 1."""

    INFO = 0  # worth knowing, not a problem
    WARNING = 1  # suspicious, or a problem the dumps cannot pin on a rank
    ERROR = 2  # a hang or desync with named ranks


class Confidence(StrEnum):
    """How sure a finding is; ``why`` on the finding says what it rests on."""

    HIGH = "high"  # direct evidence from every rank involved
    MEDIUM = "medium"  # direct evidence, but some ranks' data is missing or inferred
    LOW = "low"  # inferred from missing data


class FindingKind(StrEnum):
    """What is wrong; its code is its place (``KIND_CODES``), never reused."""

    NEVER_JOINED = "never_joined"  # FR001 blocked in a collective some members never entered
    OP_MISMATCH = "op_mismatch"  # FR002 members entered different collectives at one seq
    SIZE_MISMATCH = "size_mismatch"  # FR003 sizes the op's rules do not allow
    DTYPE_MISMATCH = "dtype_mismatch"  # FR004 different dtypes
    NOT_STARTED = "not_started"  # FR005 enqueued, its GPU never started it (NCCL timing)
    P2P_UNMATCHED = "p2p_unmatched"  # FR006 a send/recv whose peer never posted its op
    DEADLOCK = "deadlock"  # FR007 ranks wait on each other in a cycle
    MISSING_DUMP = "missing_dump"  # FR008 no dump, its peers wait on it (inferred)
    STUCK_IN_COLLECTIVE = "stuck_in_collective"  # FR009 all entered, none finished (below FR)
    IN_FLIGHT = "in_flight"  # FR010 all entered, not finished when dumped
    SEQUENCE_SHIFT = "sequence_shift"  # FR011 skipped or added a collective
    UNRECORDED_OPS = "unrecorded_ops"  # FR012 ops counted, not written (Gloo's p2p)
    FIRST_FAILURE = "first_failure"  # FR013 a rank's own failure came first
    NAMED_BY_ERROR = "named_by_error"  # FR014 an error message names the ranks
    STACK_OUTLIER = "stack_outlier"  # FR015 in host code while the others wait (stacks)
    UNSEEN_MEMBERS = "unseen_members"  # FR016 blocked in a group no other member recorded
    RUNNING_SNAPSHOT = "running_snapshot"  # FR017 one op behind in several groups at once
    NOTHING_RECORDED = "nothing_recorded"  # FR018 no rank recorded any op
    GROUP_ORDER = "group_order"  # FR019 made its groups in another order
    OP_ORDER = "op_order"  # FR020 ran a group's ops in another order


KIND_CODES: dict[FindingKind, str] = {
    kind: f"FR{i:03d}" for i, kind in enumerate(FindingKind, start=1)
}


class Verdict(StrEnum):
    """The one-word answer."""

    HEALTHY = "healthy"  # nothing wrong found
    STRAGGLERS = "healthy_with_stragglers"  # completed, but some ranks were consistently late
    HANG = "hang"  # ranks are blocked waiting on named ranks
    DESYNC = "desync"  # ranks called different collectives / sizes / dtypes
    CANNOT_TELL = "cannot_tell"  # something is wrong but the dumps do not show who caused it


class NamedAs(StrEnum):
    """What the report names a rank as (``Report.named_ranks``), strongest first."""

    CULPRIT = "culprit"  # a root cause (``culprit_ranks``, not suspected)
    SUSPECTED = "suspected"  # a culprit inferred only from its missing dump (``suspected_ranks``)
    PRESUMED_HELD_UP = "presumed_held_up"  # no dump; its peers wait on culprits: a victim
    STRAGGLER = "straggler"  # consistently the last to arrive (``stragglers``)


class Basis(StrEnum):
    """What naming a rank rests on (issue 50, naming discipline)."""

    OBSERVED = "observed"  # the dumps show it, or the job's own words say it
    INFERRED = "inferred"  # an absence, timing or a heuristic
    STACK = "stack"  # no dump read: its stack is outside the one collective all others are in
    RAS = "ras"  # an inference NCCL RAS backs: it saw the rank's process dead or unreachable


# The finding kinds that observe the ranks they name. From the entries (only of a rank with a
# dump): it never joined while others wait, called a mismatching op (or a shifted sequence),
# its GPU never started the op, it never posted the peer's op, a cycle of blocked ranks. From
# the job's own words: its own first failure, a torch check that says it never arrived
# (monitored_barrier). Every other kind is an inference: a missing dump (FR008), the stacks
# (FR015; with no dump read, its stack observes it: Basis.STACK), a group's unseen members
# named by elimination (FR016), and the kinds that name no one (FR009, FR010, FR012, FR017, FR018).
ENTRIES_OBSERVE = frozenset(
    {
        FindingKind.NEVER_JOINED,
        FindingKind.OP_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.NOT_STARTED,
        FindingKind.P2P_UNMATCHED,
        FindingKind.DEADLOCK,
        FindingKind.SEQUENCE_SHIFT,
    }
) | {FindingKind.GROUP_ORDER, FindingKind.OP_ORDER}  # its own entries: its groups, its order
ENTRIES_OBSERVE |= {FindingKind.UNRECORDED_OPS}  # its own count of the send/recv it ran
JOB_OBSERVES = frozenset({FindingKind.FIRST_FAILURE, FindingKind.NAMED_BY_ERROR})
OBSERVED_KINDS = ENTRIES_OBSERVE | JOB_OBSERVES


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedRank:
    """A rank the report names, as what, on what basis, and the facts that rests on."""

    rank: int
    role: NamedAs
    basis: Basis
    # finding codes (``FR001``) of the findings that name it, then short facts ("no dump")
    rests_on: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackEvidence:
    """Every rank's current stack, grouped into STAT-style classes, against the verdict."""

    classes: StackClasses
    ranks_with_stacks: tuple[int, ...]
    sources: tuple[tuple[str, int], ...]  # (source, ranks read from it), by source name
    # "corroborates": the culprits are the outliers; "questions": an outlier is not a
    # culprit, or a culprit shares the waiting ranks' stack; "no_culprit": the dumps name
    # none; "no_culprit_stack": no stack for any culprit
    agreement: str
    reading: StackReading  # which, and why (``report.words_stacks`` says it in one sentence)
    unexplained_ranks: tuple[int, ...] = ()  # outliers neither culprit nor waiting
    problems: tuple[str, ...] = ()  # stack files that could not be read, one line each
    series: StackSeries | None = None  # periodic samples over time: which ranks moved


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One thing wrong, with the ranks it blames and the ranks it holds up.

    ``detail`` is what the rule saw, typed per kind; ``report.wording`` says it (the summary,
    why and evidence lines every reporter shows).
    """

    kind: FindingKind
    severity: Severity
    culprit_ranks: tuple[int, ...]  # root-cause ranks of this finding, sorted
    detail: Detail
    waiting_ranks: tuple[int, ...] = ()  # ranks directly blocked by it, sorted
    group: GroupRef | None = None
    seq: int | None = None
    op: str | None = None
    expected: OpSignature | None = None  # what the majority did
    actual: dict[int, OpSignature] = field(default_factory=dict)  # what each culprit did
    confidence: Confidence = Confidence.HIGH
    cycle: tuple[int, ...] = ()  # deadlock: ranks in wait order, r0 waits on r1 ...
    where: tuple[CulpritWhere, ...] = ()  # each culprit with a collected stack, by rank
    stacks: tuple[CulpritStack, ...] = ()  # the culprits' stacks joined to it, by rank
    failures: tuple[Failure, ...] = ()  # what the job's logs and sidecars said, as evidence
    # the Python stacks agree with it (and raised its confidence): the waiting ranks' stacks
    # are in the op they wait in, the culprits' in the op the entries name, or both
    stacks_agree: Literal["waiting", "culprits", "both"] | None = None

    @property
    def code(self) -> str:
        """Stable code, e.g. FR001."""
        return KIND_CODES[self.kind]

    def sort_key(self) -> tuple[int, str, str, int, tuple[int, ...]]:
        """Most severe first, then by code, group and sequence, for deterministic output."""
        group = self.group.name if self.group else ""
        return (
            -self.severity,
            self.code,
            group,
            -1 if self.seq is None else self.seq,
            self.culprit_ranks,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Straggler:
    """A rank that arrived last at most collectives it completed."""

    rank: int
    collectives: int  # completed collectives with arrival times from every member
    last_share: float  # fraction of those where this rank arrived last
    median_late_ms: float  # median of how much later it arrived than the next-latest member, ms
    groups: tuple[str, ...]  # group names where it was late
    corroborated: bool  # host-local timing (duration, completion) agrees: not clock skew
    basis: StragglerBasis  # what that rests on (``report.words_notes.straggler_note`` says it)
    shorter_wait_ms: float | None = None  # CORROBORATED: how much less it waited inside, median


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupProgress:
    """How far each member of one group got, for pictures and side-by-side views."""

    group: GroupRef
    # Per member, in ``group.members`` order: the highest collective seq it entered and the
    # highest it finished (None: no dump, or no collective of this group in its buffer).
    entered: tuple[int | None, ...]
    finished: tuple[int | None, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankProcess:
    """The process a rank ran in, as far as anything collected says (None: not known)."""

    host: str | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptSummary:
    """Another attempt of a restarted job, in short: what the analysis of its own files
    concluded (``Report.history``; ``report.words_history`` says it in one line)."""

    attempt: int  # the launcher's number (0 the first)
    later: bool = False  # after the attempt the report is of (``--attempt`` picked an earlier)
    verdict: Verdict
    culprit_ranks: tuple[int, ...]  # its root causes, sorted
    suspected_ranks: tuple[int, ...] = ()  # its culprits inferred only (no dump, elimination)
    # those by why each is only suspected (``suspected_why``)
    suspected_why: tuple[tuple[str, tuple[int, ...]], ...] = ()
    hosts: tuple[tuple[int, str], ...] = ()  # (rank, host) of those ranks, where known
    # its leading finding: what, in which op (None: it has none)
    kind: FindingKind | None = None
    group: GroupRef | None = None
    op: str | None = None
    seq: int | None = None
    cause: FailureKind | None = None  # what the leading finding's own failure was, if any
    world_size: int = 0
    ranks_loaded: int = 0  # the attempt's own dumps read
    evidence_files: int = 0  # its own logs and error files read
    fingerprint: str | None = None  # its report's (``analysis.fingerprint``): the same hang
    died_in_init: bool = False  # its ranks never got through init_process_group: none named


@dataclass(frozen=True, slots=True, kw_only=True)
class RepeatOffender:
    """A rank, or a host, named as a culprit in two or more attempts of one job, the report's
    own included: the machine is suspect more than the code."""

    attempts: tuple[int, ...]  # the attempts that named it, ascending
    rank: int | None = None  # the rank named each time; None: a host that held different ones
    hosts: tuple[str, ...] = ()  # where it ran in those attempts, where known (one: the same)
    ranks: tuple[int, ...] = ()  # a host's (``rank`` None): the culprits it held


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """A restarted job's other attempts, each in short, beside the one the report is of."""

    this: AttemptSummary  # the attempt the report is of, in short
    others: tuple[AttemptSummary, ...]  # by attempt number
    left_out: tuple[int, ...] = ()  # attempts with evidence not analysed (over the limit)
    repeats: tuple[RepeatOffender, ...] = ()  # ranks first, then hosts


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """Everything one analysis concluded, deterministic for the same input."""

    verdict: Verdict
    culprit_ranks: tuple[int, ...]  # root causes, sorted; empty when none
    findings: tuple[Finding, ...]
    stragglers: tuple[Straggler, ...]
    world_size: int
    ranks_loaded: tuple[int, ...]
    ranks_missing: tuple[int, ...]  # no dump file
    ranks_unreadable: tuple[int, ...]  # a file that could not be read
    data_notes: tuple[DataNote, ...]  # what was missing or inferred (report.words_notes)
    groups: tuple[GroupRef, ...]
    wait_edges: tuple[tuple[int, int, str], ...]  # (waiter, waited-on, why), sorted
    suspected_ranks: tuple[int, ...] = ()  # culprits inferred only from missing dumps
    victim_ranks: tuple[int, ...] = ()  # ranks blocked, directly or not, by the culprits
    progress: tuple[GroupProgress, ...] = ()  # one per group, same order as ``groups``
    stacks: StackEvidence | None = None  # collected Python stacks, when any were found
    # What failed where and when, across ranks, from the logs, error files and sidecars:
    # the cross-rank timeline (time order, unknown times last), and the files it came from
    timeline: tuple[Failure, ...] = ()
    evidence_files: tuple[str, ...] = ()
    evidence_problems: tuple[str, ...] = ()  # files that could not be read, one line each
    # Where two kinds of evidence name different ranks: which, and whom (report.wording says it)
    disagreements: tuple[Disagreement, ...] = ()
    # Each rank's host and pid where a stack sample (or collect's manifest) says, by rank
    processes: Mapping[int, RankProcess] = field(default_factory=dict)
    # Of a restarted job's folder: the other attempts' verdicts (None: one attempt)
    history: History | None = None
    # Every rank named (culprits, suspected, presumed held up, stragglers) with its basis: made
    # from the fields above when the report is made (``named_ranks``), kept by a selection (of
    # the whole job, as ``culprit_ranks`` is); a ``replace`` that changes who is named, or on
    # what, passes ``named_ranks=()`` to have them made again
    named_ranks: tuple[NamedRank, ...] = ()
    fingerprint: str | None = None  # what was found, hashed (``analysis.fingerprint``)

    def __post_init__(self) -> None:
        if not self.named_ranks:
            object.__setattr__(self, "named_ranks", named_ranks(self))

    @property
    def has_problems(self) -> bool:
        """True when the exit code should be 1."""
        return self.verdict in (Verdict.HANG, Verdict.DESYNC, Verdict.CANNOT_TELL)


# Why a rank is only suspected, from its ``NamedRank.rests_on`` facts, in the reports' words.
_SUSPECTED_WHY = (
    ("no dump", "no dump"),
    ("dump unreadable", "no dump"),
    (KIND_CODES[FindingKind.UNSEEN_MEMBERS], "by elimination"),
    (KIND_CODES[FindingKind.STACK_OUTLIER], "from stacks only"),
)


def suspected_why(report: Report) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The suspected ranks by why each is only suspected (``("no dump", (3,))``, ``("by
    elimination", (0, 1, 2))``; "inferred" for another inference), in the order first met."""
    facts = {n.rank: n.rests_on for n in report.named_ranks}
    why: dict[str, list[int]] = {}
    for r in report.suspected_ranks:
        rests = facts.get(r, ())
        reason = next((w for fact, w in _SUSPECTED_WHY if fact in rests), "inferred")
        why.setdefault(reason, []).append(r)
    return tuple((w, tuple(ranks)) for w, ranks in why.items())


def named_ranks(report: Report) -> tuple[NamedRank, ...]:
    """One ``NamedRank`` per rank the report names, by rank, in its strongest role.

    A culprit is observed only where an error finding that names it observes it
    (``OBSERVED_KINDS``; one from the entries only where the rank has a dump); a suspect, a
    rank presumed held up and a straggler are inferred (an absence, timing).
    """
    no_dump = set(report.ranks_missing) | set(report.ranks_unreadable)
    naming: dict[int, list[Finding]] = {}
    for f in report.findings:
        for r in f.culprit_ranks:
            naming.setdefault(r, []).append(f)
    out: dict[int, NamedRank] = {}

    def facts(r: int, found: list[Finding]) -> tuple[str, ...]:
        codes = tuple(dict.fromkeys(f.code for f in found))
        gone = ("dump unreadable",) if r in report.ranks_unreadable else ("no dump",)
        return codes + gone if r in no_dump else codes

    suspected = set(report.suspected_ranks)
    for r in report.culprit_ranks:
        errors = [f for f in naming.get(r, ()) if f.severity == Severity.ERROR]
        seen = any(
            f.kind in JOB_OBSERVES or (f.kind in ENTRIES_OBSERVE and r not in no_dump)
            for f in errors
        )
        role = NamedAs.SUSPECTED if r in suspected else NamedAs.CULPRIT
        basis = Basis.OBSERVED if seen and r not in suspected else Basis.INFERRED
        out[r] = NamedRank(rank=r, role=role, basis=basis, rests_on=facts(r, errors))
    for r in report.suspected_ranks:
        if r not in out:
            found = naming.get(r, [])
            out[r] = NamedRank(
                rank=r, role=NamedAs.SUSPECTED, basis=Basis.INFERRED, rests_on=facts(r, found)
            )
    for n in report.data_notes:
        if isinstance(n, PresumedHeldUp) and n.rank not in out:
            by = ",".join(str(b) for b in n.by)
            held = f"held up in {n.where} by ranks {by}"
            out[n.rank] = NamedRank(
                rank=n.rank,
                role=NamedAs.PRESUMED_HELD_UP,
                basis=Basis.INFERRED,
                rests_on=(*facts(n.rank, []), held),
            )
    for s in report.stragglers:
        if s.rank not in out:
            late = f"last to arrive at {round(100 * s.last_share)}% of {s.collectives} collectives"
            out[s.rank] = NamedRank(
                rank=s.rank,
                role=NamedAs.STRAGGLER,
                basis=Basis.INFERRED,
                rests_on=(late, f"timing: {s.basis}"),
            )
    return tuple(out[r] for r in sorted(out))
