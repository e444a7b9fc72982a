"""The words of the order findings: a rank that created its process groups in another order
(FR019), members that ran a group's ops in another order (FR020), from their typed evidence."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail.order import GroupHeld, GroupOrder, IssuedOp, OpOrder, RankOrder
from frtrace.model import Finding, OpSignature, Severity
from frtrace.report.words import Words, who

__all__ = ["OrderDetail", "order_words"]

OrderDetail = GroupOrder | OpOrder

_GROUP_FIX = (
    "make every rank create its groups in one order: a loop over a set or a dict's keys whose "
    "order varies (a set of strings follows PYTHONHASHSEED, which differs per process unless "
    "set) or a branch on the rank around new_group; iterate sorted(...), or use DeviceMesh"
)
_THREAD_FIX = (
    "collectives of one group issued from two threads get their sequence numbers in the order "
    "the threads reach the group, which differs between ranks: issue them from one thread, "
    "or order the threads (an event, a queue) alike on every rank, or give each thread its "
    "own group"
)


def order_words(f: Finding, d: OrderDetail) -> Words:
    if isinstance(d, GroupOrder):
        return _group_order(f, d)
    if isinstance(d, OpOrder):
        return _op_order(f, d)
    assert_never(d)


def _nth(k: int) -> str:
    """A group's place in its rank's creation order (``pg_id``; 0 is the default group)."""
    if k <= 0:
        return "default group" if k == 0 else "group (it ran nothing in it)"
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix} group"


def _is(basis: str, role: str) -> str:
    """What a group is: its description, or the op run in it."""
    return f"ran {role}" if basis == "ops" else f"is {role}"


def _held(h: GroupHeld) -> str:
    text = f"rank {h.rank}: its {_nth(h.pg_id)}"
    if h.desc and h.desc not in ("", "undefined"):
        text += f", {h.desc}"
    if h.members:
        text += f", ranks {format_ranks(h.members)}"
    return text


def _group_order(f: Finding, d: GroupOrder) -> Words:
    names = ", ".join(c.name for c in d.conflicts)
    if f.severity < Severity.ERROR:
        return Words(
            summary=(
                f"{who(d.suspects)} hold group{'s' if len(d.conflicts) > 1 else ''} {names} as "
                "different groups (made by different new_group calls), and no majority says "
                "whose creation order differs: suspected, who cannot be told"
            ),
            why="no majority of ranks holds one order of the groups: any side may be the odd one",
            evidence=(*_conflict_lines(d), _GROUP_FIX),
        )
    m = d.misplaced[0]
    its = "its" if len(f.culprit_ranks) == 1 else "their"
    summary = (
        f"{who(f.culprit_ranks)} created {its} process groups in another order than the other "
        f"ranks: rank {m.rank}'s {_nth(m.pg_id)} (named {m.name}) {_is(d.basis, m.role)}; the "
        f"{_nth(m.pg_id)} of {who(m.majority)} {_is(d.basis, m.expected)}, their "
        f"{_nth(m.as_pg_id)} {_is(d.basis, m.role)}. Group names follow the order of the "
        f"new_group calls: group {m.name} is another group on its peers"
    )
    why = "each rank's own entries say the order it made its groups in (pg_id) and " + (
        "each group's description, an argument of the new_group call that made it"
        if d.basis == "desc"
        else "the ops it ran in each; SPMD ranks use their n-th group alike"
    )
    lines = [
        f"rank {x.rank}: its {_nth(x.pg_id)} (named {x.name}) {_is(d.basis, x.role)}; "
        f"{who(x.majority)}: their {_nth(x.pg_id)} {_is(d.basis, x.expected)}, their "
        f"{_nth(x.as_pg_id)} {_is(d.basis, x.role)}"
        for x in d.misplaced
    ]
    return Words(summary=summary, why=why, evidence=(*lines, *_conflict_lines(d), _GROUP_FIX))


def _conflict_lines(d: GroupOrder) -> list[str]:
    how = {"desc": "descriptions", "members": "members", "ops": "ops at one seq"}
    return [
        f"group {c.name} is held as different groups ({how[c.by]}): "
        + "; ".join(_held(h) for h in c.held)
        for c in d.conflicts
    ]


def _sig(sig: OpSignature) -> str:
    ins = [list(s) for s in sig.input_sizes[:2]]
    return f"{sig.op} in={ins}"


def _op(op: IssuedOp) -> str:
    thread = f" (thread {op.thread})" if op.thread else ""
    return f"#{op.seq} {_sig(op.sig)}{thread}"


def _sequence(o: RankOrder, d: OpOrder) -> str:
    """The order's ops by name, or with their sizes where the names alone are all one."""
    same = len({op.sig.op for x in d.orders for op in x.ops}) == 1
    return ", ".join(_sig(op.sig) if same else op.sig.op for op in o.ops)


def _op_order(f: Finding, d: OpOrder) -> Words:
    label = f.group.label if f.group is not None else "?"
    span = f"#{d.first}-#{d.last}"
    threads = dict(d.threads)
    raced = [r for r in d.odd if threads.get(r, 0) > 1] or list(threads)
    race = (
        f"; {who(tuple(sorted(raced)))} issued ops on it from several threads: their order "
        "is a race"
        if raced
        else ""
    )
    if f.severity < Severity.ERROR:
        sides = "; ".join(f"{who(o.ranks)}: {_sequence(o, d)}" for o in d.orders)
        summary = (
            f"members of {label} ran the same ops at {span} in other orders with no majority "
            f"({sides}): suspected, who cannot be told{race}"
        )
        why = "no order is held by a majority of the members: any side may be the odd one"
    else:
        theirs, mine = d.orders[0], d.orders[1:]
        summary = (
            f"{who(f.culprit_ranks)} ran the ops of {label} at {span} in another order than "
            f"{who(d.majority)}: "
            + "; ".join(f"{who(o.ranks)}: {_sequence(o, d)}" for o in mine)
            + f", where they ran {_sequence(theirs, d)}{race}"
        )
        why = (
            "the same ops at the same sequence numbers, in another order: each rank's own "
            "entries (a rank that skipped or added an op would go on disagreeing after them)"
        )
    lines = [
        f"{who(o.ranks)} (rank {o.shown}'s entries): " + ", ".join(_op(op) for op in o.ops)
        for o in d.orders
    ]
    if threads:
        lines.append(
            "threads that issued ops on the group: "
            + ", ".join(f"rank {r}: {n}" for r, n in d.threads)
        )
    if d.unseen:
        lines.append(f"{who(d.unseen)} left no dump: their order would count")
    if threads:
        lines.append(_THREAD_FIX)
    return Words(summary=summary, why=why, evidence=tuple(lines))
