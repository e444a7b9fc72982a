"""Typed records of what a job said when it failed: ``Failure``, and the set of them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from frtrace.evidence.ras import RasFiles

__all__ = [
    "WAITING",
    "Call",
    "Failure",
    "FailureKind",
    "JobEvidence",
    "Role",
    "said_they_waited",
]


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
    # torch's own check (TORCH_DISTRIBUTED_DEBUG=DETAIL) found ranks calling different
    # collectives: "Detected mismatch between collectives on ranks"
    COLLECTIVE_MISMATCH = "collective_mismatch"


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

# What a rank's own failure says when it waited on a peer
WAITING = frozenset({FailureKind.TIMEOUT, FailureKind.PEER_CLOSED, FailureKind.WATCHDOG_ABORT})


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """What one rank was calling, as torch's collective check (``TORCH_DISTRIBUTED_DEBUG=
    DETAIL``, ``ProcessGroupWrapper``) wrote it: its ``CollectiveFingerPrint``."""

    rank: int  # as the message numbers ranks: the rank in the op's process group
    op: str | None  # "allreduce" (torch's OpType, lowercased); None: the message cannot say
    seq: int | None = None  # the wrapper's SequenceNumber (the group's count before the op)
    shapes: str | None = None  # "[64]": the first tensor's shape, as torch wrote it
    dtypes: str | None = None  # "Float"

    def same(self, other: Call) -> bool:
        """Both calls are one fingerprint (the rank aside)."""
        return (self.op, self.seq, self.shapes, self.dtypes) == (
            other.op,
            other.seq,
            other.shapes,
            other.dtypes,
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
    # the rank the message says it was raised on, numbered as the message numbers the ranks it
    # names (monitoredBarrier's "[Rank 0]:", the DETAIL check's "Rank 1 is running"): the
    # rank in the op's process group; with ``rank`` it tells a subgroup's numbering apart
    as_rank: int | None = None
    # torch's DETAIL check: the reporting rank's call, then the first rank's that differs
    calls: tuple[Call, ...] = ()
    # Gloo's size check: (bytes received, bytes expected)
    sizes: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvidence:
    """Every failure read from a directory, in time order (unknown times last)."""

    failures: tuple[Failure, ...] = ()
    files: tuple[str, ...] = ()  # the files read (relative paths)
    problems: tuple[str, ...] = ()  # files that could not be read, one line each
    ras: RasFiles | None = None  # NCCL RAS's answers and events (``frtrace.evidence.ras``)

    def __bool__(self) -> bool:
        return bool(self.failures)


def said_they_waited(evidence: JobEvidence) -> frozenset[int]:
    """The ranks that said, in their own words, that they failed waiting on a peer (a timeout,
        a closed connection, the watchdog), and said nothing else of their own: no cause, no
        message naming a rank. (That the launcher stopped it, or saw it exit, is no word of its own;
    a rank that said only that is not one.)"""
    waited: set[int] = set()
    other: set[int] = set()
    for f in evidence.failures:
        if f.rank is None:
            continue
        if f.kind in WAITING and f.role != Role.CAUSE and not f.named_ranks:
            waited.add(f.rank)
        elif f.kind not in (FailureKind.TERMINATED, FailureKind.EXITED):  # (no word of its own)
            other.add(f.rank)
    return frozenset(waited - other)
