"""NCCL RAS's answers held against the report: what they add (each rank's host and pid, the
ranks RAS cannot reach, collective counts that differ), and where they disagree with the dumps.

RAS numbers a communicator's ranks its own way. They are the job's ranks only where it says
so: a communicator as large as the job numbers them as the job does (torch's groups list their
ranks in order), and a smaller one's ranks are its processes (host and pid) found in that one,
or in what the job's own files say of its ranks (stack samples, ``collect``'s manifest: a pid
that names one process). Its members then name the job's group with exactly those ranks.
Nothing else is matched: a communicator that cannot be is said in its own numbers, never as
ranks of the job.

What is said, none of it from a clock (the answers' times are their hosts' local time) nor
from the order of the files: a rank RAS considers dead in any answer, or declared dead in its
monitor's events, is dead (RAS's own "for good"); one it never reached in any answer is
unresponsive; a communicator is healthy only where every answer has it RUNNING with every rank
answering and no error; a launch count is a rank's largest (the counters only grow).

A dead or unresponsive rank the report names on an inference (suspected: no dump) is backed
by RAS: its basis says so (``Basis.RAS``), and so do the facts it rests on. It is never named
for that alone: a rank waiting on the culprit is ended by its own watchdog too, and RAS then
sees it dead. A healthy communicator whose group has an op pending is a disagreement
(``RasRunning``): RAS watches that processes answer, not that collectives complete
(NVIDIA/nccl#1730).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from frtrace.detail.ras import RasCommNote, RasRead, RasRunning, RasSkew
from frtrace.evidence.ras import RasFiles, RasStatus
from frtrace.model import (
    Basis,
    Finding,
    GroupRef,
    NamedAs,
    NamedRank,
    RankProcess,
    Report,
    Severity,
)

__all__ = ["MAX_COMM_NOTES", "with_ras"]

MAX_COMM_NOTES = 8  # communicators noted one by one; the others are counted
_DEAD_EVENTS = frozenset({"PEER_DEAD", "PEER_TIMEOUT_DEAD"})
_Process = tuple[str | None, int]  # (host, pid) as RAS knows a process


@dataclass(slots=True)
class _Comm:
    """One communicator, every answer that lists it merged."""

    hash: str
    size: int
    present: dict[int, _Process | None] = field(default_factory=dict)  # rank -> process
    missing: dict[int, _Process | None] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    unresponsive: set[int] = field(default_factory=set)
    errors: set[int] = field(default_factory=set)
    states: set[str] = field(default_factory=set)
    counts: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    healthy: bool = True


def with_ras(report: Report, ras: RasFiles | None) -> Report:
    """``report`` with what NCCL RAS's answers (``ras``) add and where they disagree."""
    if not ras:
        return report
    comms = _merged(ras.statuses)
    procs = _processes(comms, report.world_size, report.processes)
    ranks = [_job_ranks(c, procs, report.world_size) for c in comms]  # (as ``comms``)
    events_dead, strangers = _dead_by_events(ras, procs)
    dead = set(events_dead)
    unreached: set[int] = set()
    notes: list[RasCommNote] = []
    for c, as_job in zip(comms, ranks, strict=True):
        if as_job is not None:
            dead |= {as_job[r] for r in c.dead}
            unreached |= {as_job[r] for r in c.unresponsive - c.dead}
        note = _comm_note(c, as_job, report)
        if note is not None:
            notes.append(note)
    notes.sort(key=lambda n: (not (n.dead or n.unresponsive or n.errors), -n.size, n.hash))
    filled = {r: RankProcess(host=p[0], pid=p[1]) for p, r in procs.items()}
    hosts = tuple(sorted(set(filled) - set(report.processes)))
    read = RasRead(
        files=ras.files,
        nccl_version=", ".join(sorted({s.nccl_version for s in ras.statuses if s.nccl_version}))
        or None,
        comms=len(comms),
        healthy=sum(c.healthy for c in comms),
        unmatched=sum(v is None for v in ranks),
        hosts=hosts,
        dead=tuple(sorted(events_dead)),
        dead_processes=tuple(sorted((host or "unknown", pid) for host, pid in strangers)),
        more=max(0, len(notes) - MAX_COMM_NOTES),
    )
    return replace(
        report,
        data_notes=(*report.data_notes, read, *notes[:MAX_COMM_NOTES]),
        disagreements=(*report.disagreements, *_running(comms, ranks, report)),
        processes={**{r: filled[r] for r in hosts}, **report.processes},
        named_ranks=_backed(report.named_ranks, dead, unreached - dead),
    )


def _merged(statuses: Iterable[RasStatus]) -> list[_Comm]:
    """Every communicator of the answers once (by its two hashes), in the order first met."""
    comms: dict[tuple[str, str], _Comm] = {}
    for status in statuses:
        for comm in status.comms:
            c = comms.setdefault((comm.hash, comm.secondary), _Comm(hash=comm.hash, size=comm.size))
            if comm.size != c.size:
                continue  # (two communicators under one pair of hashes: the first is kept)
            for r in comm.ranks:
                c.present[r.rank] = None if r.pid is None else (r.host, r.pid)
                c.states.add(r.state)
                if r.error:
                    c.errors.add(r.rank)
                for name, n in r.counts:
                    c.counts[name][r.rank] = max(n, c.counts[name].get(r.rank, 0))
            for m in comm.missing:
                c.missing[m.rank] = None if m.pid is None else (m.host, m.pid)
                if m.dead:
                    c.dead.add(m.rank)
                if m.unresponsive or m.dead:
                    c.unresponsive.add(m.rank)
            c.healthy &= not comm.missing and all(
                r.state == "RUNNING" and not r.error for r in comm.ranks
            )
    for c in comms.values():
        c.unresponsive -= set(c.present)  # (answered in another answer: not never reached)
    return list(comms.values())


def _processes(
    comms: list[_Comm], world: int, known: Mapping[int, RankProcess]
) -> dict[_Process, int]:
    """The job's rank of each process RAS names, where it can be told: its rank in a
    communicator as large as the job, else a pid the job's own files give one rank (and RAS
    one process); a process or a rank claimed twice is matched to nothing."""
    claims: dict[_Process, set[int]] = defaultdict(set)
    for c in comms:
        if c.size == world:
            for r, p in (*c.present.items(), *c.missing.items()):
                if p is not None:
                    claims[p].add(r)
    seen = {p for c in comms for p in (*c.present.values(), *c.missing.values()) if p is not None}
    ras_pids = Counter(p[1] for p in seen)
    job_pids = Counter(k.pid for k in known.values() if k.pid is not None)
    by_pid = {k.pid: r for r, k in known.items() if k.pid is not None and job_pids[k.pid] == 1}
    for p in seen - set(claims):
        if ras_pids[p[1]] == 1 and p[1] in by_pid:
            claims[p].add(by_pid[p[1]])
    single = {p: next(iter(rs)) for p, rs in claims.items() if len(rs) == 1}
    per_rank = Counter(single.values())
    return {p: r for p, r in single.items() if per_rank[r] == 1 and 0 <= r < world}


def _job_ranks(c: _Comm, procs: Mapping[_Process, int], world: int) -> dict[int, int] | None:
    """The communicator's ranks as the job's (None: they cannot all be told)."""
    if c.size == world:
        return {r: r for r in range(world)}
    out: dict[int, int] = {}
    for r, p in (*c.present.items(), *c.missing.items()):
        if p is None or p not in procs:
            return None
        out[r] = procs[p]
    if len(out) != c.size or len(set(out.values())) != c.size:
        return None
    return out


def _dead_by_events(ras: RasFiles, procs: Mapping[_Process, int]) -> tuple[set[int], set[_Process]]:
    """The ranks RAS's monitor declared dead, and the dead processes matched to no rank."""
    ranks: set[int] = set()
    strangers: set[_Process] = set()
    for e in ras.events:
        if e.event not in _DEAD_EVENTS or e.pid is None:
            continue
        p = (e.host, e.pid)
        if p in procs:
            ranks.add(procs[p])
        else:
            strangers.add(p)
    return ranks, strangers


def _group(members: tuple[int, ...], groups: Iterable[GroupRef]) -> GroupRef | None:
    same = [g for g in groups if g.members == members]
    return same[0] if len(same) == 1 else None


def _comm_note(c: _Comm, as_job: dict[int, int] | None, report: Report) -> RasCommNote | None:
    """What RAS says of one communicator worth a line; None where it says nothing."""

    def job(ranks: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted(as_job[r] if as_job is not None else r for r in ranks))

    skew = tuple(
        RasSkew(
            function=name,
            counts=tuple(
                (n, job(r for r, v in by_rank.items() if v == n))
                for n in sorted(set(by_rank.values()))
            ),
        )
        for name, by_rank in sorted(c.counts.items())
        if len(set(by_rank.values())) > 1
    )
    states = tuple(sorted(c.states)) if c.states - {"RUNNING"} else ()
    if not (c.dead or c.unresponsive or c.errors or states or skew):
        return None
    members = None if as_job is None else tuple(as_job[r] for r in range(c.size))
    behind = {r for s in skew for n, rs in s.counts[:-1] for r in rs}
    gone = set(job(c.dead | c.unresponsive)) if as_job is not None else set()
    return RasCommNote(
        hash=c.hash,
        size=c.size,
        group=None if members is None else _group(members, report.groups),
        job_ranks=as_job is not None,
        dead=job(c.dead),
        unresponsive=job(c.unresponsive - c.dead),
        errors=job(c.errors),
        states=states,
        skew=skew,
        waiting=tuple(sorted(gone & set(report.victim_ranks))),
        behind_named=as_job is not None
        and bool(behind)
        and behind <= set(report.culprit_ranks) | set(report.suspected_ranks),
    )


def _pending(f: Finding) -> bool:
    """A finding that shows an op of a group pending (a rank waits in it, or is stuck in it)."""
    return (
        f.severity >= Severity.WARNING
        and f.group is not None
        and f.op is not None
        and f.seq is not None
    )


def _running(
    comms: list[_Comm], ranks: list[dict[int, int] | None], report: Report
) -> list[RasRunning]:
    """The first op the dumps show pending (in the report's order) whose communicator RAS
    calls healthy (or every communicator, where none is matched to a pending op's group)."""
    if not report.has_problems:
        return []
    pending = [f for f in report.findings if _pending(f)]
    matched = False
    for f in pending:
        assert f.group is not None and f.op is not None and f.seq is not None
        for c, as_job in zip(comms, ranks, strict=True):
            if as_job is None or tuple(as_job[r] for r in range(c.size)) != f.group.members:
                continue
            matched = True
            if c.healthy:
                return [_said(c.hash, f)]  # (the first: the others say the same)
    if not matched and pending and comms and all(c.healthy for c in comms):
        return [_said(None, pending[0])]
    return []


def _said(hash_: str | None, f: Finding) -> RasRunning:
    assert f.group is not None and f.op is not None and f.seq is not None
    rank = min(f.waiting_ranks) if f.waiting_ranks else min(f.group.members)
    return RasRunning(hash=hash_, group=f.group, rank=rank, op=f.op, seq=f.seq)


def _backed(
    named: tuple[NamedRank, ...], dead: set[int], unreached: set[int]
) -> tuple[NamedRank, ...]:
    """The named ranks, each that RAS saw dead or could not reach saying so; a culprit or a
    suspect named on an inference is backed by RAS (``Basis.RAS``)."""
    out = []
    for n in named:
        fact = "RAS: considered dead" if n.rank in dead else "RAS: unresponsive"
        if n.rank not in dead and n.rank not in unreached:
            out.append(n)
            continue
        basis = n.basis
        if basis == Basis.INFERRED and n.role in (NamedAs.CULPRIT, NamedAs.SUSPECTED):
            basis = Basis.RAS
        out.append(replace(n, basis=basis, rests_on=(*n.rests_on, fact)))
    return tuple(out)
