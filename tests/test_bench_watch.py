"""scripts/bench_watch.py: both ways of the 4-rank Gloo loop run, the healthy job never fires
the watch (the script fails if any rank's folder holds a file), one check's CPU cost, and the
watch thread's CPU time in the job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SERIAL

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
pytestmark = SERIAL  # a real 4-rank job, timed


def test_bench_watch_runs_both_ways_and_measures_one_check(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, str(ROOT / "scripts" / "bench_watch.py"), "--steps", "20"]
    done = subprocess.run(
        [*argv, "--repeats", "1", "--watch", "5", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["without"]) == len(doc["with"]) == 1
    assert all(rate > 0 for rate in doc["without"] + doc["with"])
    assert 0 < doc["check_cpu_us"] < 100_000 and 0 < doc["check_cpu_us_apart"] < 100_000
    # the pairs' ratio; the watch thread's own CPU time against its process's, checks counted
    assert doc["pair_ratios"] == [doc["with"][0] / doc["without"][0]]
    assert 0 <= doc["watch_cpu_share_percent"] < 100 and doc["watch_checks"] >= 0
    for line in ("one watch check:", "end to end: median ratio", "CPU time: the watch thread"):
        assert line in done.stdout, done.stdout
