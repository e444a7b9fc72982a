"""Each data note and each straggler basis, in the sentence the reports have always said."""

from __future__ import annotations

from typing import get_args

import pytest

from frtrace.detail.kinds import RankGroupCount
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
from frtrace.model import GroupRef, RankProcess, Straggler
from frtrace.report.common import process_phrase
from frtrace.report.words_notes import note, straggler_note

TP = GroupRef(name="3", desc="tp", members=(0, 1, 4, 5), inferred=True)
DEFAULT = GroupRef(name="0", desc="default_pg", members=(0, 1, 2, 3), inferred=True)

# One of every kind (the sentences as the analysis wrote them before they moved to report/)
EXAMPLES: list[tuple[DataNote, str]] = [
    (
        NoDumpFor(ranks=(3, 5, 6, 7), world_size=8),
        "no dump for rank(s) 3,5-7 of 8: a rank that crashed or hung hard often writes none. "
        "Their state is unknown; their dumps (TORCH_FR_DUMP_TEMP_FILE on their hosts) or logs "
        "would settle it.",
    ),
    (
        UnreadableDumps(ranks=(2,)),
        "unreadable dump for rank(s) 2; see the errors above. Those ranks are analysed as if "
        "they had no dump.",
    ),
    (
        WorldSizeGuessed(size=4, source="highest rank among the file names and recorded groups"),
        "world size 4 taken from the highest rank among the file names and recorded groups; if "
        "the job had more ranks, the highest ones have no dump and are not seen.",
    ),
    (
        BuffersWrapped(ranks=(0, 1)),
        "ring buffers of rank(s) 0-1 wrapped (older entries dropped); only ops every member "
        "still holds are compared. A larger TORCH_FR_BUFFER_SIZE keeps more history.",
    ),
    (
        MembershipInferred(group=DEFAULT, how=InferredFrom.DEFAULT_GROUP, world_size=4),
        "membership of default_pg (pg 0) inferred as all 4 ranks (the default group), since "
        "pg_config does not record it (Gloo, or an old dump)",
    ),
    (
        MembershipInferred(group=TP, how=InferredFrom.RECORDED, world_size=8, recorded=(0, 1)),
        "membership of tp (pg 3) inferred as the ranks that recorded entries in it, since "
        "pg_config does not record it (Gloo, or an old dump); a member with no entry of it in "
        "its buffer is not seen",
    ),
    (
        MembershipInferred(
            group=TP,
            how=InferredFrom.RECORDED_AND_SIZE,
            world_size=8,
            recorded=(0, 1),
            unseen=(4, 5),
            size=4,
        ),
        "membership of tp (pg 3) inferred as the ranks that recorded entries in it, plus "
        "rank(s) 4,5 without a dump (its all_gathers show 4 members), since pg_config does not "
        "record it (Gloo, or an old dump); a member with no entry of it in its buffer is not seen",
    ),
    (
        MembershipInferred(
            group=TP, how=InferredFrom.ONLY_ONE, world_size=8, recorded=(0,), unseen=(1, 4, 5)
        ),
        "membership of tp (pg 3) inferred as rank 0, the only one that recorded it, plus "
        "rank(s) 1,4,5 without a dump (a group of one could not disagree with anyone), since "
        "pg_config does not record it (Gloo, or an old dump); a member with no entry of it in "
        "its buffer is not seen",
    ),
    (
        OldDumps(),
        "dumps from torch 2.3 or older record no dtypes (a dtype mismatch is invisible) and "
        "name groups only by a per-process id; torch 2.2 also records batched send/recv as a "
        "bare 'coalesced' entry without peers, so findings on those are uncertain. Dumps from "
        "torch 2.4+ settle such cases.",
    ),
    (
        StatelessDumps(),
        "Gloo dumps record no start/complete states and no p2p ops: completion is read from "
        "`retired`, and a hang inside send/recv or monitored_barrier cannot be seen (after the "
        "last recorded collective, such a job looks finished); the ranks' stacks, logs or the "
        "recorder's sidecars show it.",
    ),
    (
        UnexplainedBlocked(ranks=(1, 2, 3)),
        "rank(s) 1-3 are blocked in ops whose missing members cannot be determined from the "
        "buffers (gaps, or wrapped buffers); larger buffers or pg_status from every rank would "
        "settle it.",
    ),
    (LoadWarnings(count=2), "2 warning(s) while loading; see the file problems."),
    (
        PresumedHeldUp(rank=3, where="tp (pg 3)", by=(1,)),
        "rank 3 has no dump, but its peers in tp (pg 3) wait on 1: it is presumably held up "
        "there too, not a cause",
    ),
    (
        NoStackFor(ranks=(2,)),
        "no Python stack sample for rank 2: the stack classes leave them out (py-spy dump "
        "--pid, or frtrace collect, gets one)",
    ),
    (
        NoStackFor(ranks=(2, 3)),
        "no Python stack sample for ranks 2-3: the stack classes leave them out (py-spy dump "
        "--pid, or frtrace collect, gets one)",
    ),
    (
        ManifestTimes(manifest="node-1/frtrace-collect.json", ranks=(2, 3)),
        "node-1/frtrace-collect.json: the dump times of ranks 2-3 are collect's (when it got "
        "each dump), not the dumps' own: a manifest is a claim; leave it out to see the dumps "
        "alone",
    ),
    (
        StackFileProblem(message="py-spy_rank_1.txt: not a py-spy dump"),
        "py-spy_rank_1.txt: not a py-spy dump",
    ),
    (
        HistoryCut(margin=32, dropped=31_145_987),
        "the cluster kept each group's history from 32 ops before its first op that not every "
        "member finished alike, and the ops one rank reached clearly last (31,145,987 entries "
        "of settled ops left out); without --scheduler every entry is read",
    ),
    (
        SkippedCollectives(
            ranks=(0, 1),
            total=4,
            counts=(
                RankGroupCount(
                    rank=0,
                    group=GroupRef(name="0", desc="default_pg", members=(0, 1), inferred=False),
                    ops=2,
                ),
                RankGroupCount(
                    rank=1,
                    group=GroupRef(name="0", desc="default_pg", members=(0, 1), inferred=False),
                    ops=2,
                ),
            ),
            more=3,
        ),
        "the recorder of rank(s) 0-1 skipped 4 collective sequence id(s) between two entries of "
        "a group (rank 0: 2 on default_pg (pg 0); rank 1: 2 on default_pg (pg 0); and 3 more "
        "(rank, group) pairs): collectives it counted and never wrote (issued while a CUDA graph "
        "was captured on NCCL, Gloo's monitored_barrier), so it cannot see them and a hang in "
        "one leaves no entry; not a healthy job on this evidence. The ranks' stacks (py-spy "
        "dump --pid, frtrace collect) or NCCL's own view (NCCL RAS, NCCL_DEBUG=INFO) settle it",
    ),
    (
        ClockOffsets(ranks=(4, 5, 6, 7), offset_s=420.0, reference=0, collectives=38),
        "the clock of ranks 4-7 ran 420.0 s ahead of rank 0's (from 38 collectives they "
        "recorded together): their times were moved onto rank 0's clock before any rule "
        "compared them (a host without NTP; compare their logs' times with that in mind)",
    ),
    (
        ClockOffsets(ranks=(3,), offset_s=-95.5, reference=2, collectives=0),
        "the clock of rank 3 ran 95.5 s behind rank 2's (their folder's (a host's ranks share "
        "a clock)): their times were moved onto rank 2's clock before any rule compared them "
        "(a host without NTP; compare their logs' times with that in mind)",
    ),
    (
        RasRead(
            files=("node-0/ncclras.json",),
            nccl_version="2.28.9",
            comms=3,
            healthy=2,
            unmatched=0,
            hosts=(4, 5),
            dead=(5,),
        ),
        "NCCL RAS (node-0/ncclras.json; NCCL 2.28.9): 3 communicators, 2 healthy (RUNNING, "
        "every rank answering, no error); hosts and pids of ranks 4-5 from it; its monitor "
        "declared the process of rank 5 dead",
    ),
    (
        RasCommNote(hash="0xae94423cfbb2ef4a", size=8, group=None, job_ranks=True, dead=(5,)),
        "NCCL RAS, communicator 0xae94423cfbb2ef4a (8 ranks): rank 5 considered dead "
        "(unreachable over RAS for a minute)",
    ),
    (
        GraphReplay(ranks=(2,)),
        "the stack of rank 2 is in a CUDA graph replay: the collectives a graph runs are never "
        "recorded (torch records none issued while a graph is captured), so a hang inside the "
        "replay leaves a clean ring buffer and the recorder cannot see it; not a healthy job on "
        "this evidence. NCCL's own view settles it (NCCL RAS: ncclras, or NCCL_DEBUG=INFO logs), "
        "or a run without the graph (eager collectives are recorded)",
    ),
]


def test_every_kind_of_note_has_an_example() -> None:
    """A new kind of note gets its sentence pinned here."""
    assert {type(n) for n, _ in EXAMPLES} == set(get_args(DataNote))
    assert {n.how for n, _ in EXAMPLES if isinstance(n, MembershipInferred)} == set(InferredFrom)


@pytest.mark.parametrize(("value", "sentence"), EXAMPLES, ids=lambda v: type(v).__name__)
def test_a_note_in_one_sentence(value: DataNote, sentence: str) -> None:
    """Each note says what was missing or inferred, and what would settle it."""
    assert note(value) == sentence


STRAGGLERS: list[tuple[StragglerBasis, float | None, str]] = [
    (
        StragglerBasis.ENQUEUE_ONLY,
        None,
        "from enqueue times only (no duration_ms or completion times in the dumps): a constant "
        "clock offset between hosts would look the same; ranks on one host share a clock. "
        "Enable TORCH_NCCL_ENABLE_TIMING=1 to confirm.",
    ),
    (
        StragglerBasis.NO_LOCAL_TIMING,
        None,
        "host-local timing missing for these collectives; not corroborated",
    ),
    (
        StragglerBasis.CORROBORATED,
        12.345,
        "corroborated by host-local timing: where it arrived last it waited 12.3 ms less inside "
        "the collective than its peers, as a last arrival does (clock skew cannot cause that)",
    ),
    (
        StragglerBasis.NOT_SHOWN,
        None,
        "host-local timing does not show the shorter wait a last arrival has: possibly a clock "
        "offset between hosts rather than a real straggler",
    ),
]


def straggler(basis: StragglerBasis, shorter_wait_ms: float | None) -> Straggler:
    return Straggler(
        rank=5,
        collectives=40,
        last_share=0.9,
        median_late_ms=30.0,
        groups=("0",),
        corroborated=basis == StragglerBasis.CORROBORATED,
        basis=basis,
        shorter_wait_ms=shorter_wait_ms,
    )


@pytest.mark.parametrize(("basis", "shorter", "sentence"), STRAGGLERS, ids=lambda v: str(v)[:12])
def test_a_stragglers_basis_in_one_sentence(
    basis: StragglerBasis, shorter: float | None, sentence: str
) -> None:
    """What a straggler's late arrivals rest on, for every basis."""
    assert {b for b, _, _ in STRAGGLERS} == set(StragglerBasis)
    assert straggler_note(straggler(basis, shorter)) == sentence


@pytest.mark.parametrize(
    ("host", "pid", "said"),
    [
        ("node-b", 4242, "on node-b, pid 4242"),
        (None, 4242, "pid 4242"),
        ("node-b", None, "on node-b"),
    ],
)
def test_a_ranks_process_in_a_few_words(host: str | None, pid: int | None, said: str) -> None:
    """Where a rank ran, as far as known: its host, its pid, or both."""
    assert process_phrase(RankProcess(host=host, pid=pid)) == said
