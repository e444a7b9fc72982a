"""A verdict's fingerprint (issue 52, item 7): the same hang, however it reached frtrace and
whenever it was dumped, has one; another culprit, kind, group or op has another.

Real fixtures: the sets through every transform of ``tests/transforms.py`` (and two hosts'
clocks apart); one hang's dump moments (``gloo_capture``'s ``__blocked``, ``__after_timeout``,
``__recorder`` of one scenario, whose MANIFEST gives the same culprits); the scenarios against
each other; a history of two attempts.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from frtrace.analysis.fingerprint import fingerprint
from frtrace.analysis.history import with_history
from frtrace.model import Basis, GroupRef, NamedRank, Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.json import report_to_dict
from frtrace.report.json_schema import report_schema
from frtrace.report.text import render_text
from tests.conftest import FIXTURES
from tests.transforms import SKEWS, TRANSFORMS

SAMPLE = (
    "gloo/never_joins",
    "gloo_capture/mesh2d_short_loader__blocked",
    "gloo_evidence/monitored_barrier__exception",
    "nccl/host_stall/2.10-pickle",
    "incidents/restart",
)
# One hang dumped at several moments (gloo_capture/MANIFEST.json: the same culprits)
MOMENTS = {
    "ddp_short_loader": ("__blocked", "__after_timeout", "__peer_signal", "__recorder"),
    "ddp_ckpt_barrier": ("__blocked", "__after_timeout", "__recorder"),
    "mesh2d_short_loader": ("__blocked", "__after_timeout", "__recorder"),
    "never_joins": ("__after_timeout", "__peer_signal", "__recorder", "__waiter_died"),
}
# Different faults, each with something wrong (one set each)
SCENARIOS = (
    "gloo/broadcast_root",
    "gloo/cyclic_deadlock",
    "gloo/disjoint_subgroups",
    "gloo/mesh_stall",
    "gloo/never_joins",
    "gloo/opposite_order",
    "gloo/size_mismatch",
    "gloo/wrapped_buffer",
    "gloo/wrong_collective",
    "gloo_capture/ddp_ckpt_barrier__blocked",
    "gloo_capture/ddp_short_loader__blocked",
    "gloo_capture/mesh2d_short_loader__blocked",
    "nccl/host_stall/2.10-pickle",
    "nccl/missing_dump/2.10-pickle",
    "nccl/opposite_order/2.10-pickle",
    "nccl/p2p_no_peer/2.10-pickle",
    "nccl/wrong_size/2.10-pickle",
)


@functools.cache
def report_of(name: str) -> Report:
    return analyze(FIXTURES / name, jobs=1)


@pytest.mark.parametrize("transform", sorted({**TRANSFORMS, **SKEWS}))
@pytest.mark.parametrize("name", SAMPLE)
def test_the_same_incident_however_it_arrives(name: str, transform: str, tmp_path: Path) -> None:
    """Compressed, under a prefix, uploaded, its file times scrambled, two hosts' clocks 7
    minutes apart: the same fingerprint."""
    moved = tmp_path / "set"
    {**TRANSFORMS, **SKEWS}[transform](FIXTURES / name, moved)
    assert analyze(moved, jobs=1).fingerprint == report_of(name).fingerprint


@pytest.mark.parametrize("scenario", sorted(MOMENTS))
def test_one_hang_dumped_at_several_moments(scenario: str) -> None:
    """The ranks blocked, after the timeout, on a peer's signal, the recorder's own dump:
    the culprits agree (MANIFEST), and so does the fingerprint."""
    truth = json.loads((FIXTURES / "gloo_capture" / "MANIFEST.json").read_text())
    names = [f"gloo_capture/{scenario}{m}" for m in MOMENTS[scenario]]
    reports = [report_of(n) for n in names]
    for name, report in zip(names, reports, strict=True):
        assert list(report.culprit_ranks) == truth[name.split("/")[1]]["culprit_ranks"], name
    assert len({r.fingerprint for r in reports}) == 1


def test_the_same_fault_in_another_run() -> None:
    """gloo/never_joins and gloo_capture's never_joins are two runs of one fault."""
    assert (
        report_of("gloo/never_joins").fingerprint
        == report_of("gloo_capture/never_joins__after_timeout").fingerprint
    )


def test_different_hangs_differ() -> None:
    """Every scenario has its own fingerprint; a healthy job is none of them."""
    prints = {name: report_of(name).fingerprint for name in SCENARIOS}
    assert all(p is not None and len(p) == 16 for p in prints.values())
    assert len(set(prints.values())) == len(SCENARIOS), prints
    assert report_of("gloo/healthy").fingerprint not in prints.values()


def test_what_changes_it_and_what_does_not() -> None:
    """A different culprit, kind, op or group changes it; a sequence number, the waiting
    ranks, a basis, the stragglers, another call-site line do not."""
    report = report_of("nccl/host_stall/2.10-pickle")
    lead = report.findings[0]
    base = fingerprint(report)

    def lead_as(**changes: object) -> str:
        return fingerprint(
            replace(report, findings=(replace(lead, **changes), *report.findings[1:]))
        )

    assert lead.group is not None and lead.expected is not None
    other_group = GroupRef(
        name="99", desc=lead.group.desc, members=lead.group.members, inferred=False
    )
    assert lead_as(op="all_reduce") != base
    assert lead_as(group=other_group) != base
    assert lead_as(kind=report.findings[-1].kind) != base
    moved = tuple(s.replace("train.py:61", "train.py:64") for s in lead.expected.stack)
    elsewhere = tuple(s.replace("main (", "evaluate (") for s in lead.expected.stack)
    assert lead_as(expected=replace(lead.expected, stack=moved)) == base
    assert lead_as(expected=replace(lead.expected, stack=elsewhere)) != base
    assert lead_as(seq=(lead.seq or 0) + 100, waiting_ranks=()) == base
    named = report.named_ranks
    culprit = replace(named[0], rank=named[0].rank + 1)
    assert fingerprint(replace(report, named_ranks=(culprit,))) != base
    backed = tuple(replace(n, basis=Basis.RAS, rests_on=(*n.rests_on, "x")) for n in named)
    assert fingerprint(replace(report, named_ranks=backed)) == base
    late = NamedRank(
        rank=0, role=named[0].role.__class__("straggler"), basis=Basis.INFERRED, rests_on=()
    )
    assert fingerprint(replace(report, named_ranks=(*named, late))) == base
    assert fingerprint(replace(report, verdict=Verdict.CANNOT_TELL)) != base


def test_in_the_json_report() -> None:
    report = report_of("gloo/never_joins")
    assert report_to_dict(report)["fingerprint"] == report.fingerprint


def test_the_history_says_the_same_hang() -> None:
    """Two attempts that hung the same way (one hang's two dump moments, as attempts 0 and
    1): attempt 1 is "the same hang as attempt 0"; an attempt that hung otherwise is not."""
    same = report_of("gloo_capture/ddp_short_loader__after_timeout")
    earlier = report_of("gloo_capture/ddp_short_loader__blocked")
    other = report_of("gloo_capture/mesh2d_short_loader__blocked")
    runs = {0: earlier, 2: other}
    report = with_history(same, 1, [0, 2], lambda n: runs[n])
    assert report.history is not None
    lines = render_text(report)
    assert "attempt 1 (this report): desync" in lines
    assert "the same hang as attempt 0" in lines
    data = report_to_dict(report)
    jsonschema.validate(data, report_schema())
    attempts = {a["attempt"]: a for a in data["history"]["attempts"]}
    assert attempts[1]["same_hang_as"] == 0 and attempts[1]["fingerprint"] == same.fingerprint
    assert attempts[0]["same_hang_as"] is None  # (the first of its kind)
    assert attempts[2]["same_hang_as"] is None  # (another hang)
    assert lines.count("the same hang as attempt") == 1


def test_a_restarted_jobs_attempts_that_hung_otherwise() -> None:
    """incidents/restart: attempt 0 hung on rank 1, attempt 1 on rank 3 (MANIFEST)."""
    report = report_of("incidents/restart")
    assert report.history is not None
    prints = [report.history.this.fingerprint, *(a.fingerprint for a in report.history.others)]
    assert None not in prints and len(set(prints)) == len(prints)
    assert "the same hang" not in render_text(report)
