"""The values a finding is made of, and the typed evidence of each finding kind
(``Finding.detail``): what each rule saw (ranks, ops, sequence numbers, counts, times).

The analysis fills these and writes no words; ``report.wording`` says each one (a finding's
summary, why and evidence lines), so every reporter and the gate say the same thing.
``frtrace.model`` re-exports the shared values (``GroupRef``, ``OpSignature``, ...).
"""

from __future__ import annotations

from frtrace.detail.desync import (
    CycleStep,
    Deadlock,
    DecidedBy,
    GlooSizeHint,
    Mismatch,
    OrderConflict,
    P2PPost,
    PatternBroken,
    RankSignature,
    SaidMismatch,
    SplitMismatch,
    SplitPair,
)
from frtrace.detail.hang import (
    HeldUnseen,
    IdleAtDump,
    LastSeen,
    MarksStopped,
    MaybeElsewhere,
    NeverJoined,
    NeverPosted,
    NewestEntry,
    NoDump,
    NotStarted,
    OpFailed,
    PgStatus,
    Waits,
)
from frtrace.detail.kinds import (
    BlockedAlone,
    DumpedAfter,
    FirstFailure,
    InFlight,
    LaterFailure,
    NamedApart,
    NamedByError,
    NothingRecorded,
    RankGroupCount,
    RunningOps,
    RunningSnapshot,
    SkippedUnrecorded,
    StackOutlier,
    StuckInCollective,
    UnrecordedOps,
    UnseenMembers,
    WaitedOnTheSilent,
)
from frtrace.detail.order import GroupOrder, OpOrder
from frtrace.detail.ras import RasRunning
from frtrace.detail.values import CulpritStack, CulpritWhere, GroupRef, OpSignature

__all__ = [
    "BlockedAlone",
    "CulpritStack",
    "CulpritWhere",
    "CycleStep",
    "Deadlock",
    "DecidedBy",
    "Detail",
    "Disagreement",
    "DumpedAfter",
    "FirstFailure",
    "GlooSizeHint",
    "GroupOrder",
    "GroupRef",
    "HeldUnseen",
    "IdleAtDump",
    "InFlight",
    "LastSeen",
    "LaterFailure",
    "MarksStopped",
    "MaybeElsewhere",
    "Mismatch",
    "NamedApart",
    "NamedByError",
    "NeverJoined",
    "NeverPosted",
    "NewestEntry",
    "NoDump",
    "NotStarted",
    "NothingRecorded",
    "OpFailed",
    "OpOrder",
    "OpSignature",
    "OrderConflict",
    "P2PPost",
    "PatternBroken",
    "PgStatus",
    "RankGroupCount",
    "RankSignature",
    "RasRunning",
    "RunningOps",
    "RunningSnapshot",
    "SaidMismatch",
    "SkippedUnrecorded",
    "SplitMismatch",
    "SplitPair",
    "StackOutlier",
    "StuckInCollective",
    "UnrecordedOps",
    "UnseenMembers",
    "WaitedOnTheSilent",
    "Waits",
]

# Every kind's evidence: one of these is a finding's ``detail``
Detail = (
    FirstFailure
    | NamedByError
    | StackOutlier
    | UnseenMembers
    | WaitedOnTheSilent
    | RunningSnapshot
    | NothingRecorded
    | UnrecordedOps
    | InFlight
    | RunningOps
    | StuckInCollective
    | NeverJoined
    | NotStarted
    | NeverPosted
    | NoDump
    | Mismatch
    | SplitMismatch
    | Deadlock
    | PatternBroken
    | SaidMismatch
    | GlooSizeHint
    | GroupOrder
    | OpOrder
)

# Where two kinds of evidence name different ranks, or disagree on the job
# (``Report.disagreements``)
Disagreement = LaterFailure | NamedApart | RasRunning
