"""Real Gloo faults captured the ways real jobs capture dumps (tests/fixtures/gloo_capture).

scripts/make_fixtures.py (``--set capture``) captures each fault while the ranks are blocked,
from the exception handler after the PG timeout fired, through a peer's dump signal, with
frtrace.recorder (unhandled exception + SIGUSR1), while a healthy job runs, and with a rank
that died without a dump. The truth and what a correct analysis says (``expect``) come from
the manifest, written from how each fault was built, never from frtrace's output.

Where the current analysis is wrong the case is ``xfail(strict=True)`` with what misled it:
the test passes today and fails, so that the marker is removed, the day the analysis gets it
right.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from frtrace.model import Verdict
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "gloo_capture"
CAPTURE_JSON = FIXTURES / "gloo_capture_json"
MANIFEST: dict[str, dict[str, Any]] = json.loads((CAPTURE / "MANIFEST.json").read_text())

# A healthy job may show a straggler warning (CPU ranks share two cores); never a culprit.
HEALTHY_VERDICTS = {Verdict.HEALTHY, Verdict.STRAGGLERS}

# (scenario, format) -> what in the dumps misled the current analysis (FIXTURE_REPORT.md).
_WRONG: dict[str, str] = {}
KNOWN_WRONG: dict[tuple[str, str], str] = {
    (name, fmt): why for name, why in _WRONG.items() for fmt in ("pickle", "json")
}


def _cases() -> list[Any]:
    cases = []
    for scenario in sorted(MANIFEST):
        for fmt, tree in (("pickle", CAPTURE), ("json", CAPTURE_JSON)):
            marks = []
            why = KNOWN_WRONG.get((scenario, fmt))
            if why:
                marks.append(pytest.mark.xfail(strict=True, reason=why))
            cases.append(
                pytest.param(tree / scenario, scenario, id=f"{scenario}-{fmt}", marks=marks)
            )
    return cases


@pytest.mark.parametrize(("path", "scenario"), _cases())
def test_verdict_and_culprits_match_the_truth(path: Path, scenario: str) -> None:
    """The analysis gives the manifest's expected verdict and names exactly its culprits."""
    truth = MANIFEST[scenario]
    expect = truth["expect"]
    report = analyze(path)
    if expect["verdict"] == Verdict.HEALTHY:
        assert report.verdict in HEALTHY_VERDICTS, report.findings
        assert list(report.culprit_ranks) == []
        return
    assert report.verdict == expect["verdict"], report.findings
    assert list(report.culprit_ranks) == expect["culprit_ranks"], report.findings
    if "suspected_ranks" in expect:
        assert list(report.suspected_ranks) == expect["suspected_ranks"], report.findings
    assert report.has_problems


def test_manifest_covers_every_fixture_dir() -> None:
    """Every directory of both trees is in the manifest, with the files the manifest says."""
    for tree, suffix in ((CAPTURE, ""), (CAPTURE_JSON, ".json")):
        dirs = {p.name for p in tree.iterdir() if p.is_dir()}
        assert dirs == set(MANIFEST)
        for name, truth in MANIFEST.items():
            stem = truth["files"].split("<rank>")[0]
            files = {p.name for p in (tree / name).iterdir() if not p.name.startswith("stacks_")}
            assert files == {f"{stem}{r}{suffix}" for r in truth["ranks_with_dumps"]}, name
            assert not set(truth["ranks_without_dump"]) & set(truth["ranks_with_dumps"])


def test_truth_is_consistent() -> None:
    """Expected culprits are the true culprits, or the manifest says why they cannot be."""
    for name, truth in MANIFEST.items():
        expect = truth["expect"]
        assert expect["verdict"] in {v.value for v in Verdict}, name
        if expect["verdict"] == Verdict.CANNOT_TELL:
            assert truth.get("why_expect"), name
        else:
            assert expect["culprit_ranks"] == truth["culprit_ranks"], name
        assert name == f"{truth['fault']}__{truth['capture_mode']}"


@pytest.mark.parametrize("shuffled", [False, True], ids=["in creation order", "out of order"])
def test_each_ranks_gaps_are_between_its_sorted_creation_times(shuffled: bool) -> None:
    """``capture._windows``: per rank, the gaps between its recorded creation times in
    ascending order and its newest, whether its window is already in creation order (no sort
    then) or not; unknown times (0) left out, a rank with none left out."""
    import numpy as np

    from frtrace.analysis.facts import capture

    rng = np.random.default_rng(7)
    ranks = [0, 1, 2, 5]
    lengths = np.array([4, 0, 6, 3])
    begins = np.array([0, 4, 4, 10])
    created = np.cumsum(rng.integers(1, 10**9, 13)).astype(np.int64)
    created[[2, 11, 12]] = 0  # (not known)
    if shuffled:
        created[4:10] = created[4:10][::-1]
    got = {
        r: (gaps.tolist(), newest)
        for r, gaps, newest in capture._windows(created, ranks, begins, lengths)
    }
    expected = {}
    for r, at, n in zip(ranks, begins, lengths, strict=True):
        times = sorted(int(t) for t in created[at : at + n] if t > 0)
        if times:
            gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
            expected[r] = (gaps, times[-1])
    assert got.keys() == expected.keys() == {0, 2, 5}
    for r in expected:
        assert got[r][1] == expected[r][1]
        assert got[r][0] == pytest.approx(expected[r][0])


@pytest.mark.parametrize("order", ["as loaded", "two runs a rank"])
def test_dump_times_are_each_ranks_latest_open_discovery(tmp_path: Path, order: str) -> None:
    """``capture.dump_times_from_entries`` against a row-by-row reading: per rank, the latest
    start (completion) time of an entry not retired and ``started`` (``completed``), its rows
    as loaded or split in two runs a rank (the files read in another order), a null time
    never counted."""
    from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps
    from frtrace.analysis.facts.capture import dump_times_from_entries
    from frtrace.load.tables import load_dumps

    stall = Fault(kind=FaultKind.HOST_STALL, rank=3, step=4)
    spec = JobSpec(world_size=8, tp=2, steps=6, buffer_size=200, fault=stall)
    write_dumps(simulate(spec), tmp_path / "d")
    dumps = load_dumps(tmp_path / "d")
    entries = dumps.entries
    if order == "two runs a rank":
        rows = np.arange(entries.num_rows)
        entries = entries.take(np.r_[rows[::2], rows[1::2]])
        dumps = dataclasses.replace(dumps, entries=entries)
    expected: dict[int, int] = {}
    for e in entries.to_pylist():
        if e["retired"] is False and e["state"] in ("started", "completed"):
            t = e[f"time_discovered_{e['state']}_ns"]
            if t is not None:
                expected[e["rank"]] = max(expected.get(e["rank"], 0), t)
    assert len(expected) >= 4
    assert dump_times_from_entries(dumps) == expected
