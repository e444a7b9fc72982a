"""Members of a group that called something else at the same sequence number.

For every (group, seq) whose members' signatures differ (see ``match``), the majority defines
what the op should have been; the minority are the culprits. The kind is the first thing that
differs: op name, then sizes (under each op family's rules), then dtypes. A tie at the top
(two-rank groups are common: pipeline pairs, tp=2) is broken by the sibling groups of the same
kind, which in SPMD training run the same op at the same seq; failing that, every side is
named and the confidence is low, unless members without a dump did not vote: their calls
would make the majority, so the rule cannot tell which side is wrong and names no one (a
warning that keeps the sides as candidates and says whose dumps would settle it).

A rank that skipped or added a collective disagrees with its group at every later seq. When its
later ops line up with the majority's shifted by a few positions, that is reported once as a
sequence shift at the first disagreement instead of a cascade of mismatches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import pandas as pd

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.signatures import signature_at
from frtrace.detail import Mismatch, RankSignature
from frtrace.evidence.model import FailureKind
from frtrace.load.dumpset import DumpSet
from frtrace.model import Confidence, Finding, FindingKind, OpSignature, Severity

__all__ = ["MAX_SHIFT", "MIN_SHIFT_RUN", "check"]

# How far (in collectives) a shifted rank is searched for, and how many of its following ops
# must line up with the majority's for the shift to be believed.
MAX_SHIFT = 3
MIN_SHIFT_RUN = 2


@dataclass(frozen=True, slots=True)
class _Disagreement:
    seq: int
    culprits: frozenset[int]
    majority: frozenset[int]
    kind: FindingKind
    rows: dict[int, int]  # rank -> entries row
    ops: dict[int, str]
    sibling_backers: int = 0  # >0: the majority was decided by sibling groups (a tie inside)
    by_size_rule: bool = False  # the tie was decided by the op family's size rule
    receiver: tuple[int, int, int] | None = None  # (rank, received, expected): its word decided
    unseen: tuple[int, ...] = ()  # a tie members without a dump would settle: undecided


_DIFFERS_IN: dict[FindingKind, Literal["op", "sizes", "dtypes"]] = {
    FindingKind.OP_MISMATCH: "op",
    FindingKind.SIZE_MISMATCH: "sizes",
    FindingKind.DTYPE_MISMATCH: "dtypes",
}


def _classify(a: OpSignature, b: OpSignature) -> FindingKind:
    if a.op != b.op:
        return FindingKind.OP_MISMATCH
    if (a.input_sizes, a.output_sizes) != (b.input_sizes, b.output_sizes):
        return FindingKind.SIZE_MISMATCH
    return FindingKind.DTYPE_MISMATCH


def check(facts: Facts) -> list[Finding]:
    """One finding per group and distinct set of disagreeing ranks, at its first seq."""
    dumps, membership, match = facts.dumps, facts.membership, facts.matched
    bad = match.consensus[~match.consensus["consistent"].astype(bool)][["gid", "seq"]]
    if bad.empty:
        return []
    rows = match.collectives.merge(bad, on=["gid", "seq"], how="inner")
    by_group: dict[int, list[_Disagreement]] = defaultdict(list)
    siblings = _Siblings(membership, match)
    loaded = facts.loaded
    heard = _Receivers(facts, dumps)
    for _, part in rows.groupby(["gid", "seq"], sort=True):
        gid, seq = int(part["gid"].iloc[0]), int(part["seq"].iloc[0])
        members = membership.groups[gid].members
        size_rule = _SizeRule(dumps, len(members))
        d = _disagreement(seq, part, lambda g=gid, q=seq: siblings.votes(g, q), size_rule)
        if d is not None and not d.majority:
            d = heard.decide(d, members)
        if d is not None and not d.majority:
            unseen = tuple(m for m in members if m not in loaded)
            d = replace(d, unseen=unseen) if unseen else d
        if d is not None:
            by_group[gid].append(d)
    findings: list[Finding] = []
    for gid, items in sorted(by_group.items()):
        first: dict[frozenset[int], _Disagreement] = {}
        later: dict[frozenset[int], int] = defaultdict(int)
        for d in items:
            if d.culprits in first:
                later[d.culprits] += 1
            else:
                first[d.culprits] = d
        for culprits, d in first.items():
            findings.append(_finding(dumps, membership, match, gid, d, later[culprits]))
    return findings


class _Siblings:
    """Groups of the same kind (same description and size: every tp group, every dp group).

    In SPMD training they run the same collectives at the same seq, so when the two members of
    a 2-rank group disagree, the sibling groups say which side did the expected thing.
    """

    def __init__(self, membership: Membership, match: MatchResult) -> None:
        self.membership = membership
        self.match = match
        self.of = {gid: membership.siblings(gid) for gid in range(len(membership.groups))}
        self._by_gid: dict[int, pd.DataFrame] | None = None

    def votes(self, gid: int, seq: int) -> dict[tuple[str, int], int]:
        """(op, sig) -> how many members of sibling groups recorded it at ``seq``."""
        if self._by_gid is None:
            coll = self.match.collectives
            self._by_gid = {
                int(part["gid"].iloc[0]): part.set_index("seq") for _, part in coll.groupby("gid")
            }
        out: dict[tuple[str, int], int] = defaultdict(int)
        for other in self.of.get(gid, []):
            part = self._by_gid.get(other)
            if part is None or seq not in part.index:
                continue
            at = part.loc[[seq]]
            for op, sig in zip(at["op"].tolist(), at["sig"].tolist(), strict=True):
                out[(str(op), int(sig))] += 1
        return out


# bytes an element, by the dtype names the Flight Recorder writes
_ITEM_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
}  # fmt: skip


class _Receivers:
    """Gloo's size check on a rank with no entry at the disputed seq: the rank received
    ``received`` bytes where its own op expected ``expected``. Its op is then the side whose
    bytes are to the other side's as ``expected`` to ``received``: one more member on that
    side, which may break a tie (the check names the receiver, never the sender)."""

    def __init__(self, facts: Facts, dumps: DumpSet) -> None:
        self.dumps = dumps
        self.said = [
            (f.rank, f.sizes[0], f.sizes[1])
            for f in facts.evidence.failures
            if f.kind == FailureKind.SIZE_CHECK and f.rank is not None and f.sizes is not None
        ]

    def _bytes(self, row: int, op: str) -> int | None:
        sig = signature_at(self.dumps, row, op=op)
        item = _ITEM_BYTES.get(sig.input_dtypes[0]) if sig.input_dtypes else None
        numel = sum(_numel(s) for s in sig.input_sizes)
        return None if item is None or not numel else numel * item

    def decide(self, d: _Disagreement, members: tuple[int, ...]) -> _Disagreement:
        said = [(r, got, want) for r, got, want in self.said if r in members and r not in d.rows]
        sides: dict[int, list[int]] = defaultdict(list)
        for rank, row in d.rows.items():
            size = self._bytes(row, d.ops[rank])
            if size is None:
                return d
            sides[size].append(rank)
        if len(set(d.ops.values())) != 1 or len(sides) != 2 or len({r for r, *_ in said}) != 1:
            return d
        (small, few), (large, many) = sorted(sides.items())
        rank, got, want = said[0]
        if want <= 0 or got * small != want * large:
            return d  # (its bytes do not tell the two sides apart)
        if len(few) + 1 <= len(many):
            return d
        majority = frozenset(few)
        culprits = frozenset(d.rows) - majority
        return replace(d, majority=majority, culprits=culprits, receiver=(rank, got, want))


def _tie_break(
    sides: dict[tuple[str, int], list[int]], votes: dict[tuple[str, int], int]
) -> tuple[list[int], int] | None:
    """The side the sibling groups agree with, and how many sibling members back it."""
    ops_differ = len({op for op, _ in sides}) > 1
    scores: dict[tuple[str, int], int] = {}
    for key in sides:
        if ops_differ:  # siblings may pass other sizes (pipeline stages): compare ops only
            scores[key] = sum(n for (op, _), n in votes.items() if op == key[0])
        else:
            scores[key] = votes.get(key, 0)
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return sides[ranked[0][0]], ranked[0][1]


# all_gather's output holds every member's input; reduce_scatter the reverse. A side of a tie
# whose sizes break the rule for the group's size is the wrong one.
GATHER_OPS = frozenset(
    {"all_gather", "_all_gather_base", "all_gather_into_tensor", "all_gather_single", "allgather"}
)
SCATTER_OPS = frozenset(
    {"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "reduce_scatter_single"}
)


class _SizeRule:
    """Checks one entry's sizes against its op family's rule for the group's size."""

    def __init__(self, dumps: DumpSet, group_size: int) -> None:
        self.dumps = dumps
        self.group_size = group_size

    def holds(self, op: str, row: int) -> bool | None:
        """True / False for the ops the rule covers; None for every other op."""
        if op not in GATHER_OPS and op not in SCATTER_OPS:
            return None
        sig = signature_at(self.dumps, row, op=op)
        numel_in = sum(_numel(s) for s in sig.input_sizes)
        numel_out = sum(_numel(s) for s in sig.output_sizes)
        if not numel_in or not numel_out:
            return None
        if op in GATHER_OPS:
            return numel_out == numel_in * self.group_size
        return numel_in == numel_out * self.group_size


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _disagreement(
    seq: int,
    part: pd.DataFrame,
    sibling_votes: Callable[..., dict[tuple[str, int], int]],
    size_rule: _SizeRule | None = None,
) -> _Disagreement | None:
    sides: dict[tuple[str, int], list[int]] = defaultdict(list)
    rows: dict[int, int] = {}
    ops: dict[int, str] = {}
    for rank, op, sig, row in zip(
        part["rank"].tolist(),
        part["op"].tolist(),
        part["sig"].tolist(),
        part["row"].tolist(),
        strict=True,
    ):
        sides[(str(op), int(sig))].append(int(rank))
        rows[int(rank)] = int(row)
        ops[int(rank)] = str(op)
    if len(sides) < 2:
        return None
    ranked = sorted(sides.values(), key=lambda ranks: (-len(ranks), min(ranks)))
    backers = 0
    by_rule = False
    majority: frozenset[int] = frozenset()
    if len(ranked[0]) > len(ranked[1]):
        majority = frozenset(ranked[0])
    else:
        # The size rule judges sizes against the op each side called: it can only pick a
        # side when both called the same op (each side's sizes may well fit its own op).
        same_op = len(set(ops.values())) == 1
        lawful = [
            ranks
            for ranks in sides.values()
            if same_op and size_rule is not None and size_rule.holds(ops[ranks[0]], rows[ranks[0]])
        ]
        if len(lawful) == 1 and len(sides) == 2:  # only one side obeys the op's size rule
            majority = frozenset(lawful[0])
            by_rule = True
        else:
            broken = _tie_break(sides, sibling_votes())
            if broken is not None:
                majority, backers = frozenset(broken[0]), broken[1]
    culprits = frozenset(rows) - majority if majority else frozenset(rows)
    kind = FindingKind.OP_MISMATCH if len(set(ops.values())) > 1 else FindingKind.SIZE_MISMATCH
    return _Disagreement(seq, culprits, majority, kind, rows, ops, backers, by_rule)


def _finding(
    dumps: DumpSet,
    membership: Membership,
    match: MatchResult,
    gid: int,
    d: _Disagreement,
    n_later: int,
) -> Finding:
    group = membership.groups[gid]
    ref_rank = min(d.majority) if d.majority else min(d.rows)
    expected = signature_at(dumps, d.rows[ref_rank], op=d.ops[ref_rank])
    actual = {r: signature_at(dumps, d.rows[r], op=d.ops[r]) for r in sorted(d.culprits)}
    kinds = {_classify(expected, sig) for r, sig in actual.items() if r != ref_rank}
    kind = min(kinds, key=list(FindingKind).index) if kinds else d.kind
    culprits = tuple(sorted(d.culprits))
    waiting = tuple(sorted(d.majority))
    shift = _shift(match, gid, d.seq, culprits) if d.majority else None
    differs_in = _DIFFERS_IN[kind]
    basis: Literal["majority", "size_rule", "siblings", "receiver", "no_majority", "undecided"]
    basis = "undecided" if d.unseen else "no_majority"
    confidence = Confidence.LOW
    if d.majority:
        confidence, basis = Confidence.HIGH, "majority"
        if d.by_size_rule:
            confidence, basis = Confidence.MEDIUM, "size_rule"
        elif d.sibling_backers:
            confidence, basis = Confidence.MEDIUM, "siblings"
        elif d.receiver is not None:
            confidence, basis = Confidence.MEDIUM, "receiver"
    if shift is not None:
        kind = FindingKind.SEQUENCE_SHIFT
    sides = sorted({ref_rank: expected, **actual}.items())
    return Finding(
        kind=kind,
        # undecided: which side is wrong rests on calls no dump shows, so no one is named
        severity=Severity.WARNING if d.unseen else Severity.ERROR,
        culprit_ranks=() if d.unseen else culprits,
        waiting_ranks=waiting,
        group=group,
        seq=d.seq,
        op=expected.op,
        expected=expected if d.majority else None,
        actual=actual,
        confidence=confidence,
        detail=Mismatch(
            culprits=culprits,
            waiting=waiting,
            differs_in=differs_in,
            sides=tuple(RankSignature(rank=r, sig=sig) for r, sig in sides),
            reference=ref_rank,
            recorded=len(d.rows),
            group_size=len(group.members),
            basis=basis,
            backers=d.sibling_backers,
            receiver=d.receiver,
            shift=shift,
            later=n_later,
            unseen=d.unseen,
        ),
    )


def _shift(match: MatchResult, gid: int, seq: int, culprits: tuple[int, ...]) -> int | None:
    """How many collectives the culprits skipped (> 0) or added (< 0), when their later ops
    line up with the others' shifted by it."""
    coll = match.collectives[match.collectives["gid"] == gid]
    others = coll[~coll["rank"].isin(culprits)]
    if others.empty:
        return None
    votes: dict[int, dict[tuple[str, int], int]] = defaultdict(lambda: defaultdict(int))
    for s, op, sig in zip(
        others["seq"].tolist(), others["op"].tolist(), others["sig"].tolist(), strict=True
    ):
        votes[int(s)][(str(op), int(sig))] += 1
    majority = {s: max(v.items(), key=lambda kv: kv[1])[0] for s, v in votes.items()}
    verdicts: set[int] = set()
    for rank in culprits:
        mine = coll[(coll["rank"] == rank) & (coll["seq"] >= seq)].sort_values("seq")
        ops = {
            int(s): (o, int(g))
            for s, o, g in zip(mine["seq"], mine["op"], mine["sig"], strict=True)
        }
        found = None
        for delta in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=abs):
            if delta == 0:
                continue
            pairs = [(ops[s], majority.get(s + delta)) for s in sorted(ops)]
            pairs = [(a, b) for a, b in pairs if b is not None]
            if len(pairs) >= MIN_SHIFT_RUN and all(a == b for a, b in pairs):
                found = delta
                break
        if found is None:
            return None
        verdicts.add(found)
    return verdicts.pop() if len(verdicts) == 1 else None
