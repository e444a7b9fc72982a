"""Typed records of what a job said when it failed: ``Failure``, and the set of them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Failure", "FailureKind", "JobEvidence", "Role"]


class Role(StrEnum):
    """Is a failure where the trouble started, or what it did to a rank?"""

    CAUSE = "cause"  # the rank's own fault: an exception in its code, a crash, OOM, CUDA
    SYMPTOM = "symptom"  # what another rank's fault did to it: a timeout, a closed connection


class FailureKind(StrEnum):
    """What a failure message says happened."""

    EXCEPTION = "exception"  # a Python exception raised by the job's own code
    ASSERTION = "assertion"  # an AssertionError or a failed assert in native code
    OOM = "oom"  # out of memory (CUDA or host), or killed by the OOM killer
    CUDA_ERROR = "cuda_error"  # a CUDA error (maybe reported asynchronously, later)
    CRASH = "crash"  # died by a signal: abort, segfault, killed
    EXITED = "exited"  # a rank process ended with a non-zero exit code, no more said
    LEFT_SCHEDULE = "left_schedule"  # the rank said it skipped or left its schedule
    RETRYING = "retrying"  # the rank retried a failing step to the end of its log
    TIMEOUT = "timeout"  # a collective or p2p op timed out waiting
    PEER_CLOSED = "peer_closed"  # a peer closed or reset the connection
    SIZE_CHECK = "size_check"  # Gloo's check: a peer sent more bytes than expected
    WATCHDOG_ABORT = "watchdog_abort"  # the NCCL watchdog took the process down
    BARRIER_FAILED = "barrier_failed"  # monitored_barrier: named ranks did not pass it
    TERMINATED = "terminated"  # the launcher stopped the rank after another one failed


CAUSES = frozenset(
    {
        FailureKind.EXCEPTION,
        FailureKind.ASSERTION,
        FailureKind.OOM,
        FailureKind.CUDA_ERROR,
        FailureKind.CRASH,
        FailureKind.LEFT_SCHEDULE,
        FailureKind.RETRYING,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """One failure one rank reported (or that was reported about it), where it was read."""

    rank: int | None  # the rank it happened on; None: the file does not say
    kind: FailureKind
    role: Role
    message: str  # one line, as the job wrote it (cut to MAX_MESSAGE characters)
    source: str  # the file it was read from (relative to the directory), with ":line"
    at_ns: int | None = None  # when, where the file says (UNIX time, ns)
    exc_type: str | None = None  # "RuntimeError", where it is a Python exception
    named_ranks: tuple[int, ...] = ()  # ranks the message blames (monitored_barrier)
    op: str | None = None  # the op the message names (NCCL watchdog: "ALLREDUCE")
    seq: int | None = None  # its sequence number (NCCL watchdog: SeqNum)
    where: str | None = None  # the innermost frame of the job's code: "forward (model.py:42)"
    signal: str | None = None  # "SIGABRT", for crashes


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvidence:
    """Every failure read from a directory, in time order (unknown times last)."""

    failures: tuple[Failure, ...] = ()
    files: tuple[str, ...] = ()  # the files read (relative paths)
    problems: tuple[str, ...] = ()  # files that could not be read, one line each

    def __bool__(self) -> bool:
        return bool(self.failures)
