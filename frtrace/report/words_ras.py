"""What NCCL RAS's answers say of the job, in words (``frtrace.detail.ras``): its notes, its
disagreement with the dumps, and the JSON report's ``ras`` object; every format says them
alike.

``NCCL RAS (ncclras.json; NCCL 2.29.1): 3 communicators, 2 healthy (RUNNING, every rank
answering, no error); hosts and pids of ranks 0-7 from it``; ``NCCL RAS, communicator
0xae94423cfbb2ef4a (default_pg (pg 0), 8 ranks): rank 3 considered dead``; ``NCCL RAS says
communicator 0x... is RUNNING, every rank answering, while rank 4's broadcast #67 of mesh_tp
(pg 11) has been pending``. A communicator whose ranks could not be matched to the job's says
"its rank N", never "rank N".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from frtrace.base.printable import printable
from frtrace.base.ranges import format_ranks
from frtrace.detail.ras import RasCommNote, RasRead, RasRunning, RasSkew
from frtrace.model import GroupRef, Report

__all__ = ["ras_note", "ras_running", "ras_to_dict"]

MAX_SKEWS = 3  # functions said per communicator; the JSON report has them all


def ras_note(n: RasRead | RasCommNote) -> str:
    """One RAS note in one sentence."""
    return _read(n) if isinstance(n, RasRead) else _comm(n)


def _read(n: RasRead) -> str:
    files = ", ".join(printable(f) for f in n.files) or "no file"
    version = f"; NCCL {printable(n.nccl_version)}" if n.nccl_version else ""
    said = [
        f"NCCL RAS ({files}{version}): {_count(n.comms, 'communicator')}, {n.healthy} healthy "
        "(RUNNING, every rank answering, no error)"
        if n.comms
        else f"NCCL RAS ({files}{version}): its monitor's events only, no status answer"
    ]
    if n.hosts:
        said.append(f"hosts and pids of {_ranks(n.hosts)} from it")
    if n.unmatched:
        said.append(
            f"{_count(n.unmatched, 'communicator')} whose ranks could not be matched to the "
            "job's (no communicator as large as the job, no pid the job's files give): said "
            "in their own numbers"
        )
    if n.dead:
        said.append(f"its monitor declared the process of {_ranks(n.dead)} dead")
    if n.dead_processes:
        gone = n.dead_processes
        shown = ", ".join(f"pid {pid} on {printable(host)}" for host, pid in gone[:3])
        more = f" (+{len(gone) - 3} more)" if len(gone) > 3 else ""
        said.append(f"its monitor declared {shown}{more} dead, a process of no known rank")
    if n.more:
        said.append(f"{_count(n.more, 'more communicator')} with something to say")
    return "; ".join(said)


def _comm(n: RasCommNote) -> str:
    what = _which(n.hash, n.size, n.group, n.job_ranks)
    said: list[str] = []
    if n.dead:
        said.append(
            f"{_who(n.dead, n.job_ranks)} considered dead (unreachable over RAS for a minute)"
        )
    if n.unresponsive:
        said.append(f"{_who(n.unresponsive, n.job_ranks)} not reached (unresponsive)")
    if n.waiting:
        said.append(
            f"{_ranks(n.waiting)} waited on the culprits in the dumps: its own watchdog may "
            "have ended it"
        )
    if n.errors:
        said.append(f"{_who(n.errors, n.job_ranks)} report an NCCL error")
    if n.states:
        said.append(f"its ranks are in {', '.join(n.states)}, not all RUNNING")
    said += [_skew(s, n.job_ranks) for s in n.skew[:MAX_SKEWS]]
    if len(n.skew) > MAX_SKEWS:
        said.append(f"+{len(n.skew) - MAX_SKEWS} more functions")
    if n.behind_named:
        said.append("the ranks behind are those the dumps name")
    return f"NCCL RAS, {what}: " + "; ".join(said)


def ras_running(d: RasRunning) -> str:
    """RAS calls the job healthy while the dumps show an op pending, in one sentence."""
    which = (
        "every communicator it lists"
        if d.hash is None
        else f"communicator {printable(d.hash)} ({d.group.label})"
    )
    return (
        f"NCCL RAS says {which} is RUNNING, every rank answering, no error, while rank "
        f"{d.rank}'s {d.op} #{d.seq} of {d.group.label} has been pending: RAS watches that "
        "processes answer, not that collectives complete (NVIDIA/nccl#1730); its 'healthy' "
        "does not clear the job"
    )


def _skew(s: RasSkew, job_ranks: bool) -> str:
    parts = [f"{n:,} times by {_who(ranks, job_ranks)}" for n, ranks in s.counts]
    return f"{printable(s.function)} launched {', '.join(parts)}"


def _which(hash_: str, size: int, group: GroupRef | None, job_ranks: bool) -> str:
    where = f"{group.label}, " if group is not None else ""
    own = "" if job_ranks else ", its own rank numbers"
    return f"communicator {printable(hash_)} ({where}{_count(size, 'rank')}{own})"


def _who(ranks: Sequence[int], job_ranks: bool) -> str:
    """``rank 3`` (the job's), ``its rank 1`` (the communicator's own)."""
    return _ranks(ranks) if job_ranks else f"its {_ranks(ranks)}"


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {format_ranks(ranks)}"


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def ras_to_dict(report: Report) -> dict[str, Any] | None:
    """The JSON report's ``ras`` object (None where no RAS answer was read): what it added
    and each communicator it says something of (its ranks the job's where ``job_ranks``)."""
    read = next((n for n in report.data_notes if isinstance(n, RasRead)), None)
    if read is None:
        return None
    return {
        "files": list(read.files),
        "nccl_version": read.nccl_version,
        "communicators": read.comms,
        "healthy": read.healthy,
        "unmatched": read.unmatched,
        "hosts_from_ras": list(read.hosts),
        "dead": list(read.dead),
        "reported": [_comm_dict(n) for n in report.data_notes if isinstance(n, RasCommNote)],
        "running_while_pending": [
            {"hash": d.hash, "group": d.group.name, "rank": d.rank, "op": d.op, "seq": d.seq}
            for d in report.disagreements
            if isinstance(d, RasRunning)
        ],
    }


def _comm_dict(n: RasCommNote) -> dict[str, Any]:
    return {
        "hash": n.hash,
        "size": n.size,
        "group": None if n.group is None else n.group.name,
        "job_ranks": n.job_ranks,
        "dead": list(n.dead),
        "unresponsive": list(n.unresponsive),
        "errors": list(n.errors),
        "states": list(n.states),
        "skew": [
            {"function": s.function, "counts": [[c, list(r)] for c, r in s.counts]} for s in n.skew
        ],
    }
