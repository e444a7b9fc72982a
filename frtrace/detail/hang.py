"""The typed evidence of the hang findings (FR001, FR005, FR006, FR008): who holds up whom,
where the culprits were last seen, what shows the op failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.detail.values import CulpritWhere, GroupRef

__all__ = [
    "HeldUnseen",
    "IdleAtDump",
    "LastSeen",
    "MarksStopped",
    "MaybeElsewhere",
    "NeverJoined",
    "NeverPosted",
    "NewestEntry",
    "NoDump",
    "NotStarted",
    "OpFailed",
    "PgStatus",
    "Waits",
]


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
    blocked: int  # members of the group that wait on the culprits, directly or not
    last_seen: tuple[LastSeen, ...]  # each culprit with a dump
    waiting_state: str | None  # the waiting ranks' state in the op
    call_site: str | None  # where the waiting ranks called it from
    failed: OpFailed | None
    timed_out: tuple[int, ...]  # NCCL: members that dumped after the watchdog gave up on it
    held: tuple[HeldUnseen, ...] = ()  # culprits blocked themselves, on no one the dumps show
    # culprits whose own completion marks stopped below what their peers completed
    stopped: tuple[MarksStopped, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldUnseen:
    """A culprit that is blocked itself, in an op whose wait no dump explains (its peers' entries
    of the op are not there, e.g. dropped by an onlyActive dump): it may be held up there, so
    not having reached the op its peers wait in is no evidence that it is the cause."""

    rank: int
    op: str
    seq: int | None  # collective seq, or p2p_seq
    group: GroupRef


@dataclass(frozen=True, slots=True, kw_only=True)
class MarksStopped:
    """A culprit whose own completion marks stopped: its entries of ``group`` stay scheduled
    (or started) from ``first_unmarked`` on, while its peers' own marks (their entries' state,
    their ``pg_status``) show ``peers_completed`` >= it completed. No member completes a
    collective unless every member ran it: it ran those ops, only the marks of its GPU (or its
    watchdog) stopped, so it is not held up before the op its peers wait in."""

    rank: int
    group: GroupRef
    op: str  # its op at ``first_unmarked``
    first_unmarked: int  # collective seq of its oldest op of the group not marked completed
    last_marked: int  # the op before it: the last its marks can have completed
    peers_completed: int  # the highest seq of the group its peers completed
    by: tuple[int, ...]  # the peers whose own marks show it (the first few)
    source: Literal["entries", "pg_status", "both"]  # where those marks are


@dataclass(frozen=True, slots=True, kw_only=True)
class PgStatus:
    """What a culprit's own ``pg_status`` says of the group (torch 2.5+)."""

    rank: int
    last_enqueued: int | None
    last_completed: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleAtDump:
    """A rank that dumped this long after its newest entry (its dump time: the recorder's
    sidecar, collect's manifest, or what an NCCL dump discovered last)."""

    rank: int
    idle_s: float


# A group being made waits on its members (a store rendezvous, a barrier), as its innermost
# torch.distributed frame says: new_group (and its helpers), init_process_group, a device
# mesh, split_group, new_subgroups.
MAKING_GROUPS = (
    "new_group",
    "_new_process_group_helper",
    "_store_based_barrier",
    "init_process_group",
    "rendezvous",
    "split_group",
    "new_subgroups",
    "device_mesh",
)


def makes_a_group(call: str | None) -> bool:
    """Is ``call`` (a stack's torch.distributed frame) one that makes a process group?"""
    return any(word in (call or "") for word in MAKING_GROUPS)


@dataclass(frozen=True, slots=True, kw_only=True)
class MaybeElsewhere:
    """Why a culprit may be blocked in an op its buffer does not show: its stack is inside a
    torch.distributed call (``in_call``: where its stack is), or it ran ``unrecorded`` Gloo
    send/recv; or, with neither, ranks absent from the same op of groups like its own wait in
    send/recv (``neighbours``) behind a rank seen stuck elsewhere (``behind``), or none is seen
    waiting but a rank absent from the same op of another group like its own is seen stuck
    (``behind`` alone): a pipeline stage held up by another looks exactly so."""

    rank: int
    in_call: CulpritWhere | None
    unrecorded: int
    neighbours: tuple[int, ...] = ()
    behind: tuple[int, ...] = ()

    @property
    def making_group(self) -> bool:
        """Its stack is inside a group being made (it waits on the group's members)."""
        return self.in_call is not None and makes_a_group(self.in_call.library_call)


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
