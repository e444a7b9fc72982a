"""Time is per host (issue 50, item 2): a job on two hosts whose clocks are 7 minutes apart
(``tests/transforms.py``'s ``two_hosts_skewed``, the upper half of the ranks on host-b, its
clock ahead or behind) gets the answer of the set as committed: the same verdict, culprits and
suspects, the same ranks loaded and none set aside as "of an earlier attempt or run". The load
keeps one lifetime whatever the clocks say (``frtrace.load.lifetimes``: the same collectives,
created within ``MAX_SKEW_NS`` of each other, are one run), and the analysis takes each host's
offset out before any rule compares times (``frtrace.analysis.facts.clocks``), or compares no
times across clocks it cannot relate (``Clocks.comparable``).

Known exceptions (strict xfail: each says why): a stale dump on the skewed host
(``incidents/rerun``, ``incidents/restart``: which file is stale is a question of that host's
clock), a torch 2.2 dump without sizes' signatures, the snapshots folder (the transform's host
folders split its snapshots).

Cost (2 cores): every set analysed twice per skew, in this process.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import pytest

from frtrace.errors import SeveralDumpSets
from frtrace.incident.problems import LoadProblem
from frtrace.load.tables import load_dumps
from frtrace.model import Report
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES
from tests.test_invariants_transforms import ONE_FORMAT, SETS
from tests.transforms import SKEWS, two_hosts_skewed

# The answer or the ranks loaded differ, and why.
_XFAIL = {
    ("incidents/rerun", "skew+420"): "stale rank 3 on the skewed host: read as one run",
    ("incidents/restart", "skew+420"): "attempt folders: the gap alone (clock) decides",
    ("incidents/restart", "skew-420"): "attempt folders: the gap alone (clock) decides",
    ("incidents/restart_dies_in_init", "skew+420"): "attempt folders: the gap alone decides",
    ("incidents/restart_dies_in_init", "skew-420"): "attempt folders: the gap alone decides",
    ("incidents/shrinking_world", "skew+420"): "attempt folders: the gap alone decides",
    ("incidents/shrinking_world", "skew-420"): "attempt folders: the gap alone decides",
    ("nccl/host_stall/2.2-pickle", "skew+420"): "torch 2.2: its ops do not match",
}
# The answer depends on the files' times as the checkout left them (not strict: a fresh clone's
# times differ from the generator's)
_FILE_TIMES = {
    (name, "skew+420"): "the halves' one shared op is the mismatch: file times decide"
    for name in (
        "gloo_order/new_group_order__exception",
        "gloo_order/new_group_order__timer",
        "gloo_order_json/new_group_order__timer",
    )
}
_SEVERAL = {"incidents/snapshots"}  # (its own files and snap1/ split into host folders)
# Every set with host-b ahead; behind, one format of each job (``ONE_FORMAT``: the JSON twins
# are the same jobs)
CASES = [(n, "skew+420") for n in SETS if n not in _SEVERAL]
CASES += [(n, "skew-420") for n in ONE_FORMAT if n not in _SEVERAL]


def _marked(name: str, skew: str) -> object:
    why = _XFAIL.get((name, skew))
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    if (name, skew) in _FILE_TIMES:
        marks = [pytest.mark.xfail(strict=False, reason=_FILE_TIMES[name, skew])]
    return pytest.param(name, skew, marks=marks, id=f"{name}-{skew}")


def _aside(problems: Sequence[LoadProblem]) -> tuple[int | None, ...]:
    return tuple(sorted({p.rank for p in problems if "attempt or run" in p.message}, key=str))


Answer = tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int | None, ...]]


def _answer(report: Report, problems: Sequence[LoadProblem]) -> Answer:
    return (
        report.verdict.value,
        report.culprit_ranks,
        report.suspected_ranks,
        report.ranks_loaded,
        _aside(problems),
    )


@functools.cache
def _committed(name: str) -> Answer:
    report = analyze(FIXTURES / name, jobs=1)
    return _answer(report, load_dumps(FIXTURES / name).problems)


@pytest.mark.parametrize(("name", "skew"), [_marked(n, s) for n, s in CASES])
def test_two_hosts_clocks_apart_get_the_same_answer(tmp_path: Path, name: str, skew: str) -> None:
    SKEWS[skew](FIXTURES / name, tmp_path / "set")
    report = analyze(tmp_path / "set", jobs=1)
    problems = load_dumps(tmp_path / "set").problems  # (the diagnosis cache keeps the load's)
    assert _answer(report, problems) == _committed(name), (name, skew)


def test_the_skew_moves_the_upper_half_and_its_times(tmp_path: Path) -> None:
    """Ranks 2-3 of four under host-b/ with every entry time 420 s later and their
    sidecars' dump times too; ranks 0-1 under host-a/ as they were."""
    import json
    import pickle

    src = FIXTURES / "incidents/recorder_collect"
    two_hosts_skewed(src, tmp_path / "set", 420)
    for rank, host, shift in ((1, "host-a", 0), (3, "host-b", 420_000_000_000)):
        doc = pickle.loads((tmp_path / f"set/{host}/comm_lib_trace_rank_{rank}").read_bytes())
        old = pickle.loads((src / f"comm_lib_trace_rank_{rank}").read_bytes())
        assert [e["time_created_ns"] - shift for e in doc["entries"]] == [
            e["time_created_ns"] for e in old["entries"]
        ]
        side = json.loads((tmp_path / f"set/{host}/stacks_rank_{rank}.json").read_text())
        was = json.loads((src / f"stacks_rank_{rank}.json").read_text())
        assert side["dumped_at_ns"] - shift == was["dumped_at_ns"]


def test_the_snapshots_folder_is_split_by_the_transform_not_by_the_rule(tmp_path: Path) -> None:
    SKEWS["skew+420"](FIXTURES / "incidents/snapshots", tmp_path / "set")
    with pytest.raises(SeveralDumpSets):
        load_dumps(tmp_path / "set", cache=False)
