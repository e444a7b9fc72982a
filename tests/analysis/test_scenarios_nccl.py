"""NCCL-format jobs (frsim, hand-built dumps): exact culprits and victims for every fault.

frsim simulates whole jobs and derives the truth from its own execution; it shares no code with
frtrace. The hand-built cases below pin the failure modes of torch's own analyzer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps
from frtrace.model import FindingKind, Verdict
from frtrace.pipeline import analyze
from frtrace.report.wording import why
from frtrace.report.words_notes import note
from tests.conftest import make_dump, make_entry, write_pickle

MESH = {"world_size": 8, "tp": 2, "pp": 2, "steps": 5, "seed": 3}


def run(
    tmp_path: Path, fault: Fault | None, version: str = "2.10", fmt: str = "pickle", **spec: Any
) -> tuple[Any, Any]:
    job = simulate(JobSpec(**(MESH | spec), fault=fault))
    write_dumps(job, tmp_path, version=version, fmt=fmt)
    return job.truth, analyze(tmp_path)


FAULTS = [
    (FaultKind.HOST_STALL, 5, FindingKind.NEVER_JOINED),
    (FaultKind.WRONG_OP, 5, FindingKind.OP_MISMATCH),
    (FaultKind.WRONG_SIZE, 5, FindingKind.SIZE_MISMATCH),
    (FaultKind.WRONG_DTYPE, 5, FindingKind.DTYPE_MISMATCH),
    (FaultKind.OPPOSITE_ORDER, 5, FindingKind.DEADLOCK),
    (FaultKind.P2P_NO_PEER, 5, FindingKind.P2P_UNMATCHED),
]


@pytest.mark.parametrize(("kind", "rank", "finding"), FAULTS, ids=[f[0].value for f in FAULTS])
@pytest.mark.parametrize(
    ("version", "fmt"),
    [("2.10", "pickle"), ("2.10", "json"), ("2.9", "pickle"), ("2.4", "pickle"), ("2.1", "pickle")],
)
def test_each_fault_names_exactly_its_culprit_and_victims(
    tmp_path: Path, kind: FaultKind, rank: int, finding: FindingKind, version: str, fmt: str
) -> None:
    """Every fault kind, every 2.x format: culprits == truth, victims == the blocked ranks."""
    truth, report = run(tmp_path, Fault(kind=kind, rank=rank, step=3), version, fmt)
    assert report.culprit_ranks == truth.culprit_ranks, report.findings
    assert report.victim_ranks == truth.waiting_ranks
    assert finding in {f.kind for f in report.findings}
    assert report.verdict in (Verdict.HANG, Verdict.DESYNC) and report.has_problems


@pytest.mark.parametrize(
    "kind", [FaultKind.HOST_STALL, FaultKind.OPPOSITE_ORDER, FaultKind.WRONG_SIZE]
)
@pytest.mark.parametrize("version", ["2.2", "1.4"])
def test_torch_2_2_and_2_3_formats_still_find_collective_faults(
    tmp_path: Path, kind: FaultKind, version: str
) -> None:
    """Bare-list (2.2) and FR 1.4 dumps: groups by members, batches by seq_id."""
    truth, report = run(tmp_path, Fault(kind=kind, rank=5, step=3), version)
    assert report.culprit_ranks == truth.culprit_ranks


@pytest.mark.parametrize("version", ["2.2", "1.4", "2.1", "2.4", "2.9", "2.10"])
def test_healthy_jobs_are_healthy_in_every_format(tmp_path: Path, version: str) -> None:
    """No fault: no culprit, no finding worth an exit code."""
    _, report = run(tmp_path, None, version)
    assert report.verdict == Verdict.HEALTHY and report.culprit_ranks == ()


def test_wrapped_buffers_of_different_sizes_are_not_missing_ranks(tmp_path: Path) -> None:
    """torchfrtrace aligns by record_id: ring buffers that wrapped at different points give it
    false missing ranks. Here every rank keeps a different number of entries."""
    sizes = tuple(40 + 13 * r for r in range(8))
    truth, report = run(tmp_path, None, buffer_size=sizes, steps=8)
    assert report.verdict == Verdict.HEALTHY and not report.findings
    truth, report = run(
        tmp_path / "hung",
        Fault(kind=FaultKind.HOST_STALL, rank=6, step=6),
        buffer_size=sizes,
        steps=8,
    )
    assert report.culprit_ranks == truth.culprit_ranks == (6,)


def test_missing_dump_is_a_suspect_marked_inferred(tmp_path: Path) -> None:
    """A hang whose culprit wrote no dump: named as suspected, low confidence."""
    fault = Fault(kind=FaultKind.HOST_STALL, rank=2, step=3, missing=(2,))
    _truth, report = run(tmp_path, fault)
    assert report.culprit_ranks == (2,) and report.suspected_ranks == (2,)
    suspects = [f for f in report.findings if f.kind == FindingKind.MISSING_DUMP]
    assert suspects and all(f.confidence == "low" and "inferred" in why(f) for f in suspects)
    assert report.ranks_missing == (2,)


def test_a_missing_dump_in_a_healthy_job_blames_nobody(tmp_path: Path) -> None:
    """Nothing pending: a missing file is reported as missing data, not as a culprit."""
    _truth, report = run(tmp_path, Fault(kind=FaultKind.MISSING_DUMP, rank=3))
    assert report.culprit_ranks == () and report.verdict == Verdict.HEALTHY
    assert any("no dump for rank(s) 3" in note(n) for n in report.data_notes)


def test_straggler_is_a_warning_not_a_culprit(tmp_path: Path) -> None:
    """A consistently late rank: healthy_with_stragglers, exit code 0."""
    _truth, report = run(tmp_path, Fault(kind=FaultKind.STRAGGLER, rank=6, step=0), steps=6)
    assert [s.rank for s in report.stragglers] == [6]
    assert report.culprit_ranks == () and report.verdict == Verdict.STRAGGLERS
    assert not report.has_problems


# ---------------------------------------------------------------------------------------------
# Hand-built dumps pinning torchfrtrace's failure modes


def _write(
    tmp_path: Path,
    per_rank: dict[int, list[dict[str, Any]]],
    world: int,
    prefix: str = "nccl_trace_rank_",
) -> Path:
    for rank, entries in per_rank.items():
        for i, e in enumerate(entries):
            e.setdefault("record_id", i)
        write_pickle(tmp_path / f"{prefix}{rank}", make_dump(entries, world=world))
    return tmp_path


def test_majority_decides_not_file_order(tmp_path: Path) -> None:
    """torchfrtrace trusts whichever rank it reads first. Rank 0 alone calls broadcast."""
    per_rank = {
        r: [
            make_entry(collective_seq_id=1),
            make_entry(
                collective_seq_id=2,
                state="scheduled",
                retired=False,
                profiling_name="nccl:broadcast" if r == 0 else "nccl:all_reduce",
            ),
        ]
        for r in range(3)
    }
    report = analyze(_write(tmp_path, per_rank, world=3))
    assert report.culprit_ranks == (0,) and report.victim_ranks == (1, 2)
    assert report.findings[0].kind == FindingKind.OP_MISMATCH


def test_standalone_p2p_in_a_group_of_four_is_healthy(tmp_path: Path) -> None:
    """A 4-rank pipeline 0->1->2->3 with plain send/recv in the default group: nothing wrong
    (torchfrtrace reports false culprits and missing ranks)."""
    per_rank: dict[int, list[dict[str, Any]]] = {r: [] for r in range(4)}
    for r in range(4):
        if r > 0:
            per_rank[r].append(
                make_entry(
                    profiling_name=f"nccl:recv {r}<-{r - 1}",
                    is_p2p=True,
                    collective_seq_id=0,
                    p2p_seq_id=1,
                )
            )
        if r < 3:
            per_rank[r].append(
                make_entry(
                    profiling_name=f"nccl:send {r}->{r + 1}",
                    is_p2p=True,
                    collective_seq_id=0,
                    p2p_seq_id=len(per_rank[r]) + 1,
                )
            )
        per_rank[r].append(make_entry(collective_seq_id=1))
    report = analyze(_write(tmp_path, per_rank, world=4))
    assert report.verdict == Verdict.HEALTHY and not report.findings


def test_p2p_send_whose_receiver_never_posts(tmp_path: Path) -> None:
    """Rank 1 sends to rank 2 (group of 4); rank 2 is done and never posts the recv."""
    per_rank: dict[int, list[dict[str, Any]]] = {r: [make_entry()] for r in range(4)}
    per_rank[1].append(
        make_entry(
            profiling_name="nccl:send 1->2",
            is_p2p=True,
            p2p_seq_id=1,
            state="scheduled",
            retired=False,
        )
    )
    report = analyze(_write(tmp_path, per_rank, world=4))
    assert report.culprit_ranks == (2,) and report.victim_ranks == (1,)
    assert report.findings[0].kind == FindingKind.P2P_UNMATCHED


def test_not_started_uses_nccl_timing_states(tmp_path: Path) -> None:
    """Every rank enqueued #2; ranks 0-2 started it, rank 3 did not: rank 3's GPU is busy."""
    per_rank = {
        r: [
            make_entry(),
            make_entry(
                collective_seq_id=2, retired=False, state="scheduled" if r == 3 else "started"
            ),
        ]
        for r in range(4)
    }
    report = analyze(_write(tmp_path, per_rank, world=4))
    assert report.culprit_ranks == (3,)
    assert report.findings[0].kind == FindingKind.NOT_STARTED


def test_analysis_goes_on_after_the_first_mismatch(tmp_path: Path) -> None:
    """torchfrtrace stops matching a group after its first mismatch, and aborts everything
    past --mismatch_cap. Two independent faults in two groups are both found here."""
    pg1 = {"process_group": ("1", "tp")}
    per_rank: dict[int, list[dict[str, Any]]] = {}
    for r in range(4):
        per_rank[r] = [
            make_entry(
                collective_seq_id=1,
                input_sizes=[[8]] if r == 1 else [[4]],
                output_sizes=[[8]] if r == 1 else [[4]],
            ),
            make_entry(
                collective_seq_id=1,
                pg_id=1,
                **pg1,
                profiling_name="nccl:all_gather" if r == 3 else "nccl:all_reduce",
            ),
        ]
    for r in range(4):
        write_pickle(
            tmp_path / f"rank_{r}",
            make_dump(
                per_rank[r],
                world=4,
                pg_config={
                    "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                    "1": {"name": "1", "desc": "tp", "ranks": "[0, 1, 2, 3]"},
                },
            ),
        )
    report = analyze(tmp_path)
    assert report.culprit_ranks == (1, 3)
    assert {f.kind for f in report.findings} >= {FindingKind.SIZE_MISMATCH, FindingKind.OP_MISMATCH}


def test_unknown_ops_and_backends_do_not_abort(tmp_path: Path) -> None:
    """torchfrtrace asserts on op names it does not know (c10d:, allgather_coalesced)."""
    per_rank = {
        r: [
            make_entry(profiling_name="c10d:allgather_coalesced"),
            make_entry(collective_seq_id=2, profiling_name="nccl2:brand_new_op"),
        ]
        for r in range(2)
    }
    report = analyze(_write(tmp_path, per_rank, world=2))
    assert report.verdict == Verdict.HEALTHY


def test_uneven_all_to_all_and_gather_roots_are_legitimate(tmp_path: Path) -> None:
    """Different all_to_all_single sizes per rank, and a gather root with outputs: healthy."""
    per_rank = {
        r: [
            make_entry(
                profiling_name="nccl:all_to_all_single",
                input_sizes=[[4 + r]],
                output_sizes=[[7 - r]],
            ),
            make_entry(
                collective_seq_id=2,
                profiling_name="nccl:gather",
                output_sizes=[[4], [4]] if r == 0 else [],
            ),
        ]
        for r in range(2)
    }
    report = analyze(_write(tmp_path, per_rank, world=2))
    assert report.verdict == Verdict.HEALTHY and not report.findings


def test_size_rule_breaks_a_tie_in_a_two_rank_group(tmp_path: Path) -> None:
    """1 vs 1 on an all_gather: the side whose output is not input x group size is wrong."""
    per_rank = {
        r: [
            make_entry(),
            make_entry(
                collective_seq_id=2,
                profiling_name="nccl:_all_gather_base",
                input_sizes=[[4]],
                output_sizes=[[8]] if r == 0 else [[12]],
                state="scheduled",
                retired=False,
            ),
        ]
        for r in range(2)
    }
    report = analyze(_write(tmp_path, per_rank, world=2))
    assert report.culprit_ranks == (1,)
    (finding,) = report.findings
    assert finding.kind == FindingKind.SIZE_MISMATCH and "fit _all_gather_base" in why(finding)
