"""The lines torch writes when its own checks see the fault (real texts, torch 2.13):
TORCH_DISTRIBUTED_DEBUG=DETAIL's collective check, monitoredBarrier, Gloo's size check,
NCCL's watchdog. What each becomes (``classify``), which job's ranks a message means
(``job_ranks``), and a rank outside the job never named (``within_job``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from frtrace.evidence.collected import Collected
from frtrace.evidence.injob import within_job
from frtrace.evidence.logs import parse_log
from frtrace.evidence.messages import calls_of, classify, job_ranks
from frtrace.evidence.model import Call, Failure, FailureKind, JobEvidence, Role
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from frtrace.pystack.discover import StackSet
from tests.conftest import FIXTURES

_OPTIONS = (
    "TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), "
    "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))"
)


def _print(seq: int, op: str, shape: str = "64") -> str:
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
        f"TensorDtypes=Float, TensorDeviceTypes={_OPTIONS})"
    )


def mismatch(me: int, mine: str, other: int, theirs: str, shape: str = "64") -> str:
    """torch 2.13's text (ProcessGroupWrapper.cpp), as the exception line ends a traceback."""
    a, b = _print(2, mine), _print(2, theirs, shape)
    diff = f"  Op type: {mine}vs {theirs}" if mine != theirs else "  Tensor Tensor shapes: "
    return (
        f"RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running "
        f"collective: {a}, but Rank {other} is running collective: {b}.Collectives differ in "
        f"the following aspects: {diff}"
    )


# the real line of rank 0 of tests/fixtures/gloo_evidence/detail_mismatch__exception
REAL = mismatch(0, "ALLREDUCE", 1, "BROADCAST")
DETAIL_LOG = (
    FIXTURES
    / "gloo_evidence"
    / "detail_mismatch__exception"
    / "logs"
    / "detail_mismatch"
    / "attempt_0"
)


def test_the_real_line_is_in_the_fixture() -> None:
    assert REAL in (DETAIL_LOG / "0" / "stderr.log").read_text()


def test_a_detail_mismatch_is_a_symptom_that_says_what_each_rank_called() -> None:
    """Every rank raises it, the wrong one too: a symptom of its reporter, never a cause; the
    two calls are read, and no rank is blamed by the message itself."""
    found = classify(REAL)
    assert found is not None
    assert (found.kind, found.role) == (FailureKind.COLLECTIVE_MISMATCH, Role.SYMPTOM)
    assert found.named_ranks == () and found.as_rank == 0 and found.op == "all_reduce"
    assert found.calls == (
        Call(rank=0, op="all_reduce", seq=2, shapes="[64]", dtypes="Float"),
        Call(rank=1, op="broadcast", seq=2, shapes="[64]", dtypes="Float"),
    )


def test_torchs_length_check_prints_no_call_of_the_other_rank() -> None:
    """Where the serialized calls differ in length torch prints the other rank's length read
    as a call (no tensor, SequenceNumber=0): its op is not known."""
    text = (
        "Detected mismatch between collectives on ranks. Rank 0 is running collective: "
        f"{_print(4, 'ALLREDUCE')}, but Rank 3 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=0OpType=ALLGATHER)."
    )
    assert calls_of(text)[1] == Call(rank=3, op=None)


def test_a_call_of_no_tensor_is_read() -> None:
    text = (
        "Detected mismatch between collectives on ranks. Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=7OpType=BARRIER), but Rank 0 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=7OpType=ALLREDUCE_COALESCED)."
    )
    assert calls_of(text) == (
        Call(rank=2, op="barrier", seq=7),
        Call(rank=0, op="all_reduce_coalesced", seq=7),
    )


@pytest.mark.parametrize("cut", [60, 150, 400])
def test_a_mismatch_line_cut_short_says_no_call(cut: int) -> None:
    found = classify(REAL[:cut])
    assert found is not None and found.kind == FailureKind.COLLECTIVE_MISMATCH
    assert found.calls == ()


def test_each_rank_of_the_real_job_says_itself_and_the_first_that_differs() -> None:
    """The fixture's four stderr logs: rank 1 (broadcast) names rank 0; the others name 1."""
    seen = {}
    for rank in range(4):
        text = (DETAIL_LOG / str(rank) / "stderr.log").read_text()
        failures = parse_log(text, f"{rank}/stderr.log", rank=rank, year=2026)
        (f,) = [f for f in failures if f.kind == FailureKind.COLLECTIVE_MISMATCH]
        assert f.rank == rank and f.where is not None and "prog_detail_mismatch" in f.where
        seen[rank] = tuple((c.rank, c.op) for c in f.calls)
    assert seen == {
        0: ((0, "all_reduce"), (1, "broadcast")),
        1: ((1, "broadcast"), (0, "all_reduce")),
        2: ((2, "all_reduce"), (1, "broadcast")),
        3: ((3, "all_reduce"), (1, "broadcast")),
    }


def test_monitored_barrier_says_its_own_rank_and_the_ranks_that_did_not_arrive() -> None:
    """The DETAIL wrapper's barrier (waitAllRanks: "Ranks 2") and the plain one's."""
    for text, named in (
        ("RuntimeError: [Rank 0]: Ranks 2 failed to pass monitoredBarrier in 6000 ms", (2,)),
        ("[Rank 0]: Rank 3 failed to pass monitoredBarrier in 4000 ms", (3,)),
        ("[Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 4000 ms", (2, 3)),
    ):
        found = classify(text)
        assert found is not None and found.kind == FailureKind.BARRIER_FAILED
        assert (found.named_ranks, found.as_rank, found.role) == (named, 0, Role.SYMPTOM)


def test_the_ranks_that_passed_the_barrier_name_no_one() -> None:
    text = (
        "RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank."
    )
    found = classify(text)
    assert found is not None and found.kind == FailureKind.TIMEOUT
    assert found.named_ranks == () and found.as_rank is None


def test_glooss_size_check_is_a_symptom_with_the_bytes_and_no_rank() -> None:
    text = (
        "terminate called after throwing an instance of 'gloo::EnforceNotMet' what():  [enforce "
        "fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
        "op.preamble.length <= op.nbytes. 128 vs 32. Received data size doesn't match expected "
        "size. Is there a distributed collective mismatch in your code?"
    )
    found = classify(text)
    assert found is not None
    assert (found.kind, found.role) == (FailureKind.SIZE_CHECK, Role.SYMPTOM)
    assert (found.sizes, found.named_ranks, found.calls) == ((128, 32), (), ())


@pytest.mark.parametrize(
    "prefix",
    ["[Rank 3] ", "[PG ID 0 PG GUID 0(default_pg) Rank 3] ", "[PG ID 2 PG GUID 5(tp) Rank 1] "],
)
def test_the_nccl_watchdog_names_the_pending_op_and_no_culprit(prefix: str) -> None:
    """The watchdog's rank timed out waiting: a symptom with the op it waited in, naming no
    one (whatever rank its prefix gives)."""
    text = (
        f"[rank3]:[E1125 10:00:00.123456 1234 ProcessGroupNCCL.cpp:632] {prefix}Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=64, "
        "NumelOut=64, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
    )
    found = classify(text)
    assert found is not None
    assert (found.kind, found.role, found.op, found.seq) == (
        FailureKind.TIMEOUT,
        Role.SYMPTOM,
        "broadcast",
        7,
    )
    assert found.named_ranks == () and found.calls == ()


# ---- which job's ranks a message means -------------------------------------------------------

WORLD = 4


def test_the_default_groups_numbering_is_the_jobs() -> None:
    numbered = job_ranks((2,), as_rank=0, reporter=0, world=WORLD)
    assert numbered is not None and numbered == ((2,), 4)


def test_a_subgroups_numbering_is_read_from_the_jobs_groups() -> None:
    """Raised on the job's rank 1 as the group's rank 0: the group [1, 2, 3] (the only one
    whose rank 0 is rank 1) says its rank 1 is the job's rank 2."""
    numbered = job_ranks((1,), as_rank=0, reporter=1, world=WORLD, groups=[((1, 2, 3), False)])
    assert numbered is not None and numbered == ((2,), 3)


def test_a_subgroup_no_group_shows_names_no_one() -> None:
    """The job's rank 1 says it is rank 0: a subgroup, which no dump shows."""
    assert job_ranks((1,), as_rank=0, reporter=1, world=WORLD) is None


def test_two_groups_that_number_the_ranks_apart_name_no_one() -> None:
    """Rank 0 is rank 0 of the default group and of [0, 2]: "Rank 1" is 1 or 2."""
    assert job_ranks((1,), as_rank=0, reporter=0, world=WORLD, groups=[((0, 2), False)]) is None
    same = job_ranks((1,), as_rank=0, reporter=0, world=WORLD, groups=[((0, 1), False)])
    assert same is not None and same.ranks == (1,)


def test_an_inferred_group_is_believed_only_where_it_numbers_as_the_job() -> None:
    """Gloo's groups are inferred from the entries: a member with none is not seen, so
    [1, 3] may be [1, 2, 3]."""
    assert job_ranks((1,), as_rank=0, reporter=1, world=WORLD, groups=[((1, 3), True)]) is None


def test_a_message_saying_nothing_of_its_numbering_keeps_the_jobs_ranks() -> None:
    numbered = job_ranks((3, 9), as_rank=None, reporter=0, world=WORLD)
    assert numbered is not None and numbered.ranks == (3,)


@pytest.mark.parametrize("said", [(4,), (1_000_000,), (-1,)])
def test_a_rank_outside_the_job_is_never_a_jobs_rank(said: tuple[int, ...]) -> None:
    assert job_ranks(said, as_rank=0, reporter=0, world=WORLD) is None


def test_calls_naming_a_rank_outside_the_job_are_dropped_and_said() -> None:
    """A group's rank at or past the job's size is in no group of it: the calls go, with one
    problem line; the failure stays."""
    text = mismatch(0, "ALLREDUCE", 9, "BROADCAST")
    found = classify(text)
    assert found is not None
    f = found.failure(rank=0, message=text, source="train.log:7", at_ns=None)
    evidence, _, _ = within_job(
        WORLD, JobEvidence(failures=(f,)), StackSet(directory=".", samples=()), Collected(), {}
    )
    (kept,) = evidence.failures
    assert isinstance(kept, Failure) and kept.calls == () and kept.as_rank is None
    assert kept.kind == FailureKind.COLLECTIVE_MISMATCH
    assert evidence.problems == ("train.log: names rank 9, outside the job's 4 ranks; not used",)


def test_every_log_of_the_stall_fixture_reads_as_built() -> None:
    """detail_stall: rank 0 names rank 2 (the DETAIL wrapper's barrier), 1 and 3 waited."""
    logs = FIXTURES / "gloo_evidence" / "detail_stall__exception" / "logs" / "detail_stall"
    kinds = {}
    for rank in range(4):
        text = (logs / "attempt_0" / str(rank) / "stderr.log").read_text()
        kinds[rank] = {
            (f.kind, f.named_ranks)
            for f in parse_log(text, "x", rank=rank, year=2026)
            if f.kind != FailureKind.TERMINATED
        }
    assert kinds[0] == {(FailureKind.BARRIER_FAILED, (2,))}
    assert kinds[1] == kinds[3] == {(FailureKind.TIMEOUT, ())}
    assert kinds[2] == set()


def _watchdog_job(root: Path) -> Path:
    """A 4-rank NCCL job's torchrun --log-dir: ranks 0, 1, 3 timed out waiting in broadcast #7
    (the watchdog's line), then the watchdog took each down (SIGABRT); rank 2 said nothing,
    and torchrun stopped it (SIGTERM)."""
    logs = root / "logs" / "run" / "attempt_0"
    for r in range(4):
        (logs / str(r)).mkdir(parents=True)
        (logs / str(r) / "stdout.log").write_text("")
        line = (
            f"[rank{r}]:[E1125 10:10:00.12345{r} 1234 ProcessGroupNCCL.cpp:632] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, "
            "NumelIn=64, NumelOut=64, Timeout(ms)=600000) ran for 600012 milliseconds before "
            "timing out.\n"
        )
        (logs / str(r) / "stderr.log").write_text("" if r == 2 else line)
    blocks = []
    for i, r in enumerate(range(4)):
        code, sig = (15, "SIGTERM") if r == 2 else (6, "SIGABRT")
        blocks.append(
            f"[{i}]:\n  time      : 2026-11-25_10:10:05\n  host      : localhost\n"
            f"  rank      : {r} (local_rank: {r})\n  exitcode  : -{code} (pid: {100 + r})\n"
            f"  error_file: <N/A>\n  traceback : Signal {code} ({sig}) received by PID {100 + r}\n"
        )
    rule = "-" * 60 + "\n"
    (root / "torchrun.log").write_text(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        + "=" * 60
        + "\ntrain.py FAILED\n"
        + rule
        + "Failures:\n"
        + "".join(blocks[1:])
        + rule
        + "Root Cause (first observed failure):\n"
        + blocks[0]
        + "=" * 60
        + "\n"
    )
    return root


def test_a_rank_the_watchdog_took_down_waited_and_is_no_culprit(tmp_path: Path) -> None:
    """NCCL's watchdog line says the rank timed out waiting in broadcast #7; its SIGABRT that
    follows is the watchdog's doing, not a crash of its own (before, each waiter was named)."""
    report = analyze(_watchdog_job(tmp_path))
    assert report.culprit_ranks == () and report.verdict == Verdict.CANNOT_TELL
    waited = [f for f in report.timeline if f.kind == FailureKind.TIMEOUT]
    assert sorted(f.rank for f in waited if f.rank is not None) == [0, 1, 3]
    assert {(f.op, f.seq, f.role) for f in waited} == {("broadcast", 7, Role.SYMPTOM)}
    assert all(f.role == Role.SYMPTOM for f in report.timeline)
