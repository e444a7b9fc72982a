"""Real Gloo dumps of real faults (scripts/make_fixtures.py): the right root cause, every time.

The expected answers come from tests/fixtures/gloo/MANIFEST.json, written by the script from
how each fault was constructed, never from frtrace's output. Where the dumps cannot show the
whole truth (Gloo records no send/recv, no broadcast root), the manifest's ``expect`` says
what they do support, and ``why_expect`` why.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from frtrace.model import Verdict
from frtrace.pipeline import analyze
from frtrace.report.wording import summary
from tests.conftest import GLOO, GLOO_JSON

MANIFEST: dict[str, dict[str, Any]] = json.loads((GLOO / "MANIFEST.json").read_text())
SCENARIOS = sorted(MANIFEST)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("tree", [GLOO, GLOO_JSON], ids=["pickle", "json"])
def test_culprits_and_victims_match_the_injected_fault(tree: Path, scenario: str) -> None:
    """Culprit ranks are exactly the injected root cause; victims are the blocked ranks."""
    truth = MANIFEST[scenario]
    report = analyze(tree / scenario)
    stragglers = [s.rank for s in report.stragglers]
    if truth.get("kind") == "straggler" or scenario == "late_rank":
        assert report.culprit_ranks == ()
        assert stragglers == truth["culprit_ranks"]
        assert report.verdict == Verdict.STRAGGLERS
        return
    if "expect" in truth:  # the dumps cannot show the whole truth: what they do support
        expect = truth["expect"]
        assert report.verdict == expect["verdict"], report.findings
        assert list(report.culprit_ranks) == expect["culprit_ranks"], report.findings
        assert list(report.victim_ranks) == expect["waiting_ranks"]
        assert set(expect["culprit_ranks"]) >= set(truth["culprit_ranks"]) or (
            expect["verdict"] == Verdict.CANNOT_TELL
        )
        assert report.has_problems
        return
    assert list(report.culprit_ranks) == truth["culprit_ranks"], report.findings
    assert list(report.victim_ranks) == truth["waiting_ranks"]
    if truth["culprit_ranks"]:
        assert report.verdict in (Verdict.HANG, Verdict.DESYNC)
        assert report.has_problems
    else:
        assert report.verdict == Verdict.HEALTHY and not report.findings
        assert stragglers == []


@pytest.mark.parametrize("scenario", ["mesh_stall", "wrong_collective", "opposite_order"])
def test_verdict_does_not_depend_on_file_order(tmp_path: Path, scenario: str) -> None:
    """Renaming files so the directory lists them in another order changes nothing."""
    base = analyze(GLOO / scenario)
    files = sorted((GLOO / scenario).iterdir())
    order = list(range(len(files)))
    random.Random(7).shuffle(order)
    for i, src in zip(order, files, strict=True):
        # a different prefix per file changes the walk order but not the rank
        dst = tmp_path / f"{'zyxwvutsrq'[i]}dir" / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    shuffled = analyze(tmp_path)
    assert shuffled.culprit_ranks == base.culprit_ranks
    assert [summary(f) for f in shuffled.findings] == [summary(f) for f in base.findings]
    assert shuffled.victim_ranks == base.victim_ranks
