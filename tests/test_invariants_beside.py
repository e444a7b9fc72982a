"""An attempt is what its own evidence says (issue 50, items 1, 4 and 7).

* **Files of an older attempt or run beside** (``tests/transforms_beside.py``): the dumps of
  an earlier run on a larger world, or of an earlier attempt that died in
  ``init_process_group``, left in the folder as a real one holds them (older dump times, other
  pids, their own world). The newest attempt's verdict, culprits, suspects and loaded ranks
  are those of the set as committed, and no rank of the older files is named.
* **No rank outside its attempt's world**: over every committed dump set
  (``tests/conftest.py``'s ``fixture_sets()``), the JSON report names (``named_ranks``, the
  culprits, suspects and victims, the findings, the timeline) only ranks of the judged
  attempt's world, and each history line only ranks of its own attempt's world.

Known exception (strict xfail): an older larger world beside a Gloo set whose dumps do not say
their world (no recorder ``world_size``; Gloo records no group's members): the older run's
ranks read as this run's ranks without a dump.

Cost (2 cores): every set analysed once (~40 s), a sample through each transform (~15 s).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.json import report_to_dict
from tests.conftest import FIXTURES, fixture_sets
from tests.transforms_beside import BESIDE, applies, says_its_world

SETS = sorted(str(d.relative_to(FIXTURES)) for d in fixture_sets())
# A sample of each family (the real incidents whole), each through both transforms where it
# applies (``applies``; the larger world where the set says its own: ``says_its_world``).
SAMPLE = (
    "gloo/never_joins",
    "gloo/size_mismatch_crashed",
    "gloo_json/mesh_stall",
    "gloo_capture/never_joins__waiter_died",
    "gloo_evidence/monitored_barrier__exception",
    "gloo_evidence/cycle_new_group__timer",
    "incidents/restart",
    "incidents/rerun",
    "incidents/restart_dies_in_init",
    "incidents/shrinking_world",
    "nccl/host_stall/2.10-pickle",
    "nccl/missing_dump/2.4-json",
    "nccl/gpu_stops_completing/2.9-pickle",
    "nccl_real/stream_busy",
    "stacks/recorder_hang",
)
XFAIL = {
    ("gloo_json/healthy", "older_larger_world"): "Gloo: the set's dumps do not say its world",
}


def _cases() -> list[Any]:
    cases = []
    for name in SAMPLE:
        src = FIXTURES / name
        for transform in BESIDE:
            if not applies(src):
                continue
            if transform == "older_larger_world" and not says_its_world(src):
                continue
            cases.append(pytest.param(name, transform, id=f"{name}-{transform}"))
    for (name, transform), why in XFAIL.items():
        mark = pytest.mark.xfail(strict=True, reason=why)
        cases.append(pytest.param(name, transform, marks=mark, id=f"{name}-{transform}"))
    return cases


@functools.cache
def _report(name: str) -> Report:
    return analyze(FIXTURES / name, jobs=1)


def _answer(report: Report) -> tuple[Any, ...]:
    return (
        report.verdict.value,
        report.culprit_ranks,
        report.suspected_ranks,
        report.ranks_loaded,
        report.world_size,
    )


def test_the_sample_is_of_sets_that_are_there_and_each_transform_is_tried() -> None:
    assert set(SAMPLE) <= set(SETS), sorted(set(SAMPLE) - set(SETS))
    tried = {c.values[1] for c in _cases() if not c.marks}
    assert tried == set(BESIDE)


@pytest.mark.parametrize(("name", "transform"), _cases())
def test_an_older_attempts_files_beside_change_no_verdict(
    tmp_path: Path, name: str, transform: str
) -> None:
    BESIDE[transform](FIXTURES / name, tmp_path / "set")
    before, after = _report(name), analyze(tmp_path / "set", jobs=1)
    assert _answer(after) == _answer(before), (name, transform)
    assert _named(report_to_dict(after)) <= _named(report_to_dict(before)), (name, transform)


def test_the_transforms_add_what_they_say(tmp_path: Path) -> None:
    """The larger world's ranks 4 and 5 beside a 4-rank set, two hours earlier, their
    sidecars saying a world of 6 and other pids; the init death's dump has no op and no
    group, its sidecar Gloo's connectFullMesh error."""
    import json
    import pickle

    src = FIXTURES / "incidents/restart_dies_in_init"
    BESIDE["older_larger_world"](src, tmp_path / "a")
    for rank in (4, 5):
        side = json.loads((tmp_path / f"a/stacks_rank_{rank}.json").read_text())
        assert (side["rank"], side["world_size"], side["pid"]) == (rank, 6, 50_000 + rank)
        doc = pickle.loads((tmp_path / f"a/comm_lib_trace_rank_{rank}").read_bytes())
        was = pickle.loads((src / "comm_lib_trace_rank_3").read_bytes())
        assert [e["time_created_ns"] for e in doc["entries"]] == [
            e["time_created_ns"] - 7200 * 10**9 for e in was["entries"]
        ]
    BESIDE["older_init_death"](FIXTURES / "nccl/missing_dump/2.10-pickle", tmp_path / "b")
    doc = pickle.loads((tmp_path / "b/nccl_trace_rank_3").read_bytes())
    assert (doc["entries"], doc["pg_config"]) == ([], {})


def _named(doc: dict[str, Any]) -> set[int]:
    """Every rank a JSON report names of its judged attempt."""
    ranks = {n["rank"] for n in doc["named_ranks"]}
    ranks |= set(doc["culprit_ranks"]) | set(doc["suspected_ranks"]) | set(doc["victim_ranks"])
    for f in doc["findings"]:
        ranks |= set(f["culprit_ranks"]) | set(f["waiting_ranks"])
    ranks |= {e["rank"] for e in doc.get("timeline") or () if e["rank"] is not None}
    return ranks


@pytest.mark.parametrize("name", SETS)
def test_no_report_names_a_rank_outside_its_attempts_world(name: str) -> None:
    doc = report_to_dict(_report(name))
    world = doc["world_size"]
    assert all(0 <= r < world for r in _named(doc)), (sorted(_named(doc)), world)
    for line in (doc.get("history") or {}).get("attempts", ()):
        ranks = set(line["culprit_ranks"]) | set(line["suspected_ranks"])
        assert all(0 <= r < line["world_size"] for r in ranks), line
