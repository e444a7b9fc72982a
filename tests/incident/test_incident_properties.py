"""Generated incidents out of real dumps: a real hung job's folder with stale files of an
earlier run, byte-identical copies, an earlier attempt's logs blaming an innocent rank, and
log lines naming ranks outside the job. Whatever is mixed in, the report never names an
innocent rank as a culprit (only the job's culprits, or ranks left without a dump of this
attempt) and never a rank outside the job."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from frtrace.cli.app import app
from tests.conftest import DERANDOMIZE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GLOO = FIXTURES / "gloo"
TRUTH = json.loads((GLOO / "MANIFEST.json").read_text())
# real 4-rank hangs where every rank dumped: (fixture, its culprits)
BASES = sorted(
    name
    for name, t in TRUTH.items()
    if t["world_size"] == 4 and t["culprit_ranks"] and len(t["ranks_with_dumps"]) == 4
)
HOUR_NS = 3_600_000_000_000


_TIME_KEYS = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


def _times(doc: dict[str, Any]) -> list[int]:
    return [e[k] for e in doc["entries"] for k in _TIME_KEYS if e.get(k)]


def _first_ns(folder: Path) -> int:
    """The earliest entry of a real job's dumps."""
    return min(min(_times(pickle.loads(f.read_bytes()))) for f in folder.glob("rank_*"))


def _stale(src: Path, dst: Path, end_ns: int) -> None:
    """``src``'s dump as an earlier run left it: its newest time at ``end_ns``, the file
    written then (a fixture of this repository: plain data, read with pickle)."""
    doc = pickle.loads(src.read_bytes())
    shift = end_ns - max(_times(doc))
    for entry in doc["entries"]:
        for key in (
            "time_created_ns",
            "time_discovered_started_ns",
            "time_discovered_completed_ns",
        ):
            if entry.get(key):
                entry[key] += shift
    dst.write_bytes(pickle.dumps(doc, protocol=2))
    os.utime(dst, (end_ns / 1e9 + 1, end_ns / 1e9 + 1))


def _error_file(message: str, when_s: int) -> dict[str, Any]:
    return {
        "message": {
            "message": f"RuntimeError: {message}",
            "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(when_s)},
        }
    }


_CLEAN: dict[str, set[int]] = {}


def _analyze(folder: Path) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, ["analyze", str(folder), "-f", "json", "--no-cache", "--allow-partial"]
    )
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout[result.stdout.index("{") :])
    return doc


def _clean(base: str) -> set[int]:
    """What the real job's own folder names (the analysis' answer, right or not: what is
    mixed in must not add to it)."""
    if base not in _CLEAN:
        _CLEAN[base] = _names(_analyze(GLOO / base))
    return _CLEAN[base]


def _names(doc: dict[str, Any]) -> set[int]:
    """Every rank the report puts forward: culprits and suspects."""
    return set(doc.get("culprit_ranks") or ()) | set(doc.get("suspected_ranks") or ())


def _all_ranks(value: Any) -> list[int]:
    """Every value of a key named like a rank anywhere in the JSON report."""
    found: list[int] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("rank", "ranks", "culprit_ranks", "suspected_ranks", "waiting_ranks"):
                items = item if isinstance(item, list) else [item]
                found += [r for r in items if isinstance(r, int) and not isinstance(r, bool)]
            found += _all_ranks(item)
    elif isinstance(value, list):
        for item in value:
            found += _all_ranks(item)
    return found


@settings(
    max_examples=8,
    deadline=None,
    derandomize=DERANDOMIZE,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    base=st.sampled_from(BASES),
    stale=st.sets(st.integers(0, 3), max_size=2),
    other=st.sampled_from(sorted(TRUTH)),
    copies=st.sets(st.integers(0, 3), max_size=4),
    blamed=st.integers(0, 3),
    restart=st.booleans(),
    far_rank=st.sampled_from([4, 12994, 1 << 19]),
)
def test_a_generated_incident_never_names_an_innocent_or_a_rank_outside_the_job(
    tmp_path_factory: Any,
    base: str,
    stale: set[int],
    other: str,
    copies: set[int],
    blamed: int,
    restart: bool,
    far_rank: int,
) -> None:
    root = tmp_path_factory.mktemp("incident")
    _check(root, base, stale, other, copies, blamed, restart, far_rank)


def test_a_tie_left_by_stale_ranks_set_aside_names_no_innocent(tmp_path: Path) -> None:
    """size_mismatch with ranks 0 and 1's files an earlier run's: 2 and 3 are left, and
    disagree at one seq with no majority. Ranks 0 and 1 have no dump of this run, so the
    desync rule cannot tell which of 2 and 3 is wrong: it names neither (cannot tell), and
    says that the dumps of 0 and 1 would settle it."""
    report = _check(tmp_path, "size_mismatch", {0, 1}, "broadcast_root", set(), 0, False, 4)
    assert report["verdict"] == "cannot_tell" and not _names(report)
    (tie,) = [f for f in report["findings"] if f["code"] == "FR003"]
    assert "cannot tell which of ranks 2-3" in tie["summary"]
    assert "ranks 0-1 left no dump" in tie["why"]


def _check(
    root: Path,
    base: str,
    stale: set[int],
    other: str,
    copies: set[int],
    blamed: int,
    restart: bool,
    far_rank: int,
) -> dict[str, Any]:
    job = root / "job"
    shutil.copytree(GLOO / base, job)
    without = set()
    start = _first_ns(job)
    for rank in sorted(stale):  # an earlier run's file where this run's rank left none
        src = GLOO / other / f"rank_{rank}"
        if src.exists():
            _stale(src, job / f"rank_{rank}", start - 2 * HOUR_NS)
            without.add(rank)
    for rank in sorted(copies):  # collect's copies beside the originals
        (job / "host-a").mkdir(exist_ok=True)
        shutil.copy2(job / f"rank_{rank}", job / "host-a" / f"rank_{rank}")
    if restart:  # an earlier attempt's error file blames a rank: never evidence of this one
        old = job / "logs" / "run" / "attempt_0" / str(blamed)
        old.mkdir(parents=True)
        doc = _error_file("CUDA error: an illegal memory access", start // 10**9 - 7200)
        (old / "error.json").write_text(json.dumps(doc))
        for rank in range(4):
            now = job / "logs" / "run" / "attempt_1" / str(rank)
            now.mkdir(parents=True)
            (now / "stderr.log").write_text("step 0 done\n")
    (job / "train.log").write_text(
        f"[rank{far_rank}]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        f"slurm job {far_rank}: Timed out waiting for the collective\n"
    )
    report = _analyze(job)
    allowed = _clean(base) | without
    assert _names(report) <= allowed, (base, stale, other, copies, report["headline"])
    assert all(0 <= r < 4 for r in _all_ranks(report)), report["headline"]
    return report
