"""Each rank's host and pid, from every stack sample (and whatever else appends what it saw)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from frtrace.analysis.facts.processes import ProcessSeen, rank_processes
from frtrace.model import RankProcess
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES, GLOO

RECORDER_HANG = FIXTURES / "stacks" / "recorder_hang"


def _seen(rank: int, host: str | None, pid: int | None, at: int | None) -> ProcessSeen:
    return ProcessSeen(rank=rank, host=host, pid=pid, at_ns=at, source="test")


def test_the_latest_sample_wins_and_others_fill_what_it_lacks() -> None:
    got = rank_processes(
        [
            _seen(2, "node-a", 100, 1_000),  # an older process of rank 2 (it restarted)
            _seen(2, "node-b", 4242, 2_000),
            _seen(2, None, 4242, None),  # py-spy: the pid only, no time
            _seen(5, None, 77, None),
            _seen(5, "node-c", None, 10),  # fills the host: it does not contradict the pid
            _seen(9, "node-z", 9, 1),  # past the world size
        ],
        world_size=8,
    )
    assert got == {
        2: RankProcess(host="node-b", pid=4242),
        5: RankProcess(host="node-c", pid=77),
    }


def test_samples_of_unknown_time_are_older_than_any_known_and_keep_their_order() -> None:
    assert rank_processes([_seen(0, "a", 1, None), _seen(0, "b", 2, None)]) == {
        0: RankProcess(host="b", pid=2)
    }
    assert rank_processes([_seen(0, "b", 2, 5), _seen(0, "a", 1, None)]) == {
        0: RankProcess(host="b", pid=2)
    }


def test_the_report_names_the_culprits_host_and_pid_in_every_format() -> None:
    """recorder_hang: the sidecars say host vm and each rank's pid."""
    report = analyze(RECORDER_HANG)
    assert report.processes[2] == RankProcess(host="vm", pid=21265)
    assert set(report.processes) == {0, 1, 2, 3}
    text = render_text(report)
    assert "\nculprits: 2 (on vm, pid 21265)\n" in text
    assert "rank 2 on vm, pid 21265 (newest entry)" in text  # the culprit table
    assert "- **culprits**: 2 (on vm, pid 21265)\n" in render_markdown(report)
    assert "2 (on vm, pid 21265)" in render_html(report)
    data = json.loads(render_json(report))
    assert data["schema_version"] == "1.5"
    assert data["processes"]["2"] == {"host": "vm", "pid": 21265}


def test_py_spy_text_gives_the_pid(tmp_path: Path) -> None:
    """A py-spy dump names the process, not the host."""
    shutil.copytree(GLOO / "never_joins", tmp_path, dirs_exist_ok=True)
    shutil.copy(RECORDER_HANG / "pyspy_rank_2.txt", tmp_path / "pyspy_rank_2.txt")
    report = analyze(tmp_path)
    assert report.processes == {2: RankProcess(host=None, pid=21265)}
    assert "\nculprits: 2 (pid 21265)\n" in render_text(report)


def test_no_sample_no_processes() -> None:
    report = analyze(GLOO / "never_joins")
    assert report.processes == {}
    assert "processes" not in json.loads(render_json(report))
    assert "\nculprits: 2\n" in render_text(report)


def test_collect_s_manifest_says_the_host_py_spy_does_not() -> None:
    """py-spy's text names the pid, collect's manifest the host (and the pid, at the dump's
    time): one process per rank of both."""
    from frtrace.analysis.facts.processes import ProcessSeen, rank_processes, seen_in_collected
    from frtrace.evidence.collected import Collected
    from frtrace.job.manifest import CollectedRank

    collected = Collected(
        ranks=(
            CollectedRank(rank=3, host="node-b", pid=4242, dumped_at_ns=2_000),
            CollectedRank(rank=4, host="node-b", pid=None, dumped_at_ns=2_000),
        )
    )
    pyspy = [
        ProcessSeen(rank=3, host=None, pid=4242, at_ns=None, source="pyspy_rank_3.txt"),
        ProcessSeen(rank=4, host=None, pid=5151, at_ns=None, source="pyspy_rank_4.txt"),
    ]
    got = rank_processes(pyspy + seen_in_collected(collected))
    assert (got[3].host, got[3].pid) == ("node-b", 4242)
    assert (got[4].host, got[4].pid) == ("node-b", 5151)
    assert seen_in_collected(None) == []
