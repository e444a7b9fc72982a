"""What the recorder cannot see (``frtrace.analysis.facts.blind``): a group's collective
sequence ids skipped, a CUDA graph replay in the stacks; the report says so and never calls
such a job healthy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from frtrace.analysis.facts.blind import replaying
from frtrace.detail.notes import GraphReplay, SkippedCollectives
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.report.common import headline
from frtrace.report.words_notes import note
from tests.conftest import FIXTURES, make_dump, make_entry, write_pickle

RECORDERS = FIXTURES / "recorders"
MANIFEST = json.loads((RECORDERS / "MANIFEST.json").read_text())
T0 = 1_800_000_000_000_000_000


def _job(
    tmp_path: Path,
    seqs: list[int],
    *,
    record_ids: list[int] | None = None,
    p2p: dict[int, int] | None = None,
) -> Path:
    """Two NCCL ranks that completed the collectives ``seqs`` of the default group (entries
    with ``record_ids``, consecutive unless given); ``p2p``: at index i, a send carrying seq."""
    ids = record_ids or list(range(len(seqs)))
    for r in range(2):
        entries: list[dict[str, Any]] = []
        for i, (seq, rid) in enumerate(zip(seqs, ids, strict=True)):
            more: dict[str, Any] = {}
            if p2p and i in p2p:
                peer = 1 - r
                more = {
                    "profiling_name": f"nccl:send {r}->{peer}",
                    "is_p2p": True,
                    "p2p_seq_id": p2p[i],
                }
            entries.append(
                make_entry(
                    record_id=rid,
                    collective_seq_id=seq,
                    op_id=rid + 1,
                    time_created_ns=T0 + i * 1_000_000,
                    **more,
                )
            )
        write_pickle(tmp_path / f"nccl_trace_rank_{r}", make_dump(entries, world=2))
    return tmp_path


def _notes(report: Any, kind: type) -> list[Any]:
    return [n for n in report.data_notes if isinstance(n, kind)]


def test_skipped_sequence_ids_are_said_and_the_job_is_not_healthy(tmp_path: Path) -> None:
    """Collectives #3 and #4 counted, never written (as a CUDA graph capture leaves NCCL's
    buffer): not healthy, the note says how many on which group and what settles it."""
    report = analyze(_job(tmp_path, [1, 2, 5]))
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()
    (skipped,) = _notes(report, SkippedCollectives)
    assert skipped.ranks == (0, 1) and skipped.total == 4
    assert [(c.rank, c.group.name, c.ops) for c in skipped.counts] == [(0, "0", 2), (1, "0", 2)]
    said = note(skipped)
    assert "cannot see them" in said and "not a healthy job" in said and "NCCL RAS" in said


@pytest.mark.parametrize(
    ("seqs", "extra"),
    [
        ([1, 2, 3], {}),  # nothing skipped
        ([1, 5], {"record_ids": [0, 4]}),  # onlyActive: entries 1-3 dropped, not skipped ops
        ([1, 1, 2], {"p2p": {1: 5}}),  # a send carries the group's count, adds nothing
        ([1, 2, 2, 3], {}),  # a coalesced group's ops share one id
        ([7, 8, 9], {"record_ids": [40, 41, 42]}),  # a wrapped buffer starts anywhere
    ],
)
def test_what_is_not_a_skipped_id(tmp_path: Path, seqs: list[int], extra: dict[str, Any]) -> None:
    report = analyze(_job(tmp_path, seqs, **extra))
    assert not _notes(report, SkippedCollectives)
    assert report.verdict == Verdict.HEALTHY


def test_a_real_monitored_barrier_skips_ids_and_its_stacks_name_the_rank() -> None:
    """recorders/monitored_barrier (real, 2 ranks): Gloo counts each monitored_barrier as two
    collective ids and writes nothing, so rank 1 stuck in host code before one leaves clean
    buffers; the skipped ids make it not healthy, and the stacks then single out rank 1 (from
    its stack: suspected, not observed by the entries)."""
    truth = MANIFEST["monitored_barrier"]
    report = analyze(RECORDERS / "monitored_barrier")
    (skipped,) = _notes(report, SkippedCollectives)
    assert skipped.ranks == (0, 1) and skipped.total == 8  # two ids, steps 1->2 and 2->3
    assert report.verdict == Verdict.HANG
    assert list(report.culprit_ranks) == truth["culprit_ranks"]
    assert report.suspected_ranks == report.culprit_ranks


def test_without_its_stacks_the_monitored_barrier_job_cannot_be_told(tmp_path: Path) -> None:
    """The same dumps alone: nobody named (no entry observes rank 1), never healthy."""
    for src in (RECORDERS / "monitored_barrier").glob("comm_lib_trace_rank_*"):
        shutil.copy(src, tmp_path / src.name)
    report = analyze(tmp_path)
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()
    assert _notes(report, SkippedCollectives)


def test_a_graph_replay_in_the_stacks_is_not_a_healthy_job(tmp_path: Path) -> None:
    """recorders/graph_replay (real): every entry retired, every rank's main thread in torch's
    CUDAGraph.replay: not healthy, said; the same buffers without the stacks are healthy (a
    clean buffer is all the recorder shows)."""
    report = analyze(RECORDERS / "graph_replay")
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()
    (replay,) = _notes(report, GraphReplay)
    assert replay.ranks == (0, 1, 2, 3)
    assert "CUDA graph replay" in note(replay) and "cannot see" in note(replay)
    # the headline says what is known: the recorder cannot see, not "ranks are stuck"
    assert headline(report).startswith("CANNOT TELL: the recorder cannot see every collective")
    for src in (RECORDERS / "graph_replay").glob("comm_lib_trace_rank_*"):
        shutil.copy(src, tmp_path / src.name)
    assert analyze(tmp_path).verdict == Verdict.HEALTHY


def _sample(*frames: Frame) -> ProcessStacks:
    thread = ThreadStack(thread_id="1", name="MainThread", frames=frames, is_main=True)
    return ProcessStacks(rank=0, pid=1, host="h", source="py-spy-text", path="p", threads=(thread,))


@pytest.mark.parametrize(
    ("frame", "replays"),
    [
        (
            Frame(function="replay", filename="/x/site-packages/torch/cuda/graphs.py", line=185),
            True,
        ),
        (Frame(function="CUDAGraph.replay", filename="torch/cuda/graphs.py", line=185), True),
        (Frame(function="run_graph", filename="torch/_inductor/cudagraph_trees.py"), True),
        (
            Frame(
                function="at::cuda::CUDAGraph::replay()", filename="libtorch_cuda.so", native=True
            ),
            True,
        ),
        (Frame(function="replay", filename="my_project/buffer.py", line=3), False),
        (Frame(function="capture_end", filename="torch/cuda/graphs.py", line=160), False),
    ],
)
def test_which_frames_are_a_graph_replay(frame: Frame, replays: bool) -> None:
    """torch's replay frames (Python, py-spy's native symbol); another project's ``replay``
    is not one."""
    assert replaying({0: _sample(frame)}) == ((0,) if replays else ())
