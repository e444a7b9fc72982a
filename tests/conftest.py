"""Shared test helpers: a dump factory that names only what a test is about."""

from __future__ import annotations

import gc
import json
import os
import pickle
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

FIXTURES = Path(__file__).parent / "fixtures"
GLOO = FIXTURES / "gloo"
GLOO_JSON = FIXTURES / "gloo_json"

# scripts/check runs the suite on every core (pytest-xdist: -n auto --dist loadgroup); tests
# marked with one xdist_group run one after another on one worker. SERIAL (a module's
# `pytestmark`): the real multi-rank torch jobs, whose ranks' timing is what they test (two at
# once on a 2-core machine starve each other), and the builds of the sdist from the checkout
# (`python -m build` writes frtrace.egg-info beside pyproject.toml: two at once would race).
# Anything else runs on whichever worker is free: each test has its own tmp_path, cache
# (_private_cache), ports (tests.collect.jobs.free_port) and job tags.
SERIAL = pytest.mark.xdist_group("serial")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files")


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own cache directory: the suite never reads or fills the user's."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("FRTRACE_NO_CACHE", raising=False)
    monkeypatch.delenv("FRTRACE_CACHE_MAX_BYTES", raising=False)
    # Progress lines appear once a run has taken 1 s: on a busy machine a test's output would
    # depend on the load. The tests of the progress display set their own.
    monkeypatch.setenv("FRTRACE_PROGRESS_AFTER_S", "600")
    return cache


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def fixture_sets() -> list[Path]:
    """Every committed dump set: folders under fixtures/ that hold files and no folders
    (not the golden reports, nor the stack samples of tests/pystack)."""
    sets = set()
    for d in FIXTURES.rglob("*"):
        if not d.is_dir() or d.name in ("golden", "pystack") or not any(d.iterdir()):
            continue
        parts = d.relative_to(FIXTURES).parts
        if "logs" in parts:  # torchrun's --log-dir inside a set is part of that set
            sets.add(FIXTURES.joinpath(*parts[: parts.index("logs")]))
        elif not any(p.is_dir() for p in d.iterdir()):
            sets.add(d)
    return sorted(d for d in sets if _holds_dumps(d))


def _holds_dumps(directory: Path) -> bool:
    """A job that left logs only (every rank died before dumping) is not a dump set."""
    from frtrace.errors import NoDumpsFound
    from frtrace.incident.discover import discover

    try:
        discover(directory)
    except NoDumpsFound:
        return False
    return True


def make_entry(**overrides: Any) -> dict[str, Any]:
    """A completed 4-element all_reduce on the default group, FR format 2.10."""
    base: dict[str, Any] = {
        "record_id": 0,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": 1,
        "p2p_seq_id": 0,
        "op_id": 1,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_700_000_000_000_000_000,
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": 1_700_000_000_001_000_000,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
        "thread_id": "1",
        "thread_name": "python",
        "frames": [
            {
                "name": "all_reduce",
                "filename": "torch/distributed/distributed_c10d.py",
                "line": 2800,
            },
            {"name": "train_step", "filename": "train.py", "line": 42},
        ],
    }
    return base | overrides


def make_dump(entries: list[dict[str, Any]], *, world: int = 2, **top: Any) -> dict[str, Any]:
    """A 2.10 dump dict around ``entries`` with a default-group pg_config of ``world`` ranks."""
    ranks = ", ".join(str(r) for r in range(world))
    base: dict[str, Any] = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": f"[{ranks}]"}},
        "comm_lib_version": "2.21.5",
        "pg_status": {
            "0": {
                "last_enqueued_collective": len(entries),
                "last_started_collective": -1,
                "last_completed_collective": len(entries),
            }
        },
        "entries": entries,
    }
    return base | top


def write_pickle(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(payload, protocol=2))
    return path


def write_json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def healthy_set(directory: Path, *, world: int = 2, steps: int = 3) -> Path:
    """``world`` ranks that each completed ``steps`` all_reduces."""
    for rank in range(world):
        entries = [
            make_entry(
                record_id=i,
                collective_seq_id=i + 1,
                op_id=i + 1,
                time_created_ns=1_700_000_000_000_000_000 + i * 1_000_000,
            )
            for i in range(steps)
        ]
        write_pickle(directory / f"nccl_trace_rank_{rank}", make_dump(entries, world=world))
    return directory


def fr211_set(directory: Path, *, bad_split: bool = True) -> Path:
    """4 ranks as torch 2.16's hook-based recorder writes them (FR format 2.11, by its
    description in FORMAT.md section 9): ``nccl2:`` and ``c10d:`` profiling names, an ``ep``
    subgroup whose pg_config ranks are empty, and an all_to_all with per-peer split sizes,
    hung on every rank. With ``bad_split``, rank 1 sends 8 elements to rank 2, which expects
    4 from it."""
    world = 4
    for rank in range(world):
        sends = [4] * world
        if bad_split and rank == 1:
            sends[2] = 8
        base = 1_700_000_000_000_000_000
        entries = [
            make_entry(
                record_id=0, op_id=1, profiling_name="nccl2:all_reduce", time_created_ns=base
            ),
            make_entry(
                record_id=1,
                pg_id=1,
                process_group=("1", "ep"),
                collective_seq_id=1,
                op_id=1,
                profiling_name="c10d:all_to_all_single",
                input_sizes=[[sum(sends)]],
                output_sizes=[[4 * world]],
                input_split_sizes=sends,
                output_split_sizes=[4] * world,
                state="scheduled",
                retired=True,  # "retire at issue, never completed"
                time_discovered_completed_ns=None,
                time_created_ns=base + 1_000_000,
            ),
        ]
        ranks = ", ".join(str(r) for r in range(world))
        dump = make_dump(
            entries,
            world=world,
            version="2.11",
            pg_config={
                "0": {"name": "0", "desc": "default_pg", "ranks": f"[{ranks}]"},
                "1": {"name": "1", "desc": "ep", "ranks": "[]"},
            },
        )
        write_pickle(directory / f"comm_lib_trace_rank_{rank}", dump)
    return directory


# Property tests (hypothesis): FRTRACE_EXAMPLES sets how many examples (FRTRACE_EXAMPLES=1000
# runs longer), seeded unless FRTRACE_RANDOM is set.
EXAMPLES = int(os.environ.get("FRTRACE_EXAMPLES", "40"))
DERANDOMIZE = os.environ.get("FRTRACE_RANDOM", "") in ("", "0")
# the loader's properties: each example is cheap, so five times as many
LOADER_SETTINGS = settings(
    max_examples=EXAMPLES * 5,
    deadline=None,
    derandomize=DERANDOMIZE,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def memory_kept(run: Callable[[], object], times: int, warm: int = 1) -> int:
    """Bytes Python's allocator holds after ``times`` more calls of ``run`` than before them
    (after ``warm`` calls, and one more while tracing: caches filled once are not a leak)."""
    for _ in range(warm):
        run()
    gc.collect()
    tracemalloc.start()
    try:
        run()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(times):
            run()
        gc.collect()
        return int(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
