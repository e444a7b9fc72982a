"""FR019 (``rules.group_order``, ``facts.creation``): a rank that created its process groups
in another order, on facts built from dumps (``tests/analysis/facts_builder.py``).

The job of ``tests/fixtures/gloo_order/new_group_order__*``, stated entry by entry: a 2 x 2
mesh (tp [0, 1] [2, 3] named 1, 2; dp [0, 2] [1, 3] named 3, 4); the odd rank made dp first,
so its tp group [2, 3] is named 4 (dp [1, 3] on rank 1), its 2nd group. Ranks 0 and 1 finish
tp #1; rank 0 waits in dp (3), rank 1 in dp (4) against the odd rank's tp all_gather there,
rank 2 in tp (2). Found by the groups' descriptions, or by the ops at each creation index
where they have none; renumbered ranks give the renumbered answer; two ranks that hold one
name apart with no majority are only suspected; groups of one name on disjoint ranks
(``split_group``) and a job whose ranks agree are no conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from frtrace.analysis.diagnose import diagnose_facts
from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import group_order
from frtrace.model import FindingKind, Severity, Verdict
from tests.analysis.facts_builder import Job

IDENTITY = (0, 1, 2, 3)


def _mesh(perm: tuple[int, ...] = IDENTITY, *, descs: bool = True, odd: int = 3) -> Facts:
    """The fixture's job, rank r renumbered ``perm[r]``; ``descs``: new_group(group_desc=)."""
    p = perm
    job = Job(world=4, backend="gloo")
    for name, members, desc in (
        ("1", (0, 1), "tp"),
        ("2", (2, 3), "tp"),
        ("3", (0, 2), "dp"),
        ("4", (1, 3), "dp"),
    ):
        job.group(name, tuple(p[m] for m in members), desc=desc)

    def op(rank: int, name: str, desc: str, pg_id: int, kind: str, done: bool) -> None:
        sizes, out = ((8,), [[2, 8]]) if kind == "all_gather" else ((32,), [[32]])
        job.enter(
            kind, 1, ranks=(p[rank],), group=name, sizes=sizes, output_sizes=out,
            state="completed" if done else "scheduled", pg_id=pg_id,
            process_group=(name, desc if descs else "undefined"),
        )  # fmt: skip

    others = [r for r in IDENTITY if r != odd]
    assert odd == 3 and others == [0, 1, 2]  # (the layout above is rank 3's fault)
    op(0, "1", "tp", 1, "all_gather", True)
    op(1, "1", "tp", 1, "all_gather", True)
    op(0, "3", "dp", 2, "all_reduce", False)
    op(1, "4", "dp", 2, "all_reduce", False)
    op(2, "2", "tp", 1, "all_gather", False)
    op(3, "4", "tp", 2, "all_gather", False)  # its tp group is named 4, its 2nd
    return job.facts()


@pytest.mark.parametrize("descs", [True, False])
def test_the_rank_that_made_its_groups_in_another_order_is_named(descs: bool) -> None:
    facts = _mesh(descs=descs)
    assert facts.creation.basis == ("desc" if descs else "ops")
    (m,) = facts.creation.misplaced
    assert (m.rank, m.pg_id, m.name, m.as_pg_id, m.majority) == (3, 2, "4", 1, (0, 1))
    (f,) = group_order.check(facts)
    assert (f.kind, f.severity, f.culprit_ranks) == (FindingKind.GROUP_ORDER, Severity.ERROR, (3,))
    assert f.waiting_ranks == (0, 1, 2)
    report = diagnose_facts(facts)
    assert (report.verdict, report.culprit_ranks, report.suspected_ranks) == (
        Verdict.DESYNC,
        (3,),
        (),
    )
    # the mismatch in group 4 and the ranks waiting alone are its consequences, not findings
    kinds = {x.kind for x in report.findings}
    assert FindingKind.UNSEEN_MEMBERS not in kinds and FindingKind.OP_MISMATCH not in kinds
    assert report.named_ranks[0].basis == "observed"


@pytest.mark.parametrize("perm", [(3, 2, 1, 0), (2, 0, 3, 1), (1, 3, 0, 2)])
def test_ranks_renumbered_give_the_renumbered_answer(perm: tuple[int, ...]) -> None:
    for descs in (True, False):
        report = diagnose_facts(_mesh(perm, descs=descs))
        assert (report.verdict, report.culprit_ranks) == (Verdict.DESYNC, (perm[3],))


def _pair(descs: Mapping[int, str], **fields: Any) -> Facts:
    """Two ranks whose group named 1 is, for each, the group of its description."""
    job = Job(world=2, backend="gloo")
    job.group("1", (0, 1))
    for rank, desc in descs.items():
        job.enter("all_reduce", 1, ranks=(rank,), group="1", pg_id=1,
                  process_group=("1", desc), **fields)  # fmt: skip
    return job.facts()


def test_one_name_held_apart_with_no_majority_cannot_tell() -> None:
    facts = _pair({0: "tp", 1: "dp"})
    (f,) = group_order.check(facts)
    assert (f.severity, f.culprit_ranks, f.detail.suspects) == (Severity.WARNING, (), (0, 1))  # type: ignore[union-attr]
    report = diagnose_facts(facts)
    assert (report.verdict, report.culprit_ranks, report.suspected_ranks) == (
        Verdict.CANNOT_TELL,
        (),
        (0, 1),
    )


def test_ranks_that_agree_are_no_conflict() -> None:
    assert _pair({0: "tp", 1: "tp"}).creation.conflicts == ()
    assert group_order.check(_pair({0: "tp", 1: "tp"})) == []


def _nccl(members_of_3: Mapping[str, tuple[int, ...]]) -> Facts:
    """NCCL: every rank records its groups' members (``pg_config``); rank 3's record of
    ``members_of_3``'s names says other members."""

    class Recorded(Job):
        def dump(self, rank: int) -> dict[str, Any]:
            out = super().dump(rank)
            if rank == 3:
                for name, members in members_of_3.items():
                    out["pg_config"][name] = {"name": name, "desc": "undefined",
                                              "ranks": str(list(members))}  # fmt: skip
            return out

    job = Recorded(world=4)
    for name, members in (("1", (0, 1)), ("2", (2, 3)), ("3", (0, 2)), ("4", (1, 3))):
        job.group(name, members, desc="undefined")
    job.done("all_reduce", [1])
    return job.facts()


def test_members_a_peer_contradicts_are_a_conflict() -> None:
    """Rank 3 says group 2 is [1, 3] where rank 2 lists it in [2, 3]: made by another call."""
    facts = _nccl({"2": (1, 3), "4": (2, 3)})
    assert {(c.name, c.by) for c in facts.creation.conflicts} == {
        ("2", "members"),
        ("4", "members"),
    }
    (f,) = group_order.check(facts)
    assert f.severity == Severity.WARNING and 3 in f.detail.suspects  # type: ignore[union-attr]


def test_groups_of_one_name_on_disjoint_ranks_are_no_conflict() -> None:
    """``split_group`` names disjoint groups alike: [0, 1] and [2, 3] both named 5."""

    class Split(Job):
        def dump(self, rank: int) -> dict[str, Any]:
            out = super().dump(rank)
            mine = [0, 1] if rank < 2 else [2, 3]
            out["pg_config"]["5"] = {"name": "5", "desc": "undefined", "ranks": str(mine)}
            return out

    job = Split(world=4)
    job.done("all_reduce", [1])
    assert job.facts().creation.conflicts == ()
