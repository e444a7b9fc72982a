"""What a failure message says: its kind, cause or symptom, and the ranks or op it names.

Read from the texts torch, Gloo, NCCL, CUDA and torchelastic really write (torch 2.2-2.15);
``classify`` returns None for a line that reports no failure. A Python exception that is none
of the known communication failures is taken for the job's own code failing: a *cause*. What a
peer's fault does to a rank (a timeout, a closed or reset connection, Gloo's size check
aborting the rank that *received* the wrong size, the watchdog taking the process down, the
launcher terminating the survivors) is a *symptom*.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from frtrace.evidence.model import CAUSES, Failure, FailureKind, Role
from frtrace.incident.budget import MAX_LINE_CHARS

__all__ = ["MAX_MESSAGE", "Classification", "classify", "exception_line", "short"]

MAX_MESSAGE = 300  # characters of a failure message kept


def short(text: str) -> str:
    """The message on one line, cut to ``MAX_MESSAGE`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


_K = FailureKind


@dataclass(frozen=True, slots=True, kw_only=True)
class Classification:
    kind: FailureKind
    role: Role
    exc_type: str | None = None
    named_ranks: tuple[int, ...] = ()
    op: str | None = None
    seq: int | None = None
    signal: str | None = None

    def failure(
        self,
        *,
        rank: int | None,
        message: str,
        source: str,
        at_ns: int | None,
        where: str | None = None,
    ) -> Failure:
        """The failure this message reports, where it was read."""
        return Failure(
            rank=rank,
            kind=self.kind,
            role=self.role,
            message=short(message),
            source=source,
            at_ns=at_ns,
            exc_type=self.exc_type,
            named_ranks=self.named_ranks,
            op=self.op,
            seq=self.seq,
            where=where,
            signal=self.signal,
        )


# "RuntimeError: ...", "torch.distributed.DistBackendError: ...", "ValueError" alone.
_EXC = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit))(?::\s?(?P<msg>.*))?$"
)
# The patterns, first match wins: (regex, kind). Symptoms first: a RuntimeError saying a
# peer closed the connection is a symptom whatever its type.
_PATTERNS: tuple[tuple[re.Pattern[str], FailureKind], ...] = tuple(
    (re.compile(p, re.IGNORECASE), k)
    for p, k in (
        (r"failed to pass monitoredBarrier", _K.BARRIER_FAILED),
        (r"successfully reached monitoredBarrier, but received errors", _K.TIMEOUT),
        (
            r"Received data size doesn't match expected size|op\.preamble\.length <= op\.nbytes",
            _K.SIZE_CHECK,
        ),
        (
            r"Watchdog caught collective operation timeout|Timed out waiting|timed out|"
            r"Timeout\(ms\)|Socket Timeout|deadline exceeded",
            _K.TIMEOUT,
        ),
        (
            r"Connection closed by peer|Connection reset by peer|Broken pipe|remote process exited|"
            r"ECONNRESET|ncclRemoteError|NCCL communicator was aborted|Connection refused",
            _K.PEER_CLOSED,
        ),
        (
            r"taking the entire process down|Some NCCL operations have failed or timed out|"
            r"ProcessGroupNCCL's watchdog",
            _K.WATCHDOG_ABORT,
        ),
        (
            r"Sending process \d+ closing signal|received (?:SIGTERM|SIGINT|SIGHUP)|"
            r"\((?:SIGTERM|SIGINT|SIGHUP|SIGQUIT|SIGUSR1|SIGUSR2|SIGPIPE)\)|"
            r"SignalException",
            _K.TERMINATED,
        ),
        (r"out of memory|OutOfMemoryError|\bMemoryError\b|Cannot allocate memory", _K.OOM),
        (
            r"CUDA error|cudaError|CUBLAS_STATUS|CUDNN_STATUS|illegal memory access|"
            r"device-side assert",
            _K.CUDA_ERROR,
        ),
        (r"^AssertionError|\bAssertion [^\n]{0,400}? failed|assert(?:ion)? failed", _K.ASSERTION),
        (
            r"Segmentation fault|Fatal Python error|core dumped|terminate called after throwing|"
            r"Aborted|SIGSEGV|SIGABRT|SIGBUS|SIGILL|SIGFPE|SIGKILL",
            _K.CRASH,
        ),
        (
            r"\bskip(?:ping|ped|s)? (?:the )?(?:rest of )?(?:the |this |its )?"
            r"(?:schedule|step|microbatch|stage|iteration)|"
            r"leav(?:e|es|ing) the (?:schedule|pipeline)",
            _K.LEFT_SCHEDULE,
        ),
    )
)
# Exception types that are failures of communication, whatever their text says.
_COMM_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})
_RANKS = re.compile(r"Ranks? ([\d, ]{1,4000}?) failed to pass monitoredBarrier", re.IGNORECASE)
_NCCL_WORK = re.compile(r"SeqNum=(\d{1,18}),\s{0,8}OpType=(\w{1,40})")
_SIGNAL_NUM = re.compile(
    r"Signal (\d{1,3})\b|exitcode\s{0,8}:?\s{0,8}(-\d{1,3})\b|exit(?:ed with)? code:? (-\d{1,3})\b"
)


def exception_line(line: str) -> tuple[str, str] | None:
    """``("RuntimeError", "message")`` when the line is how Python ends a traceback."""
    m = _EXC.match(line.strip().split("\n", 1)[0].strip())
    if m is None:
        return None
    return m.group("type").rsplit(".", 1)[-1], (m.group("msg") or "").strip()


def _signal_name(text: str) -> str | None:
    for name in ("SIGABRT", "SIGSEGV", "SIGKILL", "SIGBUS", "SIGILL", "SIGFPE", "SIGTERM"):
        if name in text:
            return name
    m = _SIGNAL_NUM.search(text)
    if m:
        num = abs(int(next(g for g in m.groups() if g)))
        try:
            return signal.Signals(num).name
        except ValueError:
            return None
    return None


# The launcher's own report that children failed: each child's failure is read from it (or
# from the child's files), the header itself is no rank's failure.
_LAUNCHER = re.compile(r"ChildFailedError|elastic\.multiprocessing\.errors", re.IGNORECASE)


def classify(text: str, *, exception: bool = False) -> Classification | None:
    """What the message says; ``exception``: it is known to be a raised exception's text
    (the sidecar's trigger, an error file), so an unknown one is the job's own failure."""
    text = text[:MAX_LINE_CHARS]  # (a message's first characters say what it is)
    if _LAUNCHER.search(text):
        return None
    exc = exception_line(text)
    exc_type = exc[0] if exc else None
    for pattern, kind in _PATTERNS:
        if pattern.search(text):
            return _make(kind, text, exc_type)
    if exc_type in _COMM_TYPES:
        return _make(_K.PEER_CLOSED, text, exc_type)
    if exc_type is not None or exception:
        return _make(_K.EXCEPTION, text, exc_type)
    return None


def _make(kind: FailureKind, text: str, exc_type: str | None) -> Classification:
    named: tuple[int, ...] = ()
    op = seq = None
    if kind == _K.BARRIER_FAILED and (m := _RANKS.search(text)):
        named = tuple(sorted({int(x) for x in re.findall(r"\d+", m.group(1)) if len(x) <= 7}))
    if (m := _NCCL_WORK.search(text)) is not None:
        seq, op = int(m.group(1)), m.group(2).lower()
    return Classification(
        kind=kind,
        role=Role.CAUSE if kind in CAUSES else Role.SYMPTOM,
        exc_type=exc_type,
        named_ranks=named,
        op=op,
        seq=seq,
        signal=_signal_name(text) if kind == _K.CRASH else None,
    )
