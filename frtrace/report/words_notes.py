"""What the dumps could not show (``Report.data_notes``), and what would settle it: one
sentence per note, made from its typed value (``frtrace.detail.notes``); and the timing a
straggler's late arrivals rest on."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail.notes import (
    BuffersWrapped,
    ClockOffsets,
    DataNote,
    GraphReplay,
    HistoryCut,
    InferredFrom,
    LoadWarnings,
    ManifestTimes,
    MembershipInferred,
    NoDumpFor,
    NoStackFor,
    OldDumps,
    PresumedHeldUp,
    SkippedCollectives,
    StackFileProblem,
    StatelessDumps,
    StragglerBasis,
    UnexplainedBlocked,
    UnreadableDumps,
    WorldSizeGuessed,
)
from frtrace.detail.ras import RasCommNote, RasRead
from frtrace.model import Straggler
from frtrace.report.words_ras import ras_note

__all__ = ["note", "straggler_note"]


# long: one branch per kind of data note, each with its sentence
_OLD_DUMPS = (
    "dumps from torch 2.3 or older record no dtypes (a dtype mismatch is invisible) and "
    "name groups only by a per-process id; torch 2.2 also records batched send/recv as "
    "a bare 'coalesced' entry without peers, so findings on those are uncertain. "
    "Dumps from torch 2.4+ settle such cases."
)
_STATELESS = (
    "Gloo dumps record no start/complete states and no p2p ops: completion is read "
    "from `retired`, and a hang inside send/recv or monitored_barrier cannot be seen "
    "(after the last recorded collective, such a job looks finished); the ranks' "
    "stacks, logs or the recorder's sidecars show it."
)


def note(n: DataNote) -> str:
    """One data note in one sentence."""
    if isinstance(n, NoDumpFor):
        return (
            f"no dump for rank(s) {format_ranks(n.ranks)} of {n.world_size}: a rank "
            "that crashed or hung hard often writes none. Their state is unknown; their "
            "dumps (TORCH_FR_DUMP_TEMP_FILE on their hosts) or logs would settle it."
        )
    if isinstance(n, UnreadableDumps):
        return (
            f"unreadable dump for rank(s) {format_ranks(n.ranks)}; see the "
            "errors above. Those ranks are analysed as if they had no dump."
        )
    if isinstance(n, WorldSizeGuessed):
        return (
            f"world size {n.size} taken from the {n.source}; if the job had more "
            "ranks, the highest ones have no dump and are not seen."
        )
    if isinstance(n, BuffersWrapped):
        return (
            f"ring buffers of rank(s) {format_ranks(n.ranks)} wrapped (older entries "
            "dropped); only ops every member still holds are compared. A larger "
            "TORCH_FR_BUFFER_SIZE keeps more history."
        )
    if isinstance(n, MembershipInferred):
        return _membership(n)
    if isinstance(n, OldDumps):
        return _OLD_DUMPS
    if isinstance(n, StatelessDumps):
        return _STATELESS
    if isinstance(n, UnexplainedBlocked):
        return (
            f"rank(s) {format_ranks(n.ranks)} are blocked in ops whose missing members "
            "cannot be determined from the buffers (gaps, or wrapped buffers); "
            "larger buffers or pg_status from every rank would settle it."
        )
    if isinstance(n, LoadWarnings):
        return f"{n.count} warning(s) while loading; see the file problems."
    if isinstance(n, PresumedHeldUp) and n.symptom is not None and not n.by:
        return (
            f"rank {n.rank} has no dump, but its own failure ({n.symptom}) shows it inside "
            "the op: not a rank that never joined it"
        )
    if isinstance(n, PresumedHeldUp) and n.symptom is not None:
        return (
            f"rank {n.rank} has no dump, but its own failure is a symptom ({n.symptom}) of "
            f"{format_ranks(n.by)}'s, which failed first: presumably a victim, not a cause"
        )
    if isinstance(n, PresumedHeldUp):
        return (
            f"rank {n.rank} has no dump, but its peers in {n.where} wait on "
            f"{format_ranks(n.by)}: it is presumably held up there too, not a cause"
        )
    if isinstance(n, NoStackFor):
        many = len(n.ranks) != 1
        return (
            f"no Python stack sample for rank{'s' if many else ''} {format_ranks(n.ranks)}: "
            "the stack classes leave them out (py-spy dump --pid, or frtrace collect, gets one)"
        )
    if isinstance(n, ManifestTimes):
        many = len(n.ranks) != 1
        return (
            f"{n.manifest}: the dump times of {'ranks' if many else 'rank'} "
            f"{format_ranks(n.ranks)} are collect's (when it got each dump), not the dumps' own: "
            "a manifest is a claim; leave it out to see the dumps alone"
        )
    if isinstance(n, StackFileProblem):
        return n.message
    if isinstance(n, RasRead | RasCommNote):
        return ras_note(n)
    if isinstance(n, HistoryCut):
        return _history_cut(n)
    if isinstance(n, ClockOffsets):
        return _clock_offsets(n)
    if isinstance(n, SkippedCollectives | GraphReplay):
        return _blind(n)
    assert_never(n)


def _blind(n: SkippedCollectives | GraphReplay) -> str:
    """What the recorder cannot see (``analysis.facts.blind``)."""
    if isinstance(n, SkippedCollectives):
        return _skipped(n)
    many = len(n.ranks) != 1
    return (
        f"the stack{'s' if many else ''} of rank{'s' if many else ''} {format_ranks(n.ranks)} "
        f"{'are' if many else 'is'} in a CUDA graph replay: the collectives a graph runs are "
        "never recorded (torch records none issued while a graph is captured), so a hang inside "
        "the replay leaves a clean ring buffer and the recorder cannot see it; not a healthy job "
        "on this evidence. NCCL's own view settles it (NCCL RAS: ncclras, or NCCL_DEBUG=INFO "
        "logs), or a run without the graph (eager collectives are recorded)"
    )


def _skipped(n: SkippedCollectives) -> str:
    listed = "; ".join(f"rank {c.rank}: {c.ops} on {c.group.label}" for c in n.counts) + (
        f"; and {n.more} more (rank, group) pairs" if n.more else ""
    )
    return (
        f"the recorder of rank(s) {format_ranks(n.ranks)} skipped {n.total} collective "
        f"sequence id(s) between two entries of a group ({listed}): collectives it counted and "
        "never wrote (issued while a CUDA graph was captured on NCCL, Gloo's monitored_barrier), "
        "so it cannot see them and a hang in one leaves no entry; not a healthy job on this "
        "evidence. The ranks' stacks (py-spy dump --pid, frtrace collect) or NCCL's own view "
        "(NCCL RAS, NCCL_DEBUG=INFO) settle it"
    )


def _history_cut(n: HistoryCut) -> str:
    return (
        f"the cluster kept each group's history from {n.margin} ops before its first op "
        f"that not every member finished alike, and the ops one rank reached clearly last "
        f"({n.dropped:,} entries of settled ops left out); without --scheduler every entry "
        "is read"
    )


def _clock_offsets(n: ClockOffsets) -> str:
    many = len(n.ranks) != 1
    way = "ahead of" if n.offset_s > 0 else "behind"
    basis = (
        f"from {n.collectives} collectives they recorded together"
        if n.collectives
        else "their folder's (a host's ranks share a clock)"
    )
    return (
        f"the clock of {'ranks' if many else 'rank'} {format_ranks(n.ranks)} ran "
        f"{abs(n.offset_s):,.1f} s {way} rank {n.reference}'s ({basis}): their times were "
        f"moved onto rank {n.reference}'s clock before any rule compared them (a host "
        "without NTP; compare their logs' times with that in mind)"
    )


def _membership(n: MembershipInferred) -> str:
    def listed(ranks: tuple[int, ...]) -> str:
        return ",".join(map(str, ranks))

    if n.how == InferredFrom.DEFAULT_GROUP:
        how = f"all {n.world_size} ranks (the default group)"
    elif n.how == InferredFrom.RECORDED:
        how = "the ranks that recorded entries in it"
    elif n.how == InferredFrom.RECORDED_AND_SIZE:
        how = (
            f"the ranks that recorded entries in it, plus rank(s) {listed(n.unseen)} without a "
            f"dump (its all_gathers show {n.size} members)"
        )
    else:
        how = (
            f"rank {n.recorded[0]}, the only one that recorded it, plus rank(s) "
            f"{listed(n.unseen)} without a dump (a group of one could not disagree with anyone)"
        )
    return (
        f"membership of {n.group.label} inferred as {how}, since pg_config does not "
        "record it (Gloo, or an old dump)"
        + (
            ""
            if n.how == InferredFrom.DEFAULT_GROUP
            else "; a member with no entry of it in its buffer is not seen"
        )
    )


def straggler_note(s: Straggler) -> str:
    """What a straggler's late arrivals rest on, in one sentence."""
    basis = s.basis
    if basis == StragglerBasis.ENQUEUE_ONLY:
        return (
            "from enqueue times only (no duration_ms or completion times in the dumps): a "
            "constant clock offset between hosts would look the same; ranks on one host share "
            "a clock. Enable TORCH_NCCL_ENABLE_TIMING=1 to confirm."
        )
    if basis == StragglerBasis.NO_LOCAL_TIMING:
        return "host-local timing missing for these collectives; not corroborated"
    if basis == StragglerBasis.CORROBORATED:
        return (
            f"corroborated by host-local timing: where it arrived last it waited "
            f"{s.shorter_wait_ms:.1f} ms less inside the collective than its peers, as a last "
            "arrival does (clock skew cannot cause that)"
        )
    if basis == StragglerBasis.NOT_SHOWN:
        return (
            "host-local timing does not show the shorter wait a last arrival has: possibly a "
            "clock offset between hosts rather than a real straggler"
        )
    assert_never(basis)
