"""The typed evidence of the findings from the job's own words and stacks (FR013-FR015), of
the ranks the entries cannot place (FR012, FR016-FR018), and of ops in flight or stuck
(FR009, FR010)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.detail.values import CulpritWhere, GroupRef
from frtrace.evidence.model import Failure

__all__ = [
    "BlockedAlone",
    "DumpedAfter",
    "FirstFailure",
    "InFlight",
    "LaterFailure",
    "NamedApart",
    "NamedByError",
    "NothingRecorded",
    "RankGroupCount",
    "RunningOps",
    "RunningSnapshot",
    "StackOutlier",
    "StuckInCollective",
    "UnrecordedOps",
    "UnseenMembers",
    "WaitedOnTheSilent",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstFailure:
    """FR013: the first causes, the symptoms after them, the ranks that also failed."""

    ranks: tuple[int, ...]  # the first to fail with a cause
    first: tuple[Failure, ...]  # their failures (a few)
    after: tuple[Failure, ...]  # the symptoms that followed (a few)
    victims: tuple[int, ...]  # ranks whose failures followed
    untimed_others: tuple[int, ...]  # other ranks with a cause at no known time
    later_causes: tuple[int, ...]  # other ranks with a cause, later
    sure: bool  # every cause has a time


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedByError:
    """FR014: the ranks error messages name, who says so, and the messages."""

    named: tuple[int, ...]
    reporters: tuple[int, ...]
    messages: tuple[Failure, ...]  # the failures that name them (a few)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackOutlier:
    """FR015: ranks in host code, how many wait in torch.distributed calls, and in what."""

    host: tuple[CulpritWhere, ...]
    waiting: int
    waiting_in: str | None  # their one library call; None: several
    # no dump was read: every rank of the job has a stack, the others all in one place of
    # one collective (``waiting_in``), so each of ``host`` is seen outside it by its stack
    stacks_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedAlone:
    """A rank blocked in an op of a group no other member recorded."""

    rank: int
    op: str
    seq: int | None
    group: GroupRef


@dataclass(frozen=True, slots=True, kw_only=True)
class UnseenMembers:
    """FR016: ranks blocked in groups no other member recorded; is every rank blocked."""

    blocked: tuple[BlockedAlone, ...]  # by rank
    nobody_free: bool  # every rank of the job has a dump and is blocked
    loaded: int
    world_source: str  # where the world size was read


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningSnapshot:
    """FR017: one member one op behind in its group, as in other groups at the same moment."""

    behind: int
    ahead: tuple[int, ...]
    groups: int  # groups that look so
    window_s: float  # the waits began within this of the newest entry


@dataclass(frozen=True, slots=True, kw_only=True)
class NothingRecorded:
    """FR018: the ranks whose dumps are empty."""

    loaded: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankGroupCount:
    """How many ops one rank ran on one group that its buffer does not hold."""

    rank: int
    group: GroupRef
    ops: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnrecordedOps:
    """FR012: ops Gloo counted but did not write, per (rank, group); ``skipped``: a rank that
    ran fewer (or more) of them before a collective than its peers and than it did itself
    before (the rank named: it left a send or recv out, and its peer is blocked in its half)."""

    ranks: tuple[int, ...]
    total: int
    counts: tuple[RankGroupCount, ...]  # the first few (rank, group) pairs
    more: int  # pairs past those
    skipped: tuple[SkippedUnrecorded, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedUnrecorded:
    """One rank that ran ``ran`` unrecorded ops before ``op`` #``seq`` where ``peers`` ran
    ``others``, as it did itself before #``before``; ``behind``: the members that never
    reached #``seq``, presumably blocked in the send or recv it left out."""

    rank: int
    seq: int
    ran: int
    others: int
    peers: tuple[int, ...]
    before: int
    behind: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlight:
    """FR010: every member entered the op; the dump times say a running job (``running``),
    or Gloo retires an op a moment after it finishes (``gloo``)."""

    because: Literal["running", "gloo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpedAfter:
    """How long after its newest entry a rank dumped, and the longest pause still running."""

    rank: int
    idle_s: float
    limit_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningOps:
    """FR010: ranks entered an op that others had not entered yet, in a running job."""

    waiting: tuple[int, ...]
    behind: tuple[int, ...]
    idle_s: float  # the longest of the waiting ranks' time from newest entry to dump
    dumped: tuple[DumpedAfter, ...]  # the first few waiting ranks with a dump time


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckInCollective:
    """FR009: every member entered the op and it did not finish; how many more wait; where
    it is on the GPUs, where the dumps say (NCCL with timing on): ``"not_started"`` (no
    member's GPU started it: earlier work on the stream has not finished), ``"started"``
    (it runs and does not finish), None (not known: Gloo, or no timing)."""

    entered: tuple[int, ...]
    held: int
    on_gpu: Literal["not_started", "started"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LaterFailure:
    """Ranks that failed on their own after ranks were already waiting on those the Flight
    Recorder entries name (or at no known time): a later event, not where the hang began."""

    failed: tuple[int, ...]
    named: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedApart:
    """The job's own failures and the Flight Recorder entries name different ranks."""

    by_job: tuple[int, ...]
    by_entries: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitedOnTheSilent:
    """A missing dump suspected from the job's words: every rank with a dump says it failed
    waiting (timed out, its peer closed), none with a cause of its own, and these ranks of
    the job left no dump (of this attempt) and said nothing."""

    absent: tuple[int, ...]
    waited: tuple[int, ...]  # the ranks whose own failures say they waited
    symptoms: tuple[Failure, ...]  # a few of those failures
    lost: tuple[int, ...] = ()  # of ``waited``, those with no dump (of this attempt): logs only
