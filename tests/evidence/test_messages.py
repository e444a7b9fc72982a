"""What a failure message says: cause or symptom, the ranks and op it names (real texts)."""

from __future__ import annotations

import pytest

from frtrace.evidence.messages import classify, exception_line
from frtrace.evidence.model import FailureKind, Role

GLOO_CLOSED = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [127.0.0.1]:47253. This is typically caused by a remote worker "
    "crashing. Check the logs of the remote worker before reporting an error."
)
NCCL_WATCHDOG = (
    "[rank0]:[E1125 10:00:00.123456 1234 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600007 milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("text", "kind", "role"),
    [
        (GLOO_CLOSED, FailureKind.PEER_CLOSED, Role.SYMPTOM),
        (
            "RuntimeError: Read error [127.0.0.1]:1234: Connection reset by peer",
            FailureKind.PEER_CLOSED,
            Role.SYMPTOM,
        ),
        (NCCL_WATCHDOG, FailureKind.TIMEOUT, Role.SYMPTOM),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
            "waiting 4000ms for recv operation to complete",
            FailureKind.TIMEOUT,
            Role.SYMPTOM,
        ),
        (
            "terminate called after throwing an instance of 'gloo::EnforceNotMet' what(): [enforce "
            "fail at pair.cc:456] op.preamble.length <= op.nbytes. 32 vs 16",
            FailureKind.SIZE_CHECK,
            Role.SYMPTOM,
        ),
        (
            "[Rank 0]: Ranks 3 failed to pass monitoredBarrier in 5000 ms",
            FailureKind.BARRIER_FAILED,
            Role.SYMPTOM,
        ),
        (
            "To avoid data inconsistency, we are taking the entire process down.",
            FailureKind.WATCHDOG_ABORT,
            Role.SYMPTOM,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970",
            FailureKind.PEER_CLOSED,
            Role.SYMPTOM,
        ),
        ("Signal 15 (SIGTERM) received by PID 4321", FailureKind.TERMINATED, Role.SYMPTOM),
        ("ValueError: corrupt sample in batch 3: decode failed", FailureKind.EXCEPTION, Role.CAUSE),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            FailureKind.OOM,
            Role.CAUSE,
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            FailureKind.CUDA_ERROR,
            Role.CAUSE,
        ),
        ("AssertionError: loss is nan", FailureKind.ASSERTION, Role.CAUSE),
        ("Fatal Python error: Segmentation fault", FailureKind.CRASH, Role.CAUSE),
        ("Signal 6 (SIGABRT) received by PID 12", FailureKind.CRASH, Role.CAUSE),
    ],
)
def test_kind_and_role(text: str, kind: FailureKind, role: Role) -> None:
    found = classify(text)
    assert found is not None
    assert (found.kind, found.role) == (kind, role)


def test_monitored_barrier_names_every_rank_that_failed() -> None:
    found = classify("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms")
    assert found is not None and found.named_ranks == (1, 3)


def test_the_nccl_watchdog_names_the_op_and_its_seq() -> None:
    found = classify(NCCL_WATCHDOG)
    assert found is not None and (found.op, found.seq) == ("allreduce", 5)


def test_a_crash_says_which_signal() -> None:
    found = classify("Signal 11 (SIGSEGV) received by PID 77")
    assert found is not None and found.signal == "SIGSEGV"


def test_plain_lines_are_no_failure_and_an_unknown_exception_is_a_cause() -> None:
    assert classify("step 12 loss 0.53 lr 1e-4") is None
    assert classify("Using timeout 30 s for the store") is None
    found = classify("the job raised this", exception=True)
    assert found is not None and found.role == Role.CAUSE


def test_exception_line() -> None:
    assert exception_line("torch.distributed.DistBackendError: x") == ("DistBackendError", "x")
    assert exception_line("KeyError") == ("KeyError", "")
    assert exception_line('  File "x.py", line 3, in f') is None
    assert exception_line("Error: not a Python exception line at all") is None
