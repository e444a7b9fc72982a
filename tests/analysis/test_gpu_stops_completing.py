"""A failing GPU (issue 50, item 3): a rank's own completion marks stop while its stream still
runs, its peers complete the ops it never marked, then the job hangs on it.

The fixtures (``tests/fixtures/nccl/gpu_stops_completing*``, written by
``python3 scripts/make_nccl_fixtures.py --only gpu_stops_completing ...`` with frsim) are
shaped like NVIDIA's 16-rank Megatron MoE dumps (torch 2.8, onlyActive, no stacks): rank 12's
entries of its tp group stay scheduled from #66 while its tp peers completed #77 (their
pg_status; their entries of it are gone), and they wait in #78, which rank 12 never enqueued;
the second set has ranks 9 and 14 so. Each has a twin, ``*_marked``: the same job with every
completion marked. The truth is the simulator's, from construction.

The invariant the old rule broke: freezing a culprit's completion marks of ops its peers
completed changes nothing about who the job hung on. The old rule read a rank blocked in an op
whose peers' entries were gone as "held up before the op" whatever its peers' marks said, and
the verdict went from hang (the marked twin) to cannot tell (the stopped one).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from frsim import Capture, Fault, FaultKind, JobSpec, simulate, write_dumps
from frtrace.analysis.facts.marks import stopped_marks
from frtrace.detail import MarksStopped, NeverJoined
from frtrace.model import Confidence, FindingKind, Report, Severity, Verdict
from frtrace.pipeline import analyze
from frtrace.report.text import render_text
from tests.conftest import FIXTURES, fixture_sets

NCCL = FIXTURES / "nccl"
STOPPED = {"gpu_stops_completing": (12,), "gpu_stops_completing_two": (9, 14)}
VARIANTS = ("2.9-pickle", "2.4-json")  # torch 2.8's pickle, torch 2.5-2.7's JSON
CASES = [(s, v) for s in STOPPED for v in VARIANTS]


def _stopped_of(report: Report) -> dict[int, MarksStopped]:
    out: dict[int, MarksStopped] = {}
    for f in report.findings:
        if isinstance(f.detail, NeverJoined):
            out |= {m.rank: m for m in f.detail.waits.stopped}
    return out


def _shape(report: Report) -> list[tuple[Any, ...]]:
    """What a report names, finding by finding: the kind, severity, culprits, waiting ranks,
    group and op."""
    return [
        (
            f.kind,
            f.severity,
            f.culprit_ranks,
            f.waiting_ranks,
            f.group.name if f.group else None,
            f.seq,
        )
        for f in report.findings
    ]


@pytest.mark.parametrize(("scenario", "variant"), CASES)
def test_the_verdict_names_the_rank_whose_gpu_stopped(scenario: str, variant: str) -> None:
    """hang, the culprits of the construction; each one's "never joined" an error of high
    confidence, with its marks stopped after #65 of its tp group while its three peers
    completed #77 (their pg_status), and not held."""
    truth = json.loads((NCCL / scenario / "truth.json").read_text())
    report = analyze(NCCL / scenario / variant)
    assert report.verdict == Verdict.HANG
    assert report.culprit_ranks == tuple(truth["culprit_ranks"]) == STOPPED[scenario]
    stopped = _stopped_of(report)
    assert sorted(stopped) == list(STOPPED[scenario])
    for rank, m in stopped.items():
        (f,) = [
            f
            for f in report.findings
            if f.kind == FindingKind.NEVER_JOINED and f.culprit_ranks == (rank,)
        ]
        assert (f.severity, f.confidence, f.seq) == (Severity.ERROR, Confidence.HIGH, 78)
        assert isinstance(f.detail, NeverJoined) and f.detail.waits.held == ()
        tp = tuple(range(rank // 4 * 4, rank // 4 * 4 + 4))
        assert m.group.members == tp and m.group.desc == "mesh_tp"
        assert (m.first_unmarked, m.last_marked, m.peers_completed) == (66, 65, 77)
        assert (m.by, m.source) == (tuple(r for r in tp if r != rank), "pg_status")
    text = " ".join(render_text(report).split())
    for rank, m in stopped.items():
        assert (
            f"rank {rank}'s GPU stopped reporting completions after #65 of {m.group.label}" in text
        )
        assert "which no member completes unless every member ran it" in text


@pytest.mark.parametrize(("scenario", "variant"), CASES)
def test_the_twin_with_every_completion_marked_names_the_same_ranks(
    scenario: str, variant: str
) -> None:
    """The invariant: the stopped set and its marked twin name the same culprits, the
    stopped one's findings all among the twin's; only the stopped one says the marks
    stopped. (The twin says more: its culprits' dumps are empty, so they also never reached
    the dp op their dp peers wait in; the stopped ones' dumps hold no mark of the dp group.)"""
    stopped = analyze(NCCL / scenario / variant)
    marked = analyze(NCCL / f"{scenario}_marked" / variant)
    assert (marked.verdict, marked.culprit_ranks) == (stopped.verdict, stopped.culprit_ranks)
    assert set(_shape(stopped)) <= set(_shape(marked))
    assert _stopped_of(marked) == {}


def _job(
    culprits: tuple[int, ...], unmarked: int, *, timing: bool, only_active: bool = True
) -> JobSpec:
    rank, *also = culprits
    return JobSpec(
        world_size=16,
        tp=4,
        steps=4,
        seed=7 + unmarked,
        coalesced=False,
        timing=timing,
        fault=Fault(
            kind=FaultKind.HOST_STALL,
            rank=rank,
            also=tuple(also),
            step=2,
            op_index=13,
            gpu_unmarked=unmarked,
        ),
        capture=Capture(only_active=only_active, stacks=False),
    )


def _analysed(spec: JobSpec, version: str) -> tuple[tuple[int, ...], Report]:
    job = simulate(spec)
    with tempfile.TemporaryDirectory() as tmp:
        write_dumps(job, tmp, version=version, fmt="pickle", processes=1)
        return job.truth.culprit_ranks, analyze(Path(tmp))


@pytest.mark.parametrize("unmarked", [1, 5, 12])
@pytest.mark.parametrize(
    ("culprits", "timing"),
    [((5,), False), ((5,), True), ((2, 13), True)],
    ids=["one-no-timing", "one-timing", "two-timing"],
)
@pytest.mark.parametrize("version", ["2.9", "2.10"])
def test_freezing_the_culprits_marks_does_not_change_who_is_named(
    culprits: tuple[int, ...], timing: bool, unmarked: int, version: str
) -> None:
    """Simulated anew: the culprits' marks stop 1, 5 or 12 calls before their hosts stall
    (their peers complete those calls), onlyActive dumps. The report names what the same job
    with every completion marked names: the culprits of the construction."""
    truth, stopped = _analysed(_job(culprits, unmarked, timing=timing), version)
    _, marked = _analysed(_job(culprits, 0, timing=timing), version)
    assert truth == culprits
    assert (stopped.verdict, stopped.culprit_ranks) == (marked.verdict, marked.culprit_ranks)
    assert (stopped.verdict, stopped.culprit_ranks) == (Verdict.HANG, culprits)
    assert sorted(_stopped_of(stopped)) == list(culprits)


def test_full_dumps_need_no_reading_of_the_marks() -> None:
    """Without onlyActive the peers' completed entries of those ops are there: matching
    settles them done on every member (one member's completion vouches for all), the
    culprit is not blocked in them, and nothing needs reading from the marks."""
    truth, report = _analysed(_job((5,), 5, timing=False, only_active=False), "2.10")
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, truth)
    assert _stopped_of(report) == {}


def test_no_other_fixture_reads_stopped_marks() -> None:
    """Every other committed dump set (Gloo, NCCL, real, incidents) analyses as before: the
    marks are read on none of them (where they are not, the hang rule is the one before)."""
    found: list[dict[int, MarksStopped]] = []

    def spy(*args: Any) -> dict[int, MarksStopped]:
        out = stopped_marks(*args)
        found.append(out)
        return out

    read = []
    with mock.patch("frtrace.analysis.rules.hang.stopped_marks", spy):
        for directory in fixture_sets():
            if directory.parent.name in STOPPED:
                continue
            found.clear()
            analyze(directory)
            if any(found):
                read.append(directory.relative_to(FIXTURES))
    assert read == []
