"""Real Gloo faults captured the ways real jobs capture dumps (tests/fixtures/gloo_capture).

scripts/make_fixtures.py (``--set capture``) captures each fault while the ranks are blocked,
from the exception handler after the PG timeout fired, through a peer's dump signal, with
frtrace.recorder (unhandled exception + SIGUSR1), while a healthy job runs, and with a rank
that died without a dump. The truth and what a correct analysis says (``expect``) come from
the manifest, written from how each fault was built, never from frtrace's output.

Where the current analysis is wrong the case is ``xfail(strict=True)`` with what misled it
(FIXTURE_REPORT.md has the table): the test passes today and fails, so that the marker is
removed, the day the analysis gets it right.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from frtrace.findings import Verdict
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "gloo_capture"
CAPTURE_JSON = FIXTURES / "gloo_capture_json"
MANIFEST: dict[str, dict[str, Any]] = json.loads((CAPTURE / "MANIFEST.json").read_text())

# A healthy job may show a straggler warning (CPU ranks share two cores); never a culprit.
HEALTHY_VERDICTS = {Verdict.HEALTHY, Verdict.STRAGGLERS}

# (scenario, format) -> what in the dumps misled the current analysis (FIXTURE_REPORT.md).
_WRONG: dict[str, str] = {
    "never_joins__after_timeout": (
        "every rank's all_reduce #12 is retired=True: 0, 1, 3 timed out, rank 2 created "
        "#12 16.7 s after them (timeout_ms 4000) and failed with 'Connection closed by "
        "peer'; pg_status last_completed 12 everywhere. Retired is read as completed; "
        "only time_created_ns shows it"
    ),
    "never_joins__peer_signal": (
        "rank 0's #12 is retired=True (it timed out), ranks 1 and 3 still show #12 "
        "retired=False, rank 2's newest entry is #11. Called healthy although two ranks "
        "are pending in an op rank 2 never created: apparently one retired copy makes #12 "
        "count as finished"
    ),
    "never_joins__recorder": (
        "waiting ranks' all_reduce #12 is retired=True (timed out / connection closed, "
        "dumped by the recorder's excepthook); the culprit (dumped on SIGUSR1 while "
        "stuck) has no entry #12"
    ),
    "never_joins__died": (
        "rank 2 has no dump; the survivors' all_reduce #12 is retired=True (timeout / "
        "'Connection reset by peer'): nothing is pending, so the missing rank is not "
        "blamed"
    ),
    "ddp_rank0_log__after_timeout": (
        "rank 0 died of SIGABRT (no dump); ranks 1-3's DDP all_reduce #9 [[49]] is "
        "retired=True (connection reset / timeout): nothing pending, missing rank not "
        "blamed"
    ),
    "ddp_rank0_log__recorder": (
        "as after_timeout: rank 0 SIGABRT, no dump; 1-3 have DDP all_reduce #9 retired=True"
    ),
    "ddp_exception__recorder": (
        "rank 2 (recorder dump on its unhandled ValueError) has newest entry #7; ranks 0, "
        "1, 3 have DDP all_reduce #8 retired=True (failed with 'Connection closed by "
        "peer' once rank 2 exited): culprit has no entry #8, waiting ranks' #8 retired"
    ),
    "ddp_exception__died": (
        "rank 2 has no dump; 0, 1, 3 have DDP all_reduce #8 retired=True (timeout / "
        "connection reset)"
    ),
    "fsdp2_exception__recorder": (
        "rank 1's newest entry is FSDP2 all_gather #13 (it raised in forward after it); "
        "0, 2, 3 have the next all_gather #14 retired=True (connection closed after rank "
        "1 exited)"
    ),
    "fsdp2_exception__died": ("rank 1 has no dump; 0, 2, 3 have all_gather #14 retired=True"),
    "mesh2d_short_loader__blocked": (
        "FR007 cycle naming all four: 0, 1 pending in dp all_reduce #6 (groups '1', '2'), "
        "2, 3 pending in world barrier #1. The dumps also show 2, 3 ran one tp step fewer "
        "(tp #5 vs #6), which would pick 2, 3"
    ),
    "mesh2d_short_loader__after_timeout": (
        "every pending op (dp all_reduce #6 on 0, 1; world barrier #1 on 2, 3) is "
        "retired=True after the timeout; nothing pending, only a straggler signal (rank 0 "
        "late) is left"
    ),
    "mesh2d_short_loader__recorder": (
        "as after_timeout: dp #6 and world barrier #1 retired=True on every rank"
    ),
    "ddp_healthy__running": (
        "snapshot mid-step: 0, 1, 3 are in DDP all_reduce #14 (retired=False), rank 2 is "
        "still in step 9's forward (newest #13): read as rank 2 never joining #14"
    ),
    "fsdp2_healthy__running_timer": (
        "snapshot mid-step: rank 0 is one op ahead, reduce-scatter (gloo:all_reduce "
        "[[36]]) #89 pending, while 1-3 are still in all_gather #88 (pending): read as "
        "1-3 never joining #89"
    ),
}
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
    assert report.has_problems


def test_manifest_covers_every_fixture_dir() -> None:
    """Every directory of both trees is in the manifest, with the files the manifest says."""
    for tree, suffix in ((CAPTURE, ""), (CAPTURE_JSON, ".json")):
        dirs = {p.name for p in tree.iterdir() if p.is_dir()}
        assert dirs == set(MANIFEST)
        for name, truth in MANIFEST.items():
            stem = truth["files"].split("<rank>")[0]
            files = {p.name for p in (tree / name).iterdir()}
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
