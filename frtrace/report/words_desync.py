"""The words of the desync and deadlock findings (FR002-FR004 and FR011 mismatches, FR003 on
all_to_all splits, the same from torch's own checks, FR006 from a send/recv cycle, FR007
deadlocks), from their typed evidence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail import (
    CycleStep,
    Deadlock,
    DecidedBy,
    GlooSizeHint,
    Mismatch,
    OrderConflict,
    PatternBroken,
    SaidMismatch,
    SplitMismatch,
)
from frtrace.evidence.model import Call
from frtrace.model import Finding, OpSignature
from frtrace.report.words import Words, held_too, who

__all__ = ["DesyncDetail", "desync_words"]

DesyncDetail = Mismatch | SplitMismatch | Deadlock | PatternBroken | SaidMismatch | GlooSizeHint

_NOUN = {
    "op": "called a different collective",
    "sizes": "passed different sizes",
    "dtypes": "passed different dtypes",
}


def _first(values: Sequence[Any], shown: int = 4) -> str:
    """``[a, b, c, d] +N``: a coalesced op can carry thousands of tensors."""
    more = f" +{len(values) - shown}" if len(values) > shown else ""
    return f"{list(values[:shown])}{more}"


def _dtypes(values: Sequence[str], shown: int = 4) -> str:
    """``Float`` / ``Float,Half``: dtype names joined with commas, never a Python list."""
    if not values:
        return "-"
    more = f" +{len(values) - shown}" if len(values) > shown else ""
    return ",".join(values[:shown]) + more


def _sizes_text(sig: OpSignature) -> str:
    ins = _first([list(s) for s in sig.input_sizes])
    outs = _first([list(s) for s in sig.output_sizes])
    return f"{sig.op} in={ins} out={outs}"


def _describe(sig: OpSignature, differs_in: str) -> str:
    if differs_in == "op":
        return sig.op
    if differs_in == "sizes":
        return _sizes_text(sig)
    return f"{sig.op} dtypes={_dtypes(sig.input_dtypes)}"


def _label(f: Finding) -> str:
    return f.group.label if f.group is not None else "?"


def _mismatch(f: Finding, d: Mismatch) -> Words:
    label, seq = _label(f), f.seq
    sigs = {s.rank: s.sig for s in d.sides}
    expected = sigs[d.reference]
    named = who(d.culprits)
    n = len(d.waiting)
    if d.basis in ("no_majority", "undecided"):
        summary = f"members of {label} disagree at #{seq} with no majority: " + "; ".join(
            f"rank {s.rank}: {_describe(s.sig, d.differs_in)}" for s in d.sides
        )
        why = "no majority: any side may be the wrong one"
        if d.basis == "undecided":
            summary += f"; cannot tell which of {who(d.culprits)} is wrong"
            why = (
                f"no majority among the {d.recorded} of {d.group_size} members that recorded "
                f"#{seq}; {who(d.unseen)} left no dump: their calls would decide it"
            )
    else:
        summary = (
            f"{named} {_NOUN[d.differs_in]} at {expected.op} #{seq} of {label}: "
            f"{_describe(sigs[d.culprits[0]], d.differs_in)} where "
            f"{n} other rank{'s have' if n != 1 else ' has'} {_describe(expected, d.differs_in)}"
        )
        if d.basis == "size_rule":
            why = (
                f"the group's members are split evenly; only ranks {format_ranks(d.waiting)} "
                f"pass sizes that fit {expected.op} on {d.group_size} ranks"
            )
        elif d.basis == "receiver" and d.receiver is not None:
            rank, got, want = d.receiver
            why = (
                f"the members with a dump are split evenly; Gloo aborted rank {rank}, which "
                f"received {got} bytes where its op expected {want}: it called #{seq} like "
                f"{who(d.waiting)} (the other side's op is {got // max(want, 1)}x its size)"
            )
        elif d.basis == "siblings":
            why = (
                f"the group's members are split evenly; {d.backers} members of other groups "
                f"like {label} did what ranks {format_ranks(d.waiting)} did at #{seq}"
            )
        else:
            why = f"{n} of {d.recorded} members that recorded #{seq} agree"
    lines = [
        f"rank {s.rank}: {_sizes_text(s.sig)} dtypes={_dtypes(s.sig.input_dtypes)} "
        f"state={s.sig.state}"
        for s in d.sides
    ]
    if d.unseen:
        lines.append(
            f"the dumps of {who(d.unseen)} (TORCH_FR_DUMP_TEMP_FILE on their hosts) would "
            f"settle it: the side they called #{seq} like is the right one"
        )
    if d.shift is not None:
        k = d.shift
        shifted = (
            f"skipped {k} collective{'s' if k > 1 else ''}"
            if k > 0
            else f"made {-k} extra collective call{'s' if k < -1 else ''}"
        )
        summary = f"{named} {shifted} in {label} (first disagreement at #{seq})"
        lines.append(
            f"its collectives after #{seq} line up with the others' when shifted: the "
            "later disagreements are consequences, not separate faults"
        )
    if d.later:
        lines.append(
            f"{d.later} later seq(s) of {label} disagree on the same ranks "
            "(follow-on effects of this one)"
        )
    return Words(summary, why, tuple(lines))


def _splits(f: Finding, d: SplitMismatch) -> Words:
    first = d.pairs[0]
    more = f" (and {d.total - 1} more pairs)" if d.total > 1 else ""
    lines = [
        f"rank {p.sender} sends {p.sends} elements to rank {p.receiver}, which expects "
        f"{p.expects} from it"
        for p in d.pairs
    ]
    if d.total > len(d.pairs):
        lines.append(f"{d.total - len(d.pairs)} more mismatched pairs")
    return Words(
        f"{f.op} #{f.seq} of {_label(f)}: rank {first.sender} sends {first.sends} elements to "
        f"rank {first.receiver}, which expects {first.expects}{more}",
        f"rank {d.culprits[0]} is in every mismatched pair"
        if len(d.culprits) == 1
        else f"the split sizes of ranks {format_ranks(d.culprits)} disagree pairwise; "
        "which side is wrong is not recorded",
        tuple(lines),
    )


def _step(s: CycleStep) -> str:
    seq = f" #{s.seq}" if s.seq is not None else ""
    return f"rank {s.rank} is in {s.op}{seq} of {s.group.label}, waiting for rank {s.waits_for}"


def _conflict(c: OrderConflict) -> str:
    return (
        f"ranks {format_ranks(c.first_here)} entered #{c.seq_here} of {c.group_here.label} "
        f"first, ranks {format_ranks(c.first_there)} entered #{c.seq_there} of "
        f"{c.group_there.label} first"
    )


def _decided_by(r: DecidedBy) -> str:
    return {
        "majority": f"{r.fewer} against {r.more}",
        "previous_step": "their order at the previous step",
        "cycle_history": "each rank's order at the previous step",
        "early_movers": "one op entered early by fewer ranks than the ops others entered",
        "habit": "each rank's own habit: what followed the op before at every earlier step",
    }[r.how]


def _deadlock(d: Deadlock) -> Words:
    steps = [_step(s) for s in d.steps]
    if d.deviators:
        lead = (
            f"{who(d.deviators)} entered shared groups in a different order than the other ranks: "
        )
        why = "decided by " + " and ".join(sorted({_decided_by(r) for r in d.decided_by}))
    else:
        lead = ""
        why = (
            "the dumps do not show which of them changed the order (no majority, no "
            "earlier step in the buffers): each is named"
        )
    n = len(d.component)
    size = f"ranks {format_ranks(d.component)}" if n <= 8 else f"{n} ranks"
    return Words(
        f"cross-group deadlock: {lead}{size} wait on each other ({'; '.join(steps)})"
        + held_too(d.held),
        why,
        (
            *(_conflict(c) for c in d.conflicts),
            *steps,
            "every rank must enter shared groups in the same order",
        ),
    )


def _pattern_broken(d: PatternBroken) -> Words:
    parts = []
    for p in d.broke:
        want = "recv" if p.posted == "send" else "send"
        parts.append(
            f"rank {p.rank} never posted the {want} matching rank {p.peer}'s "
            f"{'send' if want == 'recv' else 'recv'} in {p.group.label}: it posted a {p.posted} "
            "instead, breaking the pattern it repeated every step"
        )
    return Words(
        "; ".join(parts)
        + f"; ranks {format_ranks(d.component)} wait on each other"
        + held_too(d.held),
        "decided by each rank's repeating send/recv pattern with its peer",
        tuple(f"rank {p.rank} is blocked in {p.posted} with rank {p.peer}" for p in d.blocked),
    )


_DETAIL = "torch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL)"


def _call(c: Call, differs_in: str) -> str:
    """``broadcast``; ``all_reduce of [64]``; one torch could not read: said so."""
    if c.op is None:
        return "a call whose tensors differ in number or shape (torch compared only lengths)"
    if differs_in == "sizes":
        return f"{c.op} of {c.shapes or 'no tensor'}"
    if differs_in == "dtypes":
        return f"{c.op} of {c.dtypes or 'no tensor'}"
    if differs_in == "seq":
        return f"{c.op} at its group's op {c.seq}"
    return c.op


def _said(d: SaidMismatch) -> Words:
    ref, others = d.sides[0], d.sides[1:]
    n = len(d.agreeing)
    if d.basis == "majority":
        first = others[0]
        summary = (
            f"{who(d.culprits)} {_NOUN.get(d.differs_in, 'called something else')}: "
            f"{_call(first, d.differs_in)} where {n} other rank{'s' if n != 1 else ''} called "
            f"{_call(ref, d.differs_in)}, as {_DETAIL} says on {who(_reporters(d))}"
        )
        why = (
            f"torch compared every rank's call before running it; its messages show "
            f"{d.shown} of the group's {d.group_size} ranks, {n} of them alike"
        )
    else:
        summary = f"ranks called different collectives with no majority, {_DETAIL} says: " + (
            "; ".join(f"rank {c.rank}: {_call(c, d.differs_in)}" for c in d.sides)
        )
        why = "every rank's call is shown and none has more than half: any side may be wrong"
        if d.basis == "undecided":
            summary += f"; cannot tell which of {who(d.culprits)} is wrong"
            why = (
                f"torch's messages show {d.shown} of the group's {d.group_size} ranks and no "
                "call has more than half of them: the calls not shown would decide it"
            )
    lines = [
        f"rank {c.rank}: {c.op or '?'} seq={c.seq if c.seq is not None else '?'} "
        f"shapes={c.shapes or '-'} dtypes={c.dtypes or '-'}"
        for c in d.sides
    ]
    lines += [f"{m.source}: {m.message}" for m in d.messages]
    return Words(summary, why, tuple(lines))


def _reporters(d: SaidMismatch) -> tuple[int, ...]:
    return tuple(sorted({m.rank for m in d.messages if m.rank is not None}))


def _size_hint(f: Finding, d: GlooSizeHint) -> Words:
    if d.others and f.group is not None:
        sizes = f"{d.received} bytes where its own op expected {d.expected}"
        return Words(
            f"{who(d.receivers)} called another op or size than {who(d.others)} at "
            f"{f.op} #{f.seq} of {f.group.label}: Gloo aborted it on receiving {sizes}",
            f"every other member of {f.group.label} left a dump and is in {f.op} #{f.seq} "
            f"alike, so the sender was one of them, in that op, and {who(d.receivers)}'s op "
            "expected another size; its own call is not recorded",
            tuple(f"{m.source}: {m.message}" for m in d.messages),
        )
    by = who(d.receivers) if d.receivers else "a rank"
    sizes = (
        f" ({d.received} bytes where it expected {d.expected})"
        if d.received is not None and d.expected is not None
        else ""
    )
    return Words(
        f"Gloo aborted {by}: it received more bytes than its op expected{sizes}, a collective "
        "mismatch (ranks called different ops or sizes); which rank sent them, no line says",
        "Gloo's size check names the rank that received, never the one that sent; no Flight "
        "Recorder entry shows which rank passed another op or size",
        tuple(f"{m.source}: {m.message}" for m in d.messages),
    )


def desync_words(f: Finding, d: DesyncDetail) -> Words:
    """The summary, why and evidence of a desync or deadlock finding."""
    if isinstance(d, Mismatch):
        return _mismatch(f, d)
    if isinstance(d, SaidMismatch):
        return _said(d)
    if isinstance(d, GlooSizeHint):
        return _size_hint(f, d)
    if isinstance(d, SplitMismatch):
        return _splits(f, d)
    if isinstance(d, Deadlock):
        return _deadlock(d)
    if isinstance(d, PatternBroken):
        return _pattern_broken(d)
    assert_never(d)
