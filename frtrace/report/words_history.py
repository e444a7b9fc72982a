"""A restarted job's history in words: one line per attempt, and the ranks and hosts named in
several (``Report.history``; every format says them alike).

``attempt 0: hang; rank 1 (on node-1): never joined all_reduce #9 of pg 0 (from 3 of 4 dumps
and 7 logs and error files)``; ``rank 1 (node-1) was the culprit in attempts 0 and 1 (this
one): suspect the machine, not the code``.
"""

from __future__ import annotations

from collections.abc import Sequence

from frtrace.model import AttemptSummary, FindingKind, History, RepeatOffender, Verdict
from frtrace.report.common import compact_ranks, plural, ranks_phrase

__all__ = ["attempt_line", "history_lines", "left_out_line", "repeat_line", "same_hang_as"]

_VERDICT = {
    Verdict.HEALTHY: "healthy",
    Verdict.STRAGGLERS: "healthy, with stragglers",
    Verdict.HANG: "hang",
    Verdict.DESYNC: "desync",
    Verdict.CANNOT_TELL: "cannot tell",
}

# What the leading finding says of its ranks, in a few words ({op}: "all_reduce #9 of pg 0").
_WHAT = {
    FindingKind.NEVER_JOINED: "never joined {op}",
    FindingKind.OP_MISMATCH: "called a different collective at {op}",
    FindingKind.SIZE_MISMATCH: "other tensor sizes in {op}",
    FindingKind.DTYPE_MISMATCH: "other dtypes in {op}",
    FindingKind.NOT_STARTED: "never started {op} on its GPU",
    FindingKind.P2P_UNMATCHED: "never posted the peer op of {op}",
    FindingKind.DEADLOCK: "waiting on each other in a cycle (deadlock)",
    FindingKind.MISSING_DUMP: "the others stopped in {op}",
    FindingKind.STUCK_IN_COLLECTIVE: "every member stuck in {op} (below the recorder)",
    FindingKind.IN_FLIGHT: "{op} in flight when dumped",
    FindingKind.SEQUENCE_SHIFT: "skipped or added a collective (seen at {op})",
    FindingKind.UNRECORDED_OPS: "ran ops the recorder does not write",
    FindingKind.FIRST_FAILURE: "failed first",
    FindingKind.NAMED_BY_ERROR: "named by an error message",
    FindingKind.STACK_OUTLIER: "in host code while the others wait",
    FindingKind.UNSEEN_MEMBERS: "blocked in {op}, which the other members never recorded",
    FindingKind.RUNNING_SNAPSHOT: "a running job dumped at one instant",
    FindingKind.NOTHING_RECORDED: "no rank recorded any op",
    FindingKind.GROUP_ORDER: "made its process groups in another order (seen at {op})",
    FindingKind.OP_ORDER: "ran a group's ops in another order (seen at {op})",
}
MAX_HOSTS = 3  # hosts named in one line; the JSON report has them all
_WRONG = frozenset({Verdict.HANG, Verdict.DESYNC, Verdict.CANNOT_TELL})


def history_lines(history: History) -> list[str]:
    """This attempt's line first, then one per other attempt, in attempt order."""
    every = (history.this, *history.others)
    return [attempt_line(a, this=a is history.this, same=same_hang_as(history, a)) for a in every]


def same_hang_as(history: History, a: AttemptSummary) -> int | None:
    """The first attempt before ``a`` that hung the same way (the same fingerprint: the same
    kind, group, op, place and named ranks), where ``a`` found something wrong; else None."""
    if a.fingerprint is None or a.verdict not in _WRONG:
        return None
    earlier = (b.attempt for b in (history.this, *history.others) if b.attempt < a.attempt)
    same = {b.attempt for b in (history.this, *history.others) if b.fingerprint == a.fingerprint}
    return min((n for n in earlier if n in same), default=None)


def attempt_line(a: AttemptSummary, *, this: bool = False, same: int | None = None) -> str:
    """``attempt 0: hang; rank 1 (on node-1): never joined all_reduce #9 of pg 0 (from ...)``;
    ``same``: the earlier attempt that hung the same way (``same_hang_as``)."""
    label = f"attempt {a.attempt}" + (" (this report)" if this else " (later)" if a.later else "")
    if a.died_in_init:  # (no hang to name anyone of: its ranks never ran an op)
        return f"{label}: died in init_process_group, no op recorded ({_basis(a)})"
    said = f"{label}: {_VERDICT[a.verdict]}"
    who, what = _who(a), _what(a)
    if who and what:
        said += f"; {who}: {what}"
    elif who or what:
        said += f"; {who or what}"
    if same is not None:
        said += f"; the same hang as attempt {same}"
    return f"{said} ({_basis(a)})"


def _who(a: AttemptSummary) -> str:
    hosts = dict(a.hosts)
    parts = []
    if a.culprit_ranks:
        parts.append(ranks_phrase(a.culprit_ranks) + _hosts(a.culprit_ranks, hosts))
    for why, ranks in a.suspected_why or (("no dump", a.suspected_ranks),):
        if ranks:
            parts.append(f"suspected ({why}) {ranks_phrase(ranks)}" + _hosts(ranks, hosts))
    return "; ".join(parts)


def _hosts(ranks: Sequence[int], hosts: dict[int, str]) -> str:
    """`` (on node-1)`` for one rank; `` (1 on node-1, 3 on node-2)`` for several."""
    known = [(r, hosts[r]) for r in ranks if r in hosts]
    if not known:
        return ""
    if len(ranks) == 1:
        return f" (on {known[0][1]})"
    said = [f"{r} on {h}" for r, h in known[:MAX_HOSTS]]
    if len(known) > MAX_HOSTS:
        said.append(f"+{len(known) - MAX_HOSTS} more")
    return f" ({', '.join(said)})"


def _what(a: AttemptSummary) -> str:
    if a.kind is None:
        return ""
    op = a.op or "an op"
    if a.seq is not None:
        op += f" #{a.seq}"
    if a.group is not None:
        op += f" of {a.group.label}"
    what = _WHAT[a.kind].format(op=op)
    if a.kind == FindingKind.FIRST_FAILURE and a.cause is not None:
        what += f" ({a.cause})"
    return what


def _basis(a: AttemptSummary) -> str:
    dumps = f"{a.ranks_loaded} of {plural(a.world_size, 'dump')}"
    if not a.evidence_files:
        return f"from {dumps}"
    files = plural(a.evidence_files, "log or error file", "logs and error files")
    return f"from {dumps} and {files}"


def repeat_line(r: RepeatOffender, this: int) -> str:
    """A rank or host named in several attempts, said plainly (``this``: the report's)."""
    attempts = _attempts(r.attempts, this)
    if r.rank is None:
        host = r.hosts[0] if r.hosts else "?"
        return (
            f"host {host} held the culprit in {attempts} ({ranks_phrase(r.ranks)}): suspect "
            "the machine, not the code"
        )
    if len(r.hosts) > 1:
        return (
            f"rank {r.rank} was the culprit in {attempts}, on {_and(list(r.hosts))}: the same "
            f"rank on different machines points at what rank {r.rank} does (its data, its "
            "shard), not at one machine"
        )
    if r.hosts:
        return (
            f"rank {r.rank} ({r.hosts[0]}) was the culprit in {attempts}: suspect the machine, "
            "not the code"
        )
    return f"rank {r.rank} was the culprit in {attempts}: suspect its machine, not the code"


def left_out_line(history: History) -> str | None:
    """How many attempts were not analysed, and how to analyse one; None where none."""
    if not history.left_out:
        return None
    n = len(history.left_out)
    return (
        f"{plural(n, 'other attempt')} not analysed ({compact_ranks(history.left_out)}): "
        f"--attempt N analyses one"
    )


def _attempts(numbers: Sequence[int], this: int) -> str:
    said = [f"{n} (this one)" if n == this else str(n) for n in numbers]
    return f"attempt{'s' if len(said) != 1 else ''} {_and(said)}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
