"""FR020 (``rules.op_order``, ``facts.reorder``): a rank that ran a group's ops in another
order, on facts built from dumps (``tests/analysis/facts_builder.py``).

Two all_reduces per step, a small one (``M``, a metrics thread's) then a large one (``G``, the
main thread's); a rank whose two are swapped is found wherever the swap is, named where a
majority keeps the other order, only suspected where none does (two against two, or members
without a dump that would decide), and renumbering the ranks renumbers the answer. A rank
that skipped an op, or ran another one, is no reorder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import pytest

from frtrace.analysis.diagnose import diagnose_facts
from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import op_order
from frtrace.model import FindingKind, Severity, Verdict
from tests.analysis.facts_builder import Job

Op = tuple[tuple[int, ...], str]  # (sizes, issuing thread)
M: Op = ((16,), "2")
G: Op = ((64,), "1")
STEPS = 5  # (10 ops per rank)


def _alternating(n: int = 2 * STEPS) -> list[Op]:
    return [M if i % 2 == 0 else G for i in range(n)]


def _swapped(at: int, n: int = 2 * STEPS) -> list[Op]:
    """Ops #at and #at+1 (1-based) swapped."""
    ops = _alternating(n)
    ops[at - 1], ops[at] = ops[at], ops[at - 1]
    return ops


def _facts(
    orders: Mapping[int, Sequence[Op]],
    *,
    world: int = 4,
    group: tuple[int, ...] | None = None,
    done: int = 0,
    missing: Sequence[int] = (),
) -> Facts:
    """Each rank's ops on one group (the default group, or ``group``'s members as group "1"),
    the first ``done`` seqs finished by everyone, the rest still in flight."""
    job = Job(world=world, backend="gloo", missing=missing)
    name = "0" if group is None else job.group("1", group, desc="metrics")
    for rank, ops in sorted(orders.items()):
        for seq, (sizes, thread) in enumerate(ops, start=1):
            state: Literal["completed", "scheduled"] = "completed" if seq <= done else "scheduled"
            job.enter(
                "all_reduce", seq, ranks=(rank,), group=name, sizes=sizes, state=state,
                thread_id=thread,
            )  # fmt: skip
    return job.facts()


@pytest.mark.parametrize("odd", [0, 3])
@pytest.mark.parametrize("at", [1, 4, 7])
@pytest.mark.parametrize("subgroup", [False, True])
def test_a_swap_is_found_wherever_it_is(odd: int, at: int, subgroup: bool) -> None:
    ranks = (0, 1, 3) if subgroup else (0, 1, 2, 3)
    orders = {r: _swapped(at) if r == odd else _alternating() for r in ranks}
    facts = _facts(orders, group=ranks if subgroup else None, done=at - 1)
    (found,) = facts.reorders
    assert (found.first, found.last) == (at, at + 1)
    assert found.classes == (tuple(r for r in ranks if r != odd), (odd,))
    (f,) = op_order.check(facts)
    assert (f.kind, f.severity, f.culprit_ranks) == (FindingKind.OP_ORDER, Severity.ERROR, (odd,))
    assert f.seq == at and f.detail.majority == tuple(r for r in ranks if r != odd)  # type: ignore[union-attr]
    report = diagnose_facts(facts)
    assert (report.verdict, report.culprit_ranks, report.suspected_ranks) == (
        Verdict.DESYNC,
        (odd,),
        (),
    )
    # what matching saw in that window (a mismatch, a "shift") is the swap's own evidence
    assert [x.kind for x in report.findings if x.severity == Severity.ERROR] == [
        FindingKind.OP_ORDER
    ]


def test_the_threads_that_issued_the_ops_are_said() -> None:
    facts = _facts({r: _swapped(5) if r == 2 else _alternating() for r in range(4)}, done=4)
    (f,) = op_order.check(facts)
    assert f.detail.threads == ((0, 2), (1, 2), (2, 2), (3, 2))  # type: ignore[union-attr]
    odd = f.detail.orders[1]  # type: ignore[union-attr]
    assert [op.thread for op in odd.ops] == ["1", "2"]  # its large op first, by the main thread
    orders = {r: _swapped(5) if r == 2 else _alternating() for r in range(4)}
    one_thread = {r: [(sizes, "1") for sizes, _ in ops] for r, ops in orders.items()}
    (g,) = op_order.check(_facts(one_thread, done=4))
    assert g.detail.threads == () and g.culprit_ranks == (2,)  # type: ignore[union-attr]


def test_two_against_two_cannot_tell_and_suspects_both_sides() -> None:
    orders = {r: _swapped(5) if r in (2, 3) else _alternating() for r in range(4)}
    facts = _facts(orders, done=4)
    (f,) = op_order.check(facts)
    assert (f.severity, f.culprit_ranks) == (Severity.WARNING, ())
    assert (f.detail.majority, f.detail.odd) == ((), (0, 1, 2, 3))  # type: ignore[union-attr]
    report = diagnose_facts(facts)
    assert report.verdict == Verdict.CANNOT_TELL
    assert (report.culprit_ranks, report.suspected_ranks) == ((), (0, 1, 2, 3))
    assert {n.role for n in report.named_ranks} == {"suspected"}


def test_a_pair_that_disagrees_cannot_tell() -> None:
    facts = _facts({0: _alternating(), 1: _swapped(3)}, world=2, done=2)
    report = diagnose_facts(facts)
    assert (report.verdict, report.culprit_ranks, report.suspected_ranks) == (
        Verdict.CANNOT_TELL,
        (),
        (0, 1),
    )


def test_members_without_a_dump_that_could_decide_leave_it_undecided() -> None:
    """Two against one, with one member's order unknown: it may side with the one."""
    orders = {0: _alternating(), 1: _alternating(), 2: _swapped(5)}
    undecided = _facts(orders, done=4, missing=(3,))
    (f,) = op_order.check(undecided)
    assert f.severity == Severity.WARNING and f.detail.unseen == (3,)  # type: ignore[union-attr]
    orders[3] = _alternating()
    (g,) = op_order.check(_facts(orders, done=4))
    assert (g.severity, g.culprit_ranks) == (Severity.ERROR, (2,))


@pytest.mark.parametrize("perm", [(3, 2, 1, 0), (2, 0, 3, 1), (1, 3, 0, 2)])
def test_ranks_renumbered_give_the_renumbered_answer(perm: tuple[int, ...]) -> None:
    orders = {r: _swapped(5) if r == 1 else _alternating() for r in range(4)}
    renumbered = {perm[r]: ops for r, ops in orders.items()}
    report = diagnose_facts(_facts(renumbered, done=4))
    assert (report.verdict, report.culprit_ranks) == (Verdict.DESYNC, (perm[1],))
    tie = {perm[r]: _swapped(5) if r in (0, 2) else _alternating() for r in range(4)}
    assert diagnose_facts(_facts(tie, done=4)).suspected_ranks == (0, 1, 2, 3)


def test_a_skipped_op_is_not_a_reorder() -> None:
    """Rank 2 skips #5's small op: its next ops go on disagreeing (a shift, the desync rule's)."""
    skipped = _alternating()[:4] + _alternating()[5:] + [M]
    facts = _facts({r: skipped if r == 2 else _alternating() for r in range(4)}, done=4)
    assert facts.reorders == ()
    assert op_order.check(facts) == []
    assert diagnose_facts(facts).culprit_ranks == (2,)


def test_another_op_is_not_a_reorder() -> None:
    other = _alternating()
    other[4] = G  # a large op where the others ran a small one, then the same again
    facts = _facts({r: other if r == 2 else _alternating() for r in range(4)}, done=4)
    assert facts.reorders == ()
    assert diagnose_facts(facts).culprit_ranks == (2,)
