"""What a failure message says: its kind, cause or symptom, and the ranks or op it names.

Read from the texts torch, Gloo, NCCL, CUDA and torchelastic really write (torch 2.2-2.15);
``classify`` returns None for a line that reports no failure. A Python exception that is none
of the known communication failures is taken for the job's own code failing: a *cause*. What a
peer's fault does to a rank (a timeout, a closed or reset connection, Gloo's size check
aborting the rank that *received* the wrong size, the watchdog taking the process down, the
launcher terminating the survivors) is a *symptom*. So is torch's own collective check
(``TORCH_DISTRIBUTED_DEBUG=DETAIL``) raising on every rank, the wrong one included: what each
rank was calling is read from it (``Failure.calls``), never whose fault it is.

The ranks torch's messages name (``monitoredBarrier``'s "[Rank 0]: Ranks 2, 3 failed to
pass", the DETAIL check's "Rank 1 is running collective") are the ranks *of the op's process
group*: the job's own only in the default group. ``job_ranks`` says which job's ranks they
are, or that the message cannot say.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from frtrace.evidence.model import CAUSES, Call, Failure, FailureKind, Role
from frtrace.incident.budget import MAX_LINE_CHARS

__all__ = [
    "MAX_MESSAGE",
    "Classification",
    "Numbered",
    "calls_of",
    "classify",
    "exception_line",
    "job_ranks",
    "short",
]

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
    as_rank: int | None = None
    calls: tuple[Call, ...] = ()
    sizes: tuple[int, int] | None = None

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
            as_rank=self.as_rank,
            calls=self.calls,
            sizes=self.sizes,
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
        (r"Detected mismatch between collectives on ranks", _K.COLLECTIVE_MISMATCH),
        (r"failed to pass monitoredBarrier", _K.BARRIER_FAILED),
        (r"successfully reached monitoredBarrier, but received errors", _K.TIMEOUT),
        (
            r"Received data size doesn't match expected size|op\.preamble\.length <= op\.nbytes",
            _K.SIZE_CHECK,
        ),
        (
            r"Watchdog caught collective operation timeout|Timed out waiting|timed out|"
            r"Timeout\(ms\)|Socket Timeout|deadline exceeded|"
            r"Application timeout caused pair closure",  # (Gloo: a pair closed by a timeout)
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
_BARRIER_SELF = re.compile(r"\[Rank (\d{1,7})\]:\s{0,8}Ranks? [\d, ]{1,4000}? failed to pass")
_NCCL_WORK = re.compile(r"SeqNum=(\d{1,18}),\s{0,8}OpType=(\w{1,40})")
# torch's DETAIL check (ProcessGroupWrapper): "Detected mismatch between collectives on
# ranks. Rank 0 is running collective: CollectiveFingerPrint(...), but Rank 1 is running
# collective: CollectiveFingerPrint(...)." (a fingerprint of no tensor: "SequenceNumber=5OpType=")
_MISMATCH = re.compile(
    r"Detected mismatch between collectives on ranks\. Rank (\d{1,7}) is running collective: "
)
_BUT = re.compile(r", but Rank (\d{1,7}) is running collective: ")
_PRINT = re.compile(
    r"CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d{1,18}),? ?OpType=(?P<op>\w{1,40})"
    r"(?:, TensorShape=\[(?P<shapes>[^\]]{0,400})\], TensorDtypes=(?P<dtypes>[^=]{0,200}?),"
    r" TensorDeviceTypes=)?"
)
_GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d{1,18}) vs (\d{1,18})")
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
    op = seq = as_rank = None
    calls: tuple[Call, ...] = ()
    sizes = None
    if kind == _K.BARRIER_FAILED and (m := _RANKS.search(text)):
        named = tuple(sorted({int(x) for x in re.findall(r"\d+", m.group(1)) if len(x) <= 7}))
        if (own := _BARRIER_SELF.search(text)) is not None:
            as_rank = int(own.group(1))
    if kind == _K.COLLECTIVE_MISMATCH:
        calls = calls_of(text)
        if calls:
            as_rank, op = calls[0].rank, calls[0].op
    elif (m := _NCCL_WORK.search(text)) is not None:
        seq, op = int(m.group(1)), m.group(2).lower()
    if kind == _K.SIZE_CHECK and (m := _GLOO_SIZES.search(text)) is not None:
        sizes = (int(m.group(1)), int(m.group(2)))
    return Classification(
        kind=kind,
        role=Role.CAUSE if kind in CAUSES else Role.SYMPTOM,
        exc_type=exc_type,
        named_ranks=named,
        op=op,
        seq=seq,
        signal=_signal_name(text) if kind == _K.CRASH else None,
        as_rank=as_rank,
        calls=calls,
        sizes=sizes,
    )


def calls_of(text: str) -> tuple[Call, ...]:
    """The two calls torch's DETAIL check compares: the reporting rank's, then the first
    rank's that differs (``()`` where the text is not that message, or is cut short).

    torch first compares the lengths of the serialized fingerprints, then the fingerprints:
    where the lengths differ it prints the other rank's length read as a fingerprint (no
    tensor, ``SequenceNumber=0``, its "op" the length), whose op is then not known (None):
    a rank with tensors against one printed without any, or a fingerprint of no tensor
    against one printed with none at ``SequenceNumber=0`` (a length, most likely)."""
    if (head := _MISMATCH.search(text)) is None:
        return ()
    mine = _PRINT.match(text, head.end())
    but = _BUT.search(text, mine.end()) if mine is not None else None
    theirs = _PRINT.match(text, but.end()) if but is not None else None
    if mine is None or but is None or theirs is None:
        return ()
    first = _call(int(head.group(1)), mine)
    other = _call(int(but.group(1)), theirs)
    lengths = other.shapes is None and (
        first.shapes is not None or (other.seq == 0 and first.seq != 0)
    )
    if lengths:
        other = Call(rank=other.rank, op=None)  # (torch's length check: no fingerprint)
    return first, other


# torch's OpType as the Python call that makes it (the name the dumps and stacks give it)
_OP_NAMES = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCE_COALESCED": "all_reduce_coalesced",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "all_gather_into_tensor",
    "ALLGATHER_COALESCED": "all_gather_coalesced",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all_single",
    "RECVANYSOURCE": "recv",
}


def _call(rank: int, m: re.Match[str]) -> Call:
    return Call(
        rank=rank,
        op=_OP_NAMES.get(m["op"], m["op"].lower()),
        seq=int(m["seq"]),
        shapes=None if m["shapes"] is None else f"[{m['shapes']}]",
        dtypes=m["dtypes"],
    )


class Numbered(NamedTuple):
    """A message's ranks as the job's, and the size of the largest group they may be of."""

    ranks: tuple[int, ...]
    size: int


def job_ranks(
    said: Sequence[int],
    *,
    as_rank: int | None,
    reporter: int | None,
    world: int,
    groups: Sequence[tuple[tuple[int, ...], bool]] = (),
) -> Numbered | None:
    """The job's ranks a message means by ``said`` (ranks as it numbers them), or None where
    it cannot be told.

    torch numbers the ranks of the op's process group; the message says which rank it was
    raised on in that numbering (``as_rank``), the file or line prefix says which of the
    job's it is (``reporter``). The op's group is one the reporter is a member of at that
    place: the default group (``range(world)``) where the two agree, or one of ``groups``
    (members in group-rank order, and whether inferred from the entries). Every such group
    that has the ranks named must give them the same job's ranks; a group whose membership
    was inferred (a member without an entry is not seen, and shifts the numbering) is only
    believed where it numbers them as the job does. ``as_rank`` None: the message says
    nothing of its numbering, its ranks are taken as the job's (those inside it)."""
    if as_rank is None:
        return Numbered(tuple(r for r in said if 0 <= r < world), world)
    if as_rank < 0 or any(r < 0 for r in said):
        return None
    top = max((*said, as_rank))
    everyone = tuple(range(world))
    seen: set[tuple[int, ...]] = set()
    mapped: set[tuple[int, ...]] = set()
    size = 0
    for members, inferred in [(everyone, False), *groups]:
        if members in seen or len(members) <= top:
            continue
        seen.add(members)
        if reporter is not None and members[as_rank] != reporter:
            continue
        ranks = tuple(members[r] for r in said)
        if inferred and ranks != tuple(said) and members != everyone:
            return None  # (an inferred group may lack members: its numbering is not known)
        mapped.add(ranks)
        size = max(size, len(members))
    if len(mapped) != 1:
        return None
    (ranks,) = mapped
    return Numbered(ranks, size) if all(0 <= r < world for r in ranks) else None
