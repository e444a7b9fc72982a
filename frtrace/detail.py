"""The values a finding is made of: groups, op signatures, where a rank's stack is, and the
typed evidence of each finding kind (``Finding.detail``).

The analysis fills these with what it saw (ranks, ops, sequence numbers, counts, times) and
writes no words; ``report.wording`` says each one (a finding's summary, why and evidence
lines), so every reporter and the gate say the same thing. ``frtrace.model`` re-exports the
shared ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.evidence.model import Failure

__all__ = [
    "BlockedAlone",
    "CulpritStack",
    "CulpritWhere",
    "Detail",
    "DumpedAfter",
    "FirstFailure",
    "GroupRef",
    "IdleAtDump",
    "InFlight",
    "LastSeen",
    "MaybeElsewhere",
    "NamedByError",
    "NeverJoined",
    "NeverPosted",
    "NewestEntry",
    "NoDump",
    "NotStarted",
    "NothingRecorded",
    "OpFailed",
    "OpSignature",
    "PgStatus",
    "Prose",
    "RankGroupCount",
    "RunningOps",
    "RunningSnapshot",
    "StackOutlier",
    "StuckInCollective",
    "UnrecordedOps",
    "UnseenMembers",
    "Waits",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRef:
    """A process group: its name, description and global member ranks."""

    name: str
    desc: str | None
    members: tuple[int, ...]  # global ranks, in group-rank order
    inferred: bool  # membership reconstructed from entries, not read from pg_config

    @property
    def label(self) -> str:
        """Human name: the description when it says more than the number."""
        if self.desc and self.desc not in ("undefined", ""):
            return f"{self.desc} (pg {self.name})"
        return f"pg {self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpSignature:
    """What one rank (or the majority) called at a (group, seq)."""

    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str | None = None
    stack: tuple[str, ...] = ()  # formatted frames, innermost first


@dataclass(frozen=True, slots=True, kw_only=True)
class CulpritWhere:
    """Where a culprit's Python stack says it is: the innermost frame of the user's code on
    its main thread, and the library call it is in (from a collected stack file)."""

    rank: int
    summary: str  # "in host code at load_batch (data.py:88), in Event.wait (threading.py:629)"
    place: str  # "host code" or "collective": is the library call a torch.distributed one
    function: str | None  # the user's frame; None when every frame is library code
    file: str | None  # its file, short (base name for the user's own files)
    line: int | None
    library_call: str | None  # "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    thread: str  # "main thread", or which thread was read and why
    source: str  # "recorder", "py-spy-text", "py-spy-json", "dump_traceback", "faulthandler"
    file_name: str  # the stack file's base name (never an absolute path)
    taken_at_ns: int | None = None  # when the sample was taken, if the file says
    trigger: str | None = None  # what made the rank write it ("signal: SIGUSR1"), if known


@dataclass(frozen=True, slots=True, kw_only=True)
class CulpritStack:
    """A culprit's Python stack joined to a finding (``analysis.stackjoin``)."""

    where: CulpritWhere
    frames: tuple[str, ...]  # its innermost Python frames, at most a few, innermost first
    more_frames: int  # Python frames past those


# ---- the typed evidence of each finding kind (``Finding.detail``); report/wording.py says it


@dataclass(frozen=True, slots=True, kw_only=True)
class Prose:
    """A finding said in words by the analysis (kinds not yet given typed evidence)."""

    summary: str
    why: str = ""
    evidence: tuple[str, ...] = ()


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
    """FR012: ops Gloo counted but did not write, per (rank, group)."""

    ranks: tuple[int, ...]
    total: int
    counts: tuple[RankGroupCount, ...]  # the first few (rank, group) pairs
    more: int  # pairs past those


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
    """FR009: every member entered the op and it did not finish; how many more wait."""

    entered: tuple[int, ...]
    held: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NewestEntry:
    """A rank's newest entry: where the dumps last saw it."""

    op: str
    seq: int | None
    group: GroupRef | None  # None: no group of the job has that name for the rank
    group_name: str | None
    state: str | None
    retired: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LastSeen:
    """Where a culprit with a dump was last seen (None: its dump holds no entry)."""

    rank: int
    entry: NewestEntry | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpFailed:
    """A retired op that cannot have completed (``analysis.failure``), and who says so."""

    reason: Literal["absent", "late", "stopped"]
    ranks: tuple[int, ...]  # never reached it / entered it late / left no dump
    retired_on: tuple[int, ...]  # members that dumped after it failed


@dataclass(frozen=True, slots=True, kw_only=True)
class Waits:
    """What every hang finding (FR001, FR005, FR006, FR008) rests on: who holds up whom in
    which op, where the culprits were last seen, and what shows that the op failed."""

    culprits: tuple[int, ...]
    waiting: tuple[int, ...]  # ranks directly blocked, as the rule found them
    blocked: int  # ranks that wait on the culprits, directly or not
    last_seen: tuple[LastSeen, ...]  # each culprit with a dump
    waiting_state: str | None  # the waiting ranks' state in the op
    call_site: str | None  # where the waiting ranks called it from
    failed: OpFailed | None
    timed_out: tuple[int, ...]  # NCCL: members that dumped after the watchdog gave up on it


@dataclass(frozen=True, slots=True, kw_only=True)
class PgStatus:
    """What a culprit's own ``pg_status`` says of the group (torch 2.5+)."""

    rank: int
    last_enqueued: int | None
    last_completed: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleAtDump:
    """A rank that dumped this long after its newest entry (the recorder's dump time)."""

    rank: int
    idle_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MaybeElsewhere:
    """Why a culprit may be blocked in an op its buffer does not show: its stack is inside
    this torch.distributed call (``in_call``), or it ran ``unrecorded`` Gloo send/recv."""

    rank: int
    in_call: str | None
    unrecorded: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NeverJoined:
    """FR001: the culprits never joined the op their peers wait in (or joined it too late)."""

    waits: Waits
    late_by_s: float | None = None  # joined, this long after its peers ...
    timeout_s: float | None = None  # ... past their timeout (both None: never joined)
    late: bool = False
    # what the confidence rests on: every rank has a dump, the membership was inferred, some
    # members have no dump, the culprits' newest op is not retired, they run unrecorded ops
    basis: Literal["dumps", "inferred", "members_missing", "unretired", "unrecorded"]
    pg_status: tuple[PgStatus, ...] = ()
    unretired: tuple[int, ...] = ()  # Gloo: newest op not retired though others finished it
    unretired_op: str | None = None
    host: tuple[int, ...] = ()  # finished every op they recorded: in host code
    idle: tuple[IdleAtDump, ...] = ()
    no_dump_time: bool = False  # host ranks without a dump time, and no failed op
    hidden: tuple[int, ...] = ()  # finished every op recorded, but run unrecorded send/recv
    doubts: tuple[MaybeElsewhere, ...] = ()  # kept a warning: may be waiting too


@dataclass(frozen=True, slots=True, kw_only=True)
class NotStarted:
    """FR005: the culprits enqueued the op but their GPU never started it."""

    waits: Waits


@dataclass(frozen=True, slots=True, kw_only=True)
class NeverPosted:
    """FR006: the culprits never posted the p2p op matching their peers' (waiter, culprit)."""

    waits: Waits
    pairs: tuple[tuple[int, int], ...]  # the first few


@dataclass(frozen=True, slots=True, kw_only=True)
class NoDump:
    """FR008: the culprits have no dump, and the op waits on them."""

    waits: Waits
    failed_it: tuple[int, ...]  # members whose op shows finished: Gloo retired it failed
    stopped: bool  # every other member stopped in it (it may also have finished)


Detail = (
    Prose
    | FirstFailure
    | NamedByError
    | StackOutlier
    | UnseenMembers
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
)
