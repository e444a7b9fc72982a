"""A restarted job's history: each other attempt's report in short, and the ranks and hosts
named as culprits in several attempts.

The other attempts are analysed by the same diagnosis as the report's own (the pipeline
hands each one's report in: ``analyse``), each from its own evidence
(``frtrace.load.restarts``). An attempt's summary names only the ranks its own report names
(its culprits; its suspects, inferred from missing dumps, apart), and only ranks of the job.

A **repeat offender** is a rank named as a culprit in two or more attempts (this one
included), or a host that held a culprit in two or more: a job restarted on the same machines
that fails on the same one again points at the machine (a GPU, a NIC, a host's memory), not
at the code, which every rank runs alike. Suspects never count: in a restarted job's folder
most dumps of an earlier attempt were overwritten by the next one, so "no dump" says nothing.

Each summary keeps its report's fingerprint (``frtrace.analysis.fingerprint``): two attempts
with the same one hung the same way ("same hang as attempt 0", ``report.words_history``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from frtrace.model import (
    AttemptSummary,
    Finding,
    History,
    RepeatOffender,
    Report,
    Severity,
    suspected_why,
)

__all__ = ["MAX_OTHER_ATTEMPTS", "repeat_offenders", "summarise", "with_history"]

# The other attempts analysed, the nearest to the report's first. Each is a whole diagnosis
# (an earlier attempt's folder is usually a few stale dumps and its logs: fast), but a job
# restarted a hundred times should not cost a hundred; the rest are counted as left out.
MAX_OTHER_ATTEMPTS = 8


def with_history(
    report: Report,
    attempt: int,
    others: Sequence[int],
    analyse: Callable[[int], Report],
    inits: Collection[int] = (),
) -> Report:
    """``report`` (of attempt ``attempt``) with the history of the ``others``: each analysed
    by ``analyse`` (at most ``MAX_OTHER_ATTEMPTS``, the nearest first) and summarised, and the
    repeat offenders among them and this one. ``inits``: the attempts that died in init
    (``frtrace.load.inits``): said so, nobody of theirs named."""
    if not others:
        return report
    nearest = sorted(set(others) - {attempt}, key=lambda n: (abs(n - attempt), n))
    chosen = sorted(nearest[:MAX_OTHER_ATTEMPTS])
    summaries = tuple(
        summarise(n, analyse(n), later=n > attempt, died_in_init=n in inits) for n in chosen
    )
    this = summarise(attempt, report, later=False, died_in_init=attempt in inits)
    history = History(
        this=this,
        others=summaries,
        left_out=tuple(sorted(nearest[MAX_OTHER_ATTEMPTS:])),
        repeats=repeat_offenders((this, *summaries)),
    )
    return replace(report, history=history)


def summarise(
    attempt: int, report: Report, *, later: bool, died_in_init: bool = False
) -> AttemptSummary:
    """One attempt's report in short: its verdict, the ranks it names (only the job's) and
    their hosts where known, and its leading finding; of an attempt that died in init, that
    alone (its ranks' deaths in init are no hang's culprits)."""
    if died_in_init:
        return AttemptSummary(
            attempt=attempt,
            later=later,
            verdict=report.verdict,
            culprit_ranks=(),
            world_size=report.world_size,
            ranks_loaded=len(report.ranks_loaded),
            evidence_files=len(report.evidence_files),
            died_in_init=True,
        )
    world = report.world_size
    suspected = tuple(r for r in report.suspected_ranks if 0 <= r < world)
    culprits = tuple(r for r in report.culprit_ranks if 0 <= r < world and r not in suspected)
    hosts = tuple(
        (r, host)
        for r in sorted({*culprits, *suspected})
        if (p := report.processes.get(r)) is not None and (host := p.host)
    )
    lead = _lead(report)
    cause = next((f.kind for f in lead.failures if f.rank in culprits), None) if lead else None
    return AttemptSummary(
        attempt=attempt,
        later=later,
        verdict=report.verdict,
        culprit_ranks=culprits,
        suspected_ranks=suspected,
        suspected_why=tuple(
            (why, kept) for why, ranks in suspected_why(report) if (kept := _within(ranks, world))
        ),
        hosts=hosts,
        kind=None if lead is None else lead.kind,
        group=None if lead is None else lead.group,
        op=None if lead is None else lead.op,
        seq=None if lead is None else lead.seq,
        cause=cause,
        world_size=world,
        ranks_loaded=len(report.ranks_loaded),
        evidence_files=len(report.evidence_files),
        fingerprint=report.fingerprint,  # (the same hang as another attempt: words_history)
    )


def _within(ranks: tuple[int, ...], world: int) -> tuple[int, ...]:
    return tuple(r for r in ranks if 0 <= r < world)


def _lead(report: Report) -> Finding | None:
    """The finding that stands for the verdict: the most severe naming one of its ranks,
    else the most severe worth a line (warning or error)."""
    named = set(report.culprit_ranks) | set(report.suspected_ranks)
    shown = [f for f in report.findings if f.severity >= Severity.WARNING]
    return next((f for f in shown if named & set(f.culprit_ranks)), shown[0] if shown else None)


def repeat_offenders(attempts: Sequence[AttemptSummary]) -> tuple[RepeatOffender, ...]:
    """The ranks named as culprits in two or more of ``attempts``, then the hosts that held
    culprits in two or more where those are not one rank (that rank says it already)."""
    by_rank: dict[int, list[int]] = defaultdict(list)
    by_host: dict[str, list[tuple[int, int]]] = defaultdict(list)
    hosts_of: dict[int, set[str]] = defaultdict(set)
    for a in attempts:
        where = dict(a.hosts)
        for r in a.culprit_ranks:
            by_rank[r].append(a.attempt)
            if r in where:
                hosts_of[r].add(where[r])
                by_host[where[r]].append((a.attempt, r))
    out = [
        RepeatOffender(attempts=tuple(sorted(set(ns))), rank=r, hosts=tuple(sorted(hosts_of[r])))
        for r, ns in sorted(by_rank.items())
        if len(set(ns)) >= 2
    ]
    for host, seen in sorted(by_host.items()):
        numbers = tuple(sorted({n for n, _ in seen}))
        ranks = tuple(sorted({r for _, r in seen}))
        if len(numbers) >= 2 and len(ranks) >= 2:
            out.append(RepeatOffender(attempts=numbers, hosts=(host,), ranks=ranks))
    return tuple(out)
