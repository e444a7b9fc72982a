"""What the dumps could not show (``Report.data_notes``), and a straggler's timing basis: the
ranks, counts and groups each note is about, never its sentence (``report.words_notes`` says
it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from frtrace.detail.kinds import RankGroupCount
from frtrace.detail.ras import RasCommNote, RasRead
from frtrace.detail.values import GroupRef

__all__ = [
    "BuffersWrapped",
    "ClockOffsets",
    "DataNote",
    "GraphReplay",
    "HistoryCut",
    "InferredFrom",
    "LoadWarnings",
    "ManifestTimes",
    "MembershipInferred",
    "NoDumpFor",
    "NoStackFor",
    "OldDumps",
    "PresumedHeldUp",
    "SkippedCollectives",
    "StackFileProblem",
    "StatelessDumps",
    "StragglerBasis",
    "UnexplainedBlocked",
    "UnreadableDumps",
    "WorldSizeGuessed",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NoDumpFor:
    """Ranks with no dump file: their state is unknown."""

    ranks: tuple[int, ...]
    world_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreadableDumps:
    """Ranks whose dump could not be read: analysed as if they had none."""

    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldSizeGuessed:
    """The world size is not recorded: taken from ``source``; higher ranks would be unseen."""

    size: int
    source: str  # where it was taken from (``load.tables.WorldSize.source``)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuffersWrapped:
    """Ranks whose ring buffer wrapped (older entries dropped)."""

    ranks: tuple[int, ...]


class InferredFrom(StrEnum):
    """Where an inferred group's members came from."""

    DEFAULT_GROUP = "default_group"  # the default group: every rank of the job
    RECORDED = "recorded"  # the ranks that recorded entries in it
    RECORDED_AND_SIZE = "recorded_and_size"  # those, plus ranks without a dump its size asks
    ONLY_ONE = "only_one"  # the one rank that recorded it, plus every rank without a dump


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipInferred:
    """A group's members are not recorded (Gloo, or an old dump): inferred."""

    group: GroupRef
    how: InferredFrom
    world_size: int  # (DEFAULT_GROUP: its members)
    recorded: tuple[int, ...] = ()  # the ranks that recorded entries in it
    unseen: tuple[int, ...] = ()  # ranks without a dump taken to be members too
    size: int | None = None  # its size, from its all_gathers (RECORDED_AND_SIZE)


@dataclass(frozen=True, slots=True, kw_only=True)
class OldDumps:
    """Dumps from torch 2.3 or older: no dtypes, groups named only by a per-process id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatelessDumps:
    """Gloo dumps: no start/complete states and no p2p ops."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnexplainedBlocked:
    """Blocked ranks whose missing peers the buffers cannot determine."""

    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadWarnings:
    """Problems while loading that did not stop it."""

    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PresumedHeldUp:
    """A rank with no dump whose peers wait on named culprits: a victim, not a cause."""

    rank: int
    where: str  # the group's label, or the groups with its peers (``verdict.presumed``)
    by: tuple[int, ...]  # the culprits its peers wait on
    # its own failures are all symptoms (this kind first) of ``by``'s first cause: its dump
    # was lost to that cause (``where`` is then empty)
    symptom: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NoStackFor:
    """Ranks with a dump but no Python stack sample (when some others have one)."""

    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestTimes:
    """Dump times taken from ``frtrace collect``'s manifest (when it got each dump: a claim),
    for ranks whose dumps and sidecars say none."""

    manifest: str  # the manifest's path in the folder
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryCut:
    """A cluster's load kept each group's history from ``margin`` ops before its first
    unsettled op (``load.workers.frontier``): ``dropped`` entries of settled ops were not read
    in."""

    margin: int
    dropped: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StackFileProblem:
    """A stack file that could not be read: the reader's message (``pystack``), as is."""

    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockOffsets:
    """Ranks whose clock was found ``offset_s`` ahead of rank ``reference``'s (behind where
    negative), from ``collectives`` collectives they recorded together (0: their folder's
    offset, a host's ranks share a clock): their times were moved onto rank ``reference``'s
    clock before any rule read them (``analysis.facts.clocks``)."""

    ranks: tuple[int, ...]
    offset_s: float
    reference: int
    collectives: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedCollectives:
    """Collectives a rank's recorder counted but did not write: a group's sequence ids
    skipped between two of its entries (``analysis.facts.blind``)."""

    ranks: tuple[int, ...]
    total: int
    counts: tuple[RankGroupCount, ...]  # the first few (rank, group, how many)
    more: int  # (rank, group) pairs not listed


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphReplay:
    """Ranks whose Python stack is in a CUDA graph replay, whose collectives are not recorded."""

    ranks: tuple[int, ...]


# Every note a report can carry
DataNote = (
    NoDumpFor
    | UnreadableDumps
    | WorldSizeGuessed
    | BuffersWrapped
    | MembershipInferred
    | OldDumps
    | StatelessDumps
    | UnexplainedBlocked
    | LoadWarnings
    | PresumedHeldUp
    | NoStackFor
    | StackFileProblem
    | ManifestTimes
    | HistoryCut
    | RasRead
    | RasCommNote
    | ClockOffsets
    | SkippedCollectives
    | GraphReplay
)


class StragglerBasis(StrEnum):
    """What a straggler's late arrivals rest on (``Straggler.basis``)."""

    ENQUEUE_ONLY = "enqueue_only"  # no duration or completion times: a clock offset could do it
    NO_LOCAL_TIMING = "no_local_timing"  # no host-local timing for these collectives
    CORROBORATED = "corroborated"  # it waited less inside them, as a last arrival does
    NOT_SHOWN = "not_shown"  # host-local timing does not show that shorter wait
