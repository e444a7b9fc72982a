"""What torch's own checks say the ranks called: its collective check, and Gloo's size check.

With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` torch wraps every process group in a checker
(``ProcessGroupWrapper``): before each collective every rank shares what it is about to call
(op, sequence number, shapes, dtypes) and, where any rank's differs from its own, raises
"Detected mismatch between collectives on ranks. Rank X is running collective: ..., but Rank
Y is running collective: ...". X is the reporter, Y the first rank (in group-rank order) whose
call differs from X's, so the ranks before Y called what X did. Nothing hangs: every rank
raises, the wrong one too, each naming itself and one other. Together the messages show what
each rank called: where more than half the group called one thing, the ranks that called
something else are the culprits, observed by torch itself (a desync, whatever else is seen).
Where no call has more than half the group, every side is named when every rank's call is
shown (low confidence), and no one while ranks not shown would decide it (a warning).

Gloo's size check ("Received data size doesn't match expected size. Is there a distributed
collective mismatch in your code?") aborts the rank that *received* too many bytes and does
not say who sent them: where the entries show no disagreement of their own, it is a desync
nobody is named for (a warning that says so), unless the aborted rank left no dump and every
other member of a group holding it left one whose newest op of the group is one and the same
collective: the sender was one of them, so the aborted rank called another op or size, and
is named. (Where the entries do disagree, the aborted rank's bytes may break a tie there:
``rules.desync``.)

A message numbers the ranks of the op's process group, not the job's: one whose numbering
cannot be told (``evidence.messages.job_ranks``) names no one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from frtrace.analysis.facts import Facts
from frtrace.detail import GlooSizeHint, SaidMismatch
from frtrace.evidence.messages import job_ranks
from frtrace.evidence.model import Call, Failure, FailureKind
from frtrace.model import Confidence, Finding, FindingKind, GroupRef, OpSignature, Severity

__all__ = ["MAX_MESSAGES", "check"]

MAX_MESSAGES = 4  # of torch's messages kept with a finding

_KIND: dict[str, FindingKind] = {
    "op": FindingKind.OP_MISMATCH,
    "sizes": FindingKind.SIZE_MISMATCH,
    "dtypes": FindingKind.DTYPE_MISMATCH,
    "seq": FindingKind.SEQUENCE_SHIFT,
}
_Differs = Literal["op", "sizes", "dtypes", "seq"]
_ORDER: tuple[_Differs, ...] = ("op", "sizes", "dtypes", "seq")


def check(facts: Facts) -> list[Finding]:
    return _mismatch(facts) + _size_hint(facts)


def _claims(facts: Facts) -> tuple[dict[int, Call], list[Failure], int] | None:
    """Each job's rank's call, as torch's messages show it, the messages, and the size of
    the group; None where the messages contradict each other (or none can be read)."""
    world = facts.dumps.world.size
    groups = [(g.members, g.inferred) for g in facts.membership.groups]
    claims: dict[int, Call] = {}
    used: list[Failure] = []
    size = 0
    for f in facts.evidence.failures:
        if f.kind != FailureKind.COLLECTIVE_MISMATCH or len(f.calls) != 2:
            continue
        mine, other = f.calls
        # torch compares ranks in order: those before the first that differs called as X did
        # (where it compared whole calls; its length check says only that Y's length differs)
        before = tuple(range(other.rank)) if other.op is not None else ()
        said = (mine.rank, other.rank, *before)
        numbered = job_ranks(said, as_rank=mine.rank, reporter=f.rank, world=world, groups=groups)
        if numbered is None:
            continue
        calls = [mine, other, *(mine for _ in before)]
        for rank, call in zip(numbered.ranks, calls, strict=True):
            known = claims.get(rank)
            if known is None or known.op is None:
                claims[rank] = Call(
                    rank=rank, op=call.op, seq=call.seq, shapes=call.shapes, dtypes=call.dtypes
                )
            elif call.op is not None and not known.same(call):
                return None  # (two messages disagree on one rank's call: not one event)
        used.append(f)
        size = max(size, numbered.size)
    return (claims, used, size) if used else None


def _signature(call: Call, stack: tuple[str, ...]) -> OpSignature:
    """A call as the dumps' ops are compared (its first tensor's shape, its dtypes)."""
    shape = None if call.shapes is None else _shape(call.shapes)
    return OpSignature(
        op=call.op or "?",
        input_sizes=() if shape is None else (shape,),
        output_sizes=(),
        input_dtypes=tuple(t.strip() for t in (call.dtypes or "").split(",") if t.strip()),
        output_dtypes=(),
        stack=stack,
    )


def _shape(text: str) -> tuple[int, ...] | None:
    """``(4, 4)`` of torch's ``[4, 4]``; None where it is not a shape."""
    parts = [p.strip() for p in text.strip("[]").split(",") if p.strip()]
    return tuple(int(p) for p in parts) if all(p.isdigit() and len(p) < 19 for p in parts) else None


def _stacks(used: list[Failure], claims: dict[int, Call]) -> dict[int, tuple[str, ...]]:
    """Where each reporting rank's traceback says its call was made (its own call only)."""
    return {f.rank: (f.where,) for f in used if f.rank in claims and f.where is not None}


def _differs(a: Call, b: Call) -> _Differs:
    if a.op is None or b.op is None:
        return "sizes"  # (torch's length check: the number or the shapes of tensors differ)
    if a.op != b.op:
        return "op"
    if a.shapes != b.shapes:
        return "sizes"
    if a.dtypes != b.dtypes:
        return "dtypes"
    return "seq"


def _mismatch(facts: Facts) -> list[Finding]:
    found = _claims(facts)
    if found is None:
        return []
    claims, used, size = found
    sides: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for rank, call in sorted(claims.items()):
        # (a call whose op is not known is a side of its own)
        key = (call.op, call.seq, call.shapes, call.dtypes) if call.op else ("?", rank)
        sides[key].append(rank)
    largest = max(sides.values(), key=lambda ranks: (len(ranks), -ranks[0]))
    others = tuple(sorted(r for r in claims if r not in largest))
    if not others:
        return []  # (every rank shown called the same: the messages are of another event)
    basis: Literal["majority", "no_majority", "undecided"] = "majority"
    if 2 * len(largest) <= size:
        basis = "no_majority" if len(claims) >= size else "undecided"
    reference = claims[largest[0]]
    differs_in = min((_differs(reference, claims[r]) for r in others), key=_ORDER.index)
    culprits = others if basis == "majority" else tuple(sorted(claims))
    agreeing = tuple(largest) if basis == "majority" else ()
    stacks = _stacks(used, claims)
    ref_stack = next((stacks[r] for r in largest if r in stacks), ())
    return [
        Finding(
            kind=_KIND[differs_in],
            # undecided: which side is wrong rests on calls no message shows: no one named
            severity=Severity.WARNING if basis == "undecided" else Severity.ERROR,
            culprit_ranks=() if basis == "undecided" else culprits,
            waiting_ranks=agreeing,
            op=reference.op if basis == "majority" else None,
            expected=_signature(reference, ref_stack) if basis == "majority" else None,
            actual={r: _signature(claims[r], stacks.get(r, ())) for r in culprits},
            confidence=Confidence.HIGH if basis == "majority" else Confidence.LOW,
            detail=SaidMismatch(
                culprits=culprits,
                agreeing=agreeing,
                differs_in=differs_in,
                sides=(reference, *(claims[r] for r in others)),
                reference=largest[0] if basis == "majority" else None,
                shown=len(claims),
                group_size=size,
                basis=basis,
                messages=tuple(_one_per_rank(used)[:MAX_MESSAGES]),
            ),
            failures=tuple(_one_per_rank(used)[: 2 * MAX_MESSAGES]),
        )
    ]


def _one_per_rank(failures: list[Failure]) -> list[Failure]:
    """The first message of each reporting rank (a log and its --tee copy say it twice)."""
    seen: set[int | None] = set()
    out = []
    for f in failures:
        if f.rank not in seen or f.rank is None:
            seen.add(f.rank)
            out.append(f)
    return out


@dataclass(frozen=True, slots=True)
class _Others:
    group: GroupRef
    members: tuple[int, ...]


def _size_hint(facts: Facts) -> list[Finding]:
    hints = [f for f in facts.evidence.failures if f.kind == FailureKind.SIZE_CHECK]
    if not hints:
        return []
    consensus = facts.matched.consensus
    if not consensus.empty and not consensus["consistent"].astype(bool).all():
        return []  # (the entries show the disagreement themselves: the desync rule says who)
    receivers = tuple(sorted({f.rank for f in hints if f.rank is not None}))
    sized = next((f.sizes for f in hints if f.sizes is not None), None)
    alike = _all_others_alike(facts, receivers, sized)
    return [
        Finding(
            kind=FindingKind.SIZE_MISMATCH,
            severity=Severity.ERROR if alike else Severity.WARNING,
            culprit_ranks=receivers if alike else (),
            waiting_ranks=alike[0].members if alike else receivers,
            group=alike[0].group if alike else None,
            seq=alike[1] if alike else None,
            op=alike[2] if alike else None,
            confidence=Confidence.MEDIUM,
            detail=GlooSizeHint(
                receivers=receivers,
                received=None if sized is None else sized[0],
                expected=None if sized is None else sized[1],
                messages=tuple(_one_per_rank(hints)[:MAX_MESSAGES]),
                others=alike[0].members if alike else (),
            ),
            failures=tuple(_one_per_rank(hints)[: 2 * MAX_MESSAGES]),
        )
    ]


def _all_others_alike(
    facts: Facts, receivers: tuple[int, ...], sized: tuple[int, int] | None
) -> tuple[_Others, int, str] | None:
    """Where one rank was aborted and left no dump (its own op is not recorded), and every
    other member of a group holding it left a dump whose newest op of the group is one and
    the same collective (Gloo retires a failed op like a finished one): the sender was one of
    them, in that op, and the receiver's op was another (it expected another size): the
    receiver is the odd one."""
    if len(receivers) != 1 or sized is None or sized[0] == sized[1]:
        return None
    (rank,) = receivers
    if rank in facts.loaded:
        return None
    coll = facts.matched.collectives
    for index, group in enumerate(facts.membership.groups):
        others = tuple(m for m in group.members if m != rank)
        if rank not in group.members or not others or not set(others) <= facts.loaded:
            continue
        mine = coll[coll["gid"] == index]
        if mine.empty:
            continue
        newest = mine.sort_values("seq").groupby("rank").tail(1)
        if sorted(newest["rank"].tolist()) != sorted(others):
            continue
        if newest[["seq", "op", "sig"]].drop_duplicates().shape[0] == 1:
            seq, op = int(newest["seq"].iloc[0]), str(newest["op"].iloc[0])
            return _Others(group=group, members=others), seq, op
    return None
