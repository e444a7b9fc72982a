"""The benchmark script runs end to end at a tiny size (a smoke test; no timing assertions)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_DASK = importlib.util.find_spec("distributed") is not None


@pytest.mark.parametrize("mesh", ["2d", "3d"])
def test_bench_runs_and_gets_the_verdict_right(tmp_path: Path, mesh: str) -> None:
    """8 and 16 ranks x 120 entries: floor, frtrace and (with torch) torchfrtrace all measured;
    2d: with the cache twice, and a first run with the cache in each of two pairs; 3d: floor
    and frtrace twice in turn (--repeat), and (with dask) on a local 2-worker Dask cluster."""
    out = tmp_path / "bench.json"
    limit = "16" if HAS_TORCH and mesh == "2d" else "0"
    extra = ["--cache", "--repeat", "2"] if mesh == "2d" else ["--repeat", "2"]
    if mesh == "3d" and HAS_DASK:
        extra.append("--scheduler")
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench.py",
            "--ranks",
            "8",
            "16",
            "--entries",
            "120",
            "--mesh",
            mesh,
            "--workdir",
            str(tmp_path / "work"),
            "--torchfrtrace-max",
            limit,
            "--json",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    assert [r["ranks"] for r in rows] == [8, 16]
    for row in rows:
        assert row["frtrace_correct"] is True
        assert row["floor_s"] > 0 and row["frtrace_s"] > 0 and row["frtrace_mb"] > 0
        if "--repeat" in extra:  # (the median of two: their mean)
            assert len(row["pair_ratios"]) == len(row["cpu_pair_ratios"]) == 2
            assert row["vs_floor"] == pytest.approx(sum(row["pair_ratios"]) / 2)
        else:
            assert row["vs_floor"] == pytest.approx(row["frtrace_s"] / row["floor_s"])
        if limit != "0":
            assert row["torchfrtrace_s"] is not None and row["speedup"] is not None
        if "--cache" in extra:
            assert row["cache_correct"] is True and row["cache_second_s"] > 0
            assert len(row["cache_pair_ratios"]) == 2
        if "--scheduler" in extra:
            assert row["dask_correct"] is True and row["dask_s"] > 0
            assert row["dask_mb"] > 0  # (the coordinator's peak)
    assert "x floor" in proc.stdout and "torchfrtrace" in proc.stdout


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_profile_first_run_times_every_phase(tmp_path: Path, cache: bool) -> None:
    """scripts/profile_first_run.py on a fixture set, its entries gathered from the workers'
    files (the spill threshold at 0): every phase timed, the verdict the CLI's."""
    import os

    from tests.conftest import fixture_sets

    directory = next(d for d in fixture_sets() if "nccl" in str(d))
    out = tmp_path / "phases.json"
    argv = [sys.executable, "scripts/profile_first_run.py", str(directory), "--json", str(out)]
    argv += ["--workdir", str(tmp_path / "not" / "yet")]  # (made where missing)
    argv += [] if cache else ["--no-cache"]
    env = os.environ | {"FRTRACE_SPILL_MIN_BYTES": "0"}
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    phases = json.loads(out.read_text())
    names = [p["phase"] for p in phases["phases"]]
    assert names[0] == "imports" and names[-1] == "total"
    assert {"load (workers)", "entries table (gather)", "analysis"} <= set(names)
    assert ("cache's small tables (thread)" in names) == cache
    expected = subprocess.run(
        [
            sys.executable,
            "-m",
            "frtrace",
            "analyze",
            str(directory),
            "-f",
            "json",
            "-q",
            "--no-cache",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert phases["culprits"] == json.loads(expected.stdout)["culprit_ranks"]


def test_dask_model_measures_its_costs_and_predicts(tmp_path: Path) -> None:
    """scripts/dask_model.py on a 16-rank frsim set: every cost of the built design measured
    (parse, fold, keep, merge, cut), the keys split into small groups' (tp: 8 ranks) and large
    ones', the coordinator's line through two whole runs, the prediction built from them."""
    dumps = tmp_path / "set"
    frsim = [sys.executable, "-m", "frsim", "--world", "16", "--tp", "8", "--pp", "1"]
    frsim += ["--no-coalesced", "--no-all-to-all", "--entries", "120", "--fault", "host_stall"]
    subprocess.run([*frsim, "--out", str(dumps)], cwd=ROOT, check=True, capture_output=True)
    out = tmp_path / "model.json"
    argv = [sys.executable, "scripts/dask_model.py", str(dumps), "--sample", "16"]
    argv += ["--coordinator", "100:2:300", "400:5:600"]
    argv += ["--ranks", "5000", "--workers", "1", "4", "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    model = json.loads(out.read_text())
    costs = model["costs"]
    assert costs["sample_files"] == 16 and costs["entries_per_file"] > 0
    for cost in ("parse_s", "fold_s", "keep_s", "merge_s_per_key", "cut_s_per_key"):
        assert costs[cost] > 0, cost
    assert costs["small_keys_per_rank"] > 0 and costs["large_keys"] > 0
    coord = model["coordinator"]
    assert coord["cpu_s_per_rank"] == pytest.approx(0.01) and coord["cpu_s_fixed"] == 1
    assert coord["mb_per_rank"] == pytest.approx(1.0) and coord["mb_fixed"] == 200
    one, four = model["predictions"]
    keys = costs["small_keys_per_rank"] * 5000 + costs["large_keys"]
    assert one["keys"] == four["keys"] == pytest.approx(keys)
    # 40 tasks of 128 files: 5 merges, then the root
    assert one["tree_levels"] == four["tree_levels"] == 2
    assert four["pass1_s"] == pytest.approx(one["pass1_s"] / 4)
    assert one["coordinator_s"] == four["coordinator_s"] == pytest.approx(51)
    assert one["coordinator_gb"] == pytest.approx(5.2 / 1.024)
    assert four["total_s"] >= four["pass1_s"] + four["tree_s"] + four["pass2_s"]
