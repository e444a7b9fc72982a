"""The gloo_evidence fixtures hold the artifacts their manifest says, and its truth is consistent.

tests/fixtures/gloo_evidence is made by scripts/make_evidence_fixtures.py: real hung Gloo jobs
under real torchrun, with Flight Recorder dumps, recorder sidecars, torchrun logs and
error.json files, and py-spy stacks. This test is structural only (no torch, no analysis): every
file a manifest entry lists exists, nothing else is there, and each artifact it claims for a
rank is present (and absent for the ranks it does not claim).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES

TREE = FIXTURES / "gloo_evidence"
JSON_TREE = FIXTURES / "gloo_evidence_json"
MANIFEST: dict[str, dict[str, Any]] = json.loads((TREE / "MANIFEST.json").read_text())
VERDICTS = {"hang", "desync", "cannot_tell", "healthy", "healthy_with_stragglers"}
STEM = "comm_lib_trace_rank_"


def _ranks_with(directory: Path, prefix: str, suffix: str = "") -> list[int]:
    found = []
    for p in directory.glob(f"{prefix}*{suffix}"):
        middle = p.name.removeprefix(prefix).removesuffix(suffix)
        if middle.isdigit():
            found.append(int(middle))
    return sorted(found)


def test_every_fixture_dir_is_in_the_manifest() -> None:
    assert {p.name for p in TREE.iterdir() if p.is_dir()} == set(MANIFEST)
    assert {p.name for p in JSON_TREE.iterdir() if p.is_dir()} <= set(MANIFEST)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_files_and_artifacts_match_the_manifest(name: str) -> None:
    truth = MANIFEST[name]
    d = TREE / name
    ev = truth["evidence"]
    n = truth["world_size"]
    on_disk = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    assert on_disk == ev["files"]
    assert (d / ev["torchrun_log"]).stat().st_size > 0
    logs = d / "logs" / truth["scenario"] / "attempt_0"
    for r in range(n):  # torchrun --redirects 3: every local rank has both logs
        assert (logs / str(r) / "stdout.log").is_file()
        assert (logs / str(r) / "stderr.log").is_file()

    assert _ranks_with(d, STEM) == ev["flight_recorder_pickle"]
    for r in ev["flight_recorder_pickle"]:
        data = pickle.loads((d / f"{STEM}{r}").read_bytes())  # plain dicts: no torch needed
        assert isinstance(data, dict) and "entries" in data
    twin = JSON_TREE / name
    json_ranks = _ranks_with(twin, STEM, ".json") if twin.exists() else []
    assert json_ranks == ev["flight_recorder_json"]
    assert (sorted(p.name for p in twin.iterdir()) if twin.exists() else []) == ev["json_files"]
    for r in json_ranks:
        assert "entries" in json.loads((twin / f"{STEM}{r}.json").read_text())

    assert [str(r) for r in _ranks_with(d, "stacks_rank_", ".json")] == sorted(
        ev["recorder_sidecars"], key=int
    )
    for r, trigger in ev["recorder_sidecars"].items():
        side = json.loads((d / f"stacks_rank_{r}.json").read_text())
        assert side["format"] == "frtrace-stacks"
        assert side["trigger"] == trigger
        assert trigger["kind"] in ("signal", "exception", "on_demand")

    assert [r for r in range(n) if (logs / str(r) / "error.json").exists()] == ev["error_json"]
    for r in ev["error_json"]:
        err = json.loads((logs / str(r) / "error.json").read_text())
        assert isinstance(err["message"]["message"], str)
        assert "py_callstack" in err["message"]["extraInfo"]

    assert _ranks_with(d, "pyspy_rank_", ".txt") == ev["pyspy"]
    for r in ev["pyspy"]:
        assert "Thread" in (d / f"pyspy_rank_{r}.txt").read_text()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_truth_is_consistent(name: str) -> None:
    truth = MANIFEST[name]
    n = truth["world_size"]
    assert name == f"{truth['scenario']}__{truth['capture']}"
    ranks = set(range(n))
    assert set(truth["culprit_ranks"]) <= ranks
    assert set(truth["waiting_ranks"]) <= ranks
    assert not set(truth["culprit_ranks"]) & set(truth["waiting_ranks"])
    assert not set(truth["crashed_ranks"]) & set(truth["evidence"]["flight_recorder_pickle"])
    first = truth["first_failure"]
    if first is not None:
        assert first["rank"] in ranks
        assert first["role"] in ("cause", "symptom")
    expect = truth["expect"]
    assert expect["verdict"] in VERDICTS
    assert truth["why_expect"]
    if expect["verdict"].startswith("healthy"):
        assert truth["culprit_ranks"] == [] and expect["culprit_ranks"] == []
    elif expect["verdict"] != "cannot_tell":
        assert expect["culprit_ranks"] == truth["culprit_ranks"]
    assert set(truth["state_at_capture"]) == {str(r) for r in range(n)}
    assert set(truth["end_of_rank"]) == {str(r) for r in range(n)}
