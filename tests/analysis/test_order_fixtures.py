"""Real Gloo jobs whose ranks disagree on an order (tests/fixtures/gloo_order, made by
scripts/make_order_fixtures.py; the truth and ``expect`` come from how each job was built):
a rank that created its groups in another order (``new_group_order``), a rank whose two
threads issued a group's collectives in another order (``thread_race``), and the same race
where Gloo's size check aborted the rank whose order differs (``thread_race_sizes``: it left
no dump, so who cannot be told, and it is among the suspected).

Each is analysed with everything the job left, with its dumps alone, and (where the job
wrote them) with its JSON dumps: the answer is the manifest's every time, and every renderer
says it. The files are the manifest's (no torch needed).
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from frtrace.model import FindingKind, Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.json_schema import report_schema
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

TREE = FIXTURES / "gloo_order"
JSON_TREE = FIXTURES / "gloo_order_json"
MANIFEST: dict[str, dict[str, Any]] = json.loads((TREE / "MANIFEST.json").read_text())
STEM = "comm_lib_trace_rank_"
KIND = {"new_group_order": FindingKind.GROUP_ORDER, "thread_race": FindingKind.OP_ORDER}
WITH_DUMPS = sorted(n for n, m in MANIFEST.items() if m["evidence"]["flight_recorder_pickle"])


def _check(report: Report, truth: dict[str, Any]) -> None:
    """The manifest's answer: its verdict and culprits; where it cannot be told, nobody named,
    and any suspected include the rank whose order differs (the ranks Gloo aborted received
    the mismatched data: as likely victims as culprits, they are not suspected for it)."""
    expect = truth["expect"]
    assert report.verdict == Verdict(expect["verdict"])
    assert report.culprit_ranks == tuple(expect["culprit_ranks"])
    if report.verdict == Verdict.CANNOT_TELL:
        suspected = set(report.suspected_ranks)
        assert not suspected or set(truth["culprit_ranks"]) <= suspected
        return
    kind = KIND[truth["scenario"]]
    lead = report.findings[0]
    assert (lead.kind, lead.culprit_ranks) == (kind, tuple(truth["culprit_ranks"]))
    assert not report.suspected_ranks


def test_every_fixture_is_in_the_manifest_with_its_files() -> None:
    assert {p.name for p in TREE.iterdir() if p.is_dir()} == set(MANIFEST)
    for name, truth in MANIFEST.items():
        d, ev = TREE / name, truth["evidence"]
        on_disk = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
        assert on_disk == ev["files"]
        dumps = sorted(int(p.name.removeprefix(STEM)) for p in d.glob(f"{STEM}*"))
        assert dumps == ev["flight_recorder_pickle"]
        for r in dumps:  # plain dicts: no torch needed
            assert "entries" in pickle.loads((d / f"{STEM}{r}").read_bytes())
        twins = JSON_TREE / name
        assert sorted(p.name for p in twins.glob("*.json")) == ev["json_files"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_with_everything_the_job_left_the_answer_is_the_truth(name: str) -> None:
    report = analyze(TREE / name)
    _check(report, MANIFEST[name])
    for render in (render_text, render_markdown, render_html):
        assert render(report)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(render_json(report)), report_schema())


@pytest.mark.parametrize("name", WITH_DUMPS)
def test_from_the_dumps_alone_the_answer_is_the_truth(name: str, tmp_path: Path) -> None:
    for p in (TREE / name).glob(f"{STEM}*"):
        shutil.copy2(p, tmp_path / p.name)
    _check(analyze(tmp_path), MANIFEST[name])


@pytest.mark.parametrize("name", sorted(p.name for p in JSON_TREE.iterdir() if p.is_dir()))
def test_the_json_dumps_give_the_same_answer(name: str) -> None:
    _check(analyze(JSON_TREE / name), MANIFEST[name])


def test_the_rank_out_of_order_is_named_for_what_its_own_dump_shows() -> None:
    """The group's creation index and description (new_group_order), the threads (the race)."""
    groups = analyze(TREE / "new_group_order__timer")
    named = {n.rank: n for n in groups.named_ranks}
    assert named[3].basis == "observed" and named[3].rests_on[0] == "FR019"
    assert "2nd group (named 4) is tp" in " ".join(render_text(groups).split())
    race = analyze(TREE / "thread_race__signal")
    text = " ".join(render_text(race).split())
    assert "in another order than ranks 0-1,3" in text
    assert "issued ops on it from several threads" in text
