"""scripts/bench_watch.py: both ways of the 4-rank Gloo loop run, the healthy job never fires
the watch (the script fails if any rank's folder holds a file), and one check's CPU cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


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
    assert 0 < doc["check_cpu_us"] < 100_000
    assert "difference:" in done.stdout and "one watch check:" in done.stdout
