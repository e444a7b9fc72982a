"""Naming discipline (issue 50): every rank the report names has a basis, observed or inferred,
and the facts it rests on (``Report.named_ranks``, the JSON's ``named_ranks``)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from frtrace.analysis.codec import decode_report, encode_report
from frtrace.detail.notes import PresumedHeldUp, StragglerBasis
from frtrace.model import (
    OBSERVED_KINDS,
    Basis,
    FindingKind,
    NamedAs,
    Report,
    Straggler,
    named_ranks,
)
from frtrace.pipeline import analyze
from frtrace.report.common import headline
from frtrace.report.json import render_json, report_to_dict
from frtrace.report.json_schema import report_schema
from frtrace.report.select import Selection, select
from tests.conftest import FIXTURES, GLOO, fixture_sets

SETS = {str(d.relative_to(FIXTURES)): d for d in fixture_sets()}

# Culprits (``culprit_ranks``) that rest on an inference only: what the verdict names today,
# pinned so that a change either way is seen. A rank with no dump that its peers wait on,
# named where nothing observed names anyone (``culprit_ranks`` lists the suspects too: FR008);
# the ranks blocked in groups that no other member recorded, named by elimination (FR016).
NO_DUMP_ONLY = {
    "damaged": (2, 3),
    "gloo/size_mismatch_crashed": (3,),
    "gloo_json/size_mismatch_crashed": (3,),
    "gloo_capture/ddp_rank0_log__recorder": (0,),
    "gloo_capture_json/ddp_rank0_log__recorder": (0,),
    "incidents/restart": (3,),
    "incidents/restart_dies_in_init": (2,),
    "incidents/shrinking_world": (1,),
    "nccl/missing_dump/2.10-pickle": (3,),
    "nccl/missing_dump/2.4-json": (3,),
    "stacks/store_hang/127.0.0.2": (2, 3),
    "incidents/two_hosts_clock/host-b": (0, 1),  # (one host's folder alone)
}
# ranks the stacks alone single out where something is wrong that the entries cannot pin on
# anyone (FR015): here collectives the recorder counted and never wrote (issue 52, item 6)
FROM_STACKS = {"recorders/monitored_barrier": (1,)}
BY_ELIMINATION = {
    "gloo_evidence/cycle_new_group__signal": (0, 1, 2),
    "gloo_evidence/cycle_new_group__timer": (0, 1, 2),
    "gloo_evidence_json/cycle_new_group__timer": (0, 1, 2),
}


@cache
def report_of(name: str) -> Report:
    return analyze(SETS[name])


def _presumed(report: Report) -> set[int]:
    return {n.rank for n in report.data_notes if isinstance(n, PresumedHeldUp)}


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_named_rank_has_a_basis_within_the_world(name: str) -> None:
    """Each rank the report names is listed once, in the world, with a basis; only a culprit
    is ever observed, and one observed rests on a finding that observes it."""
    report = report_of(name)
    named = {n.rank: n for n in report.named_ranks}
    assert [n.rank for n in report.named_ranks] == sorted(named)  # once each, by rank
    everyone = {
        *report.culprit_ranks,
        *report.suspected_ranks,
        *_presumed(report),
        *(s.rank for s in report.stragglers),
    }
    assert set(named) == everyone
    assert all(0 <= r < report.world_size for r in named)
    codes = {f.code for f in report.findings if f.kind in OBSERVED_KINDS}
    for n in named.values():
        assert n.basis in (Basis.OBSERVED, Basis.INFERRED) and n.rests_on
        if n.basis == Basis.OBSERVED:
            assert n.role == NamedAs.CULPRIT and set(n.rests_on) & codes
    for r in report.suspected_ranks:
        assert named[r].role == NamedAs.SUSPECTED and named[r].basis == Basis.INFERRED
    assert report_to_dict(report)["named_ranks"] == [
        {"rank": n.rank, "role": str(n.role), "basis": str(n.basis), "rests_on": [*n.rests_on]}
        for n in report.named_ranks
    ]


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_culprit_is_observed_or_suspected(name: str) -> None:
    """A rank is a culprit only where the dumps or the job's own words observe it; one named
    on an inference is suspected, and the headline says why (issue 50, naming discipline). The
    sets with such ranks are pinned (``NO_DUMP_ONLY``, ``BY_ELIMINATION``)."""
    report = report_of(name)
    named = {n.rank: n for n in report.named_ranks}
    inferred = tuple(r for r in report.culprit_ranks if named[r].basis != Basis.OBSERVED)
    assert inferred == NO_DUMP_ONLY.get(name, ()) + BY_ELIMINATION.get(name, ()) + FROM_STACKS.get(
        name, ()
    )
    assert set(inferred) <= set(report.suspected_ranks)
    line = headline(report)
    for r in NO_DUMP_ONLY.get(name, ()):
        assert named[r].role == NamedAs.SUSPECTED
        assert {"no dump", "dump unreadable"} & set(named[r].rests_on)
        assert "suspected (no dump)" in line
    for r in BY_ELIMINATION.get(name, ()):
        assert named[r].role == NamedAs.SUSPECTED and named[r].rests_on == ("FR016",)
        assert "suspected (by elimination)" in line
    for r in FROM_STACKS.get(name, ()):
        assert named[r].role == NamedAs.SUSPECTED and named[r].rests_on == ("FR015",)
        assert "suspected (from stacks only)" in line
    if not inferred:
        assert "suspected" not in line or report.suspected_ranks


def test_the_known_sets_exist() -> None:
    assert set(NO_DUMP_ONLY) | set(BY_ELIMINATION) | set(FROM_STACKS) <= set(SETS)


def test_a_culprit_on_the_stacks_alone_is_inferred() -> None:
    """The same culprit, named by a stack outlier instead of the entries: inferred."""
    report = analyze(GLOO / "never_joins")
    assert [(n.rank, n.role, n.basis, n.rests_on) for n in report.named_ranks] == [
        (2, NamedAs.CULPRIT, Basis.OBSERVED, ("FR001",))
    ]
    stacks = replace(report.findings[0], kind=FindingKind.STACK_OUTLIER)
    (n,) = named_ranks(replace(report, findings=(stacks,)))
    assert (n.rank, n.role, n.basis, n.rests_on) == (2, NamedAs.CULPRIT, Basis.INFERRED, ("FR015",))


def test_the_entries_observe_only_a_rank_with_a_dump() -> None:
    """An entries finding on a rank whose dump could not be read is no observation; the job's
    own words about it are."""
    report = analyze(GLOO / "never_joins")
    unread = replace(report, ranks_loaded=(0, 1, 3), ranks_unreadable=(2,))
    (n,) = named_ranks(unread)
    assert (n.basis, n.rests_on) == (Basis.INFERRED, ("FR001", "dump unreadable"))
    said = replace(report.findings[0], kind=FindingKind.FIRST_FAILURE)
    (n,) = named_ranks(replace(unread, findings=(said,)))
    assert (n.basis, n.rests_on) == (Basis.OBSERVED, ("FR013", "dump unreadable"))


def test_presumed_and_stragglers_are_inferred_and_each_rank_is_named_once() -> None:
    """A rank without a dump presumed held up, and a straggler, are inferred; a culprit that
    is also a straggler is named once, as the culprit."""
    report = analyze(GLOO / "never_joins")

    def late(rank: int) -> Straggler:
        return Straggler(
            rank=rank, collectives=20, last_share=0.85, median_late_ms=12.0, groups=("0",),
            corroborated=False, basis=StragglerBasis.ENQUEUE_ONLY,
        )  # fmt: skip

    shown = replace(
        report,
        ranks_loaded=(0, 1, 2),
        ranks_missing=(3,),
        data_notes=(*report.data_notes, PresumedHeldUp(rank=3, where="pg 0", by=(2,))),
        stragglers=(late(1), late(2)),
        named_ranks=(),
    )
    assert [(n.rank, n.role, n.basis, n.rests_on) for n in shown.named_ranks] == [
        (
            1,
            NamedAs.STRAGGLER,
            Basis.INFERRED,
            ("last to arrive at 85% of 20 collectives", "timing: enqueue_only"),
        ),
        (2, NamedAs.CULPRIT, Basis.OBSERVED, ("FR001",)),
        (3, NamedAs.PRESUMED_HELD_UP, Basis.INFERRED, ("no dump", "held up in pg 0 by ranks 2")),
    ]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report_to_dict(shown), report_schema())
    assert decode_report(encode_report(shown)) == shown  # the cache keeps it as made


def test_a_selection_keeps_the_whole_jobs_named_ranks() -> None:
    """--ranks that hides the culprit's finding names it all the same, on the same basis."""
    report = analyze(GLOO / "never_joins")
    shown = select(report, Selection(ranks=(3,)))
    assert shown.named_ranks == report.named_ranks


@pytest.mark.parametrize("name", ["damaged", "gloo/late_rank", "gloo/never_joins"])
def test_the_codec_round_trips_named_ranks(name: str) -> None:
    """What the diagnosis cache stores gives the same named ranks, and the same JSON."""
    report = report_of(name)
    again = decode_report(encode_report(report))
    assert again.named_ranks == report.named_ranks
    assert render_json(again) == render_json(report)
