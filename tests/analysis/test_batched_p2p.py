"""NCCL batched p2p (``batch_isend_irecv``) in pipelines deeper than two stages (frsim).

NCCL records one entry per op of a batch, kept ``scheduled``, and a closing ``coalesced``
entry that carries the batch's state. A send meets the recv counted in posting order on its
pair of ranks (``facts/p2ppairs.py``): a stage whose half of a finished batch is there posted
it, and is never named for it; a stage blocked behind another batch waits, it is not in
flight. Where the closing entry is gone (onlyActive drops it once completed), the rank's
``pg_status`` settles the batch (``facts/p2pstatus.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from frsim import Capture, Fault, FaultKind, JobSpec, Moment, simulate, write_dumps
from frtrace.analysis.facts import facts_of
from frtrace.detail import NeverPosted
from frtrace.load.tables import load_dumps
from frtrace.model import FindingKind, Severity, Verdict
from frtrace.pipeline import analyze


def _host_stall(world: int, tp: int, rank: int, seed: int) -> JobSpec:
    """A 4-stage pipeline of batched p2p whose stage ``rank`` stops in host code at step 1,
    the ranks dumped at different moments (some while blocked, some after their timeout)."""
    return JobSpec(
        world_size=world,
        tp=tp,
        pp=4,
        steps=4,
        microbatches=3,
        buffer_size=2000,
        batched_p2p=True,
        lookahead=1,
        seed=seed,
        fault=Fault(kind=FaultKind.HOST_STALL, rank=rank, step=1),
        capture=Capture(moment=Moment.MIXED, retired="either"),
    )


CASES = [
    # the last stage stops: stage 1's forward send is queued behind a batch whose recv stage 2
    # met with an earlier, finished send; stage 1 was named as never posting stage 0's recv
    pytest.param(_host_stall(4, 1, 3, 9571), "2.10", id="4-stages"),
    pytest.param(_host_stall(4, 1, 3, 9571), "1.4", id="4-stages-torch-2.3"),
    # a stage of the second of two pipelines (tp 2): four stages of the first were named
    pytest.param(_host_stall(16, 2, 14, 5769), "2.10", id="16-ranks"),
]


@pytest.mark.parametrize(("spec", "version"), CASES)
def test_a_stage_that_posted_its_half_of_a_batch_is_not_named(
    tmp_path: Path, spec: JobSpec, version: str
) -> None:
    """Exactly the stage that stopped is named; every p2p finding names only it."""
    job = simulate(spec)
    write_dumps(job, tmp_path, version=version, fmt="pickle")
    report = analyze(tmp_path)
    assert report.culprit_ranks == job.truth.culprit_ranks, report.findings
    unmatched = [f for f in report.findings if f.kind == FindingKind.P2P_UNMATCHED]
    assert unmatched and all(f.culprit_ranks == job.truth.culprit_ranks for f in unmatched)


def test_each_open_send_meets_the_recv_counted_in_posting_order(tmp_path: Path) -> None:
    """4 stages, stage 3 stopped: stage 2's open recv from stage 1 meets stage 1's send of
    the same batch count, which finished; stage 1's open send meets stage 2's next recv, which
    is queued behind stage 2's blocked batch; stage 2's open send to stage 3 meets nothing."""
    job = simulate(_host_stall(4, 1, 3, 9571))
    write_dumps(job, tmp_path, version="2.10", fmt="pickle")
    facts = facts_of(load_dumps(tmp_path))
    matched = facts.matched
    p2p = matched.p2p.set_index("row")
    partners = matched.p2p_partners
    blocked = matched.blocked
    one, two = blocked[1], blocked[2]
    assert (one.op, one.peer) == ("send", 2)
    met = partners[one.row]
    assert met >= 0 and p2p.loc[met, "rank"] == 2 and p2p.loc[met, "kind"] == "recv"
    assert not p2p.loc[met, "done"] and p2p.loc[met, "p2p_seq"] > two.p2p_seq  # queued
    ops_of_two = [o for o in matched.pending_p2p[2] if o.p2p_seq == two.p2p_seq]
    recv = next(o for o in ops_of_two if o.op == "recv")
    send = next(o for o in ops_of_two if o.op == "send")
    assert p2p.loc[partners[recv.row], "done"]  # stage 1 finished its half: it holds no one
    assert partners[send.row] == -1  # stage 3 never posted the recv
    edges = {(e.waiter, e.target): e.kind for e in facts.waits.edges}
    assert (2, 1) not in edges and edges[(1, 2)] == "blocked_elsewhere"
    assert facts.waits.roots == (3,)


def test_a_wrapped_history_is_not_counted(tmp_path: Path) -> None:
    """Buffers that lost their first p2p ops (80 entries) cannot be counted: no pair of
    ranks whose history is cut is paired (the wait graph falls back to any pending op)."""
    spec = _host_stall(16, 2, 14, 5769)
    job = simulate(JobSpec(**{**_fields(spec), "buffer_size": 80}))
    write_dumps(job, tmp_path, version="2.10", fmt="pickle")
    matched = facts_of(load_dumps(tmp_path)).matched
    p2p = matched.p2p.set_index("row")
    first = p2p.groupby("rank")["p2p_seq"].min()
    cut = {int(rank) for rank, seq in first.items() if seq != 1}
    assert cut and matched.p2p_partners  # (some buffers lost p2p ops, others not)
    for row, met in matched.p2p_partners.items():
        assert p2p.loc[row, "rank"] not in cut
        assert met < 0 or p2p.loc[met, "rank"] not in cut


def test_a_batch_whose_closing_entry_is_gone_is_settled_by_pg_status(tmp_path: Path) -> None:
    """onlyActive: finished batches lost their closing entry, their per-op entries stay
    ``scheduled``; pg_status (p2p work counts the p2p sequence, on a group with no
    collective) says they finished: no rank is blocked in one, and the stage that never posted
    its recv is named (issue 10's most common open case)."""
    spec = JobSpec(
        world_size=4,
        tp=2,
        pp=2,
        steps=5,
        seed=72,
        buffer_size=300,
        timing=True,
        batched_p2p=True,
        lookahead=1,
        fault=Fault(kind=FaultKind.P2P_NO_PEER, rank=2, step=3),
        capture=Capture(moment=Moment.TIMEOUT, retired="either", only_active=True),
    )
    job = simulate(spec)
    write_dumps(job, tmp_path, version="2.4", fmt="json")
    facts = facts_of(load_dumps(tmp_path))
    status = {
        (r, p): c
        for r, p, c in zip(
            facts.dumps.pg_status.column("rank").to_pylist(),
            facts.dumps.pg_status.column("pg_id").to_pylist(),
            facts.dumps.pg_status.column("last_completed").to_pylist(),
            strict=True,
        )
    }
    pg_id = facts.dumps.entries.column("pg_id")
    for rank, ops in facts.matched.pending_p2p.items():
        for op in ops:  # every open op is past what its rank's watchdog saw complete
            assert op.p2p_seq is not None
            assert op.p2p_seq > status[(rank, pg_id[op.row].as_py())]
    report = analyze(tmp_path)
    assert report.culprit_ranks == job.truth.culprit_ranks == (2,)


def _fields(spec: JobSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in JobSpec.__dataclass_fields__}


def test_a_blocked_rank_that_others_wait_on_for_no_reason_seen_is_not_healthy(
    tmp_path: Path,
) -> None:
    """onlyActive, a cross-group deadlock: once the finished batches are settled, ranks sit
    in collectives whose absent members left no entry of the group (completed entries are
    dropped). Others wait on them only because they are blocked: nothing names a culprit,
    and the job is not called healthy (cannot_tell)."""
    spec = JobSpec(
        world_size=16,
        tp=2,
        pp=4,
        steps=6,
        microbatches=1,
        coalesced=False,
        batched_p2p=True,
        timing=False,
        lookahead=2,
        seed=2961,
        fault=Fault(kind=FaultKind.OPPOSITE_ORDER, rank=3, step=4),
        capture=Capture(moment=Moment.BLOCKED, retired="either", only_active=True, stacks=False),
    )
    job = simulate(spec)
    write_dumps(job, tmp_path, version="2.10", fmt="pickle")
    report = analyze(tmp_path)
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()


def test_a_stage_blocked_before_the_op_its_peer_waits_in_is_not_named(tmp_path: Path) -> None:
    """onlyActive: rank 2 stops in host code; rank 3 (its tp partner, a pipeline's first
    stage) waits in their tp broadcast, whose entries on rank 2 were dropped (completed), so
    nothing shows whom it waits on; rank 7, the next stage, waits for rank 3's send. Rank 3 is
    blocked itself, on no one seen: it may not have reached that send, so its never-posted
    finding is a warning that says so, and only rank 2 is named."""
    spec = JobSpec(
        world_size=8,
        tp=2,
        pp=2,
        steps=6,
        microbatches=3,
        coalesced=False,
        batched_p2p=True,
        timing=False,
        lookahead=1,
        seed=417,
        fault=Fault(kind=FaultKind.HOST_STALL, rank=2, step=2),
        capture=Capture(moment=Moment.MIXED, retired="after", only_active=True, stacks=False),
    )
    job = simulate(spec)
    write_dumps(job, tmp_path, version="2.4", fmt="json")
    report = analyze(tmp_path)
    assert report.culprit_ranks == job.truth.culprit_ranks == (2,)
    (held,) = [f for f in report.findings if f.culprit_ranks == (3,)]
    assert held.kind == FindingKind.P2P_UNMATCHED and held.severity == Severity.WARNING
    assert isinstance(held.detail, NeverPosted)
    assert [h.rank for h in held.detail.waits.held] == [3]
