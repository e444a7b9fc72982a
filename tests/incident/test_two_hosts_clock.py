"""A real job on two hosts whose clocks are 7 minutes apart (``incidents/two_hosts_clock``,
``scripts/make_clock_fixture.py``: host-b's ranks under libfaketime, +420 s): frtrace names the
rank that stopped (rank 1, on the host whose clock is right), sets no host's dumps aside, says
the offset it took out, and orders the failures of both hosts on one clock."""

from __future__ import annotations

import json
from pathlib import Path

from frtrace.detail.notes import ClockOffsets
from frtrace.pipeline import analyze
from frtrace.report.json import report_to_dict
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

SET = FIXTURES / "incidents" / "two_hosts_clock"
TRUTH = json.loads((FIXTURES / "incidents" / "two_hosts_clock.truth.json").read_text())


def test_the_rank_that_stopped_is_named_whatever_the_clocks() -> None:
    report = analyze(SET, jobs=1)
    assert report.verdict.value == TRUTH["verdict"]
    assert list(report.culprit_ranks) == TRUTH["culprit_ranks"]
    assert report.suspected_ranks == ()
    assert report.ranks_loaded == (0, 1, 2, 3)  # no host's dumps set aside as another run
    assert not set(report.culprit_ranks) & set(TRUTH["innocent_ranks"])
    named = report_to_dict(report)["named_ranks"]
    assert [(n["rank"], n["basis"]) for n in named] == [(1, "observed")]
    assert TRUTH["culprit_function"] in render_text(report)


def test_the_offset_is_said_and_taken_out() -> None:
    report = analyze(SET, jobs=1)
    (clock,) = [n for n in report.data_notes if isinstance(n, ClockOffsets)]
    assert clock.ranks == (2, 3) and clock.reference == 0
    assert abs(clock.offset_s - TRUTH["clock_offset_s"]["host-b"]) < 2.0
    times = [f.at_ns for f in report.timeline if f.at_ns is not None]
    assert times == sorted(times)
    # every timeout of the four ranks within seconds of each other once on one clock
    timeouts = [f.at_ns for f in report.timeline if f.at_ns and f.kind.value == "timeout"]
    assert max(timeouts) - min(timeouts) < 10e9


def test_the_fixture_is_of_two_hosts(tmp_path: Path) -> None:
    """host-b's entries are 420 s later than host-a's for the same collectives, as written."""
    import pickle

    def first(rank: int, host: str) -> int:
        doc = pickle.loads((SET / host / f"comm_lib_trace_rank_{rank}").read_bytes())
        return int(doc["entries"][0]["time_created_ns"])

    apart = (first(2, "host-b") - first(0, "host-a")) / 1e9
    assert 410 < apart < 430
