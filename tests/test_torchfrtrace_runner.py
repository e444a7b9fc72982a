"""scripts/torchfrtrace_runner.py: runs torchfrtrace in a subprocess and parses its verdict."""

from __future__ import annotations

import importlib.util
import pickle
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

RUNNER_PATH = Path(__file__).resolve().parents[1] / "scripts" / "torchfrtrace_runner.py"


def _has_torchfrtrace() -> bool:
    """torch with the in-wheel analyzer (2.10+), found without importing torch (~2 s)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(
        (Path(loc) / "distributed" / "flight_recorder" / "fr_trace.py").is_file()
        for loc in spec.submodule_search_locations
    )


needs_torch = pytest.mark.skipif(not _has_torchfrtrace(), reason="torch (2.10+) not installed")


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("torchfrtrace_runner", RUNNER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _entry(record_id: int, seq: int, state: str = "completed") -> dict[str, Any]:
    """One NCCL all_reduce entry with every field a torch 2.13 (FR 2.10) pickle dump has."""
    return {
        "record_id": record_id,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "thread_name": "python",
        "thread_id": "140000000000000",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_700_000_000_000_000_000 + 1_000 * record_id,
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": state == "completed",
        "timeout_ms": 600_000,
        "is_p2p": False,
        "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2500}],
    }


def _write_dumps(directory: Path, entries_by_rank: dict[int, list[dict[str, Any]]]) -> Path:
    for rank, entries in entries_by_rank.items():
        dump = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
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
        (directory / f"rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return directory


@needs_torch
def test_healthy_two_rank_dump(runner: ModuleType, tmp_path: Path) -> None:
    """A healthy 2-rank NCCL dump set: clean exit, nothing blamed, time and RSS measured."""
    dumps = _write_dumps(tmp_path, {r: [_entry(i, i + 1) for i in range(3)] for r in (0, 1)})

    result = runner.run_torchfrtrace(dumps, prefix="rank_", timeout_s=120)

    assert result.returncode == 0, result.raw_output
    assert not result.crashed
    assert not result.timed_out
    assert result.error_line is None
    assert result.blamed_ranks == ()
    assert result.findings == ()
    assert result.wall_s > 0
    assert result.peak_rss_mb is not None and result.peak_rss_mb > 10
    assert result.command[-2:] == ("--prefix", "rank_")


@needs_torch
def test_truncated_dump_is_reported_as_crash(runner: ModuleType, tmp_path: Path) -> None:
    """A truncated pickle makes torchfrtrace raise; the runner reports the exception line."""
    _write_dumps(tmp_path, {r: [_entry(0, 1)] for r in (0, 1)})
    rank_1 = tmp_path / "rank_1"
    rank_1.write_bytes(rank_1.read_bytes()[:40])

    result = runner.run_torchfrtrace(tmp_path, timeout_s=120)

    assert result.returncode == 1
    assert result.crashed
    assert result.error_line == "_pickle.UnpicklingError: pickle data was truncated"
    assert result.blamed_ranks == ()


def test_parse_output_blocks(runner: ModuleType) -> None:
    """Missing-rank and culprit blocks (torch 2.13 wording) become findings and blamed ranks."""
    output = "\n".join(
        [
            "Not all ranks joining collective, sequence number: 3",
            "internal record id: 2",
            "group info: 0:default_pg",
            "collective: nccl:all_reduce",
            "missing ranks: {1, 3}",
            "expected ranks: {0, 1, 2, 3}",
            "collective stack trace: ",
            " all_reduce at distributed_c10d.py:1",
            "Collective sequence number: 2 has errors",
            "group info: 1:tp",
            "collective: nccl:broadcast",
            "error msg: Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective"
            " type: 'broadcast' does not match found collective type: 'all_reduce', Culprit rank 0;"
            " Error type: SIZE_OR_SYNTAX_MISMATCH",
            "collective stack trace: ",
            "No errors found for this collective entry, There could be some other reasons why we"
            " see collective timeout.",
            "Too many mismatches for process_group 1123: tp aborting",
        ]
    )

    findings = runner.parse_torchfrtrace_output(output)

    assert [f.kind for f in findings] == ["missing_ranks", "mismatch", "no_errors", "aborted"]
    missing, mismatch = findings[0], findings[1]
    assert (missing.group, missing.seq_id, missing.ranks) == ("0:default_pg", 3, (1, 3))
    assert (mismatch.group, mismatch.seq_id, mismatch.ranks) == ("1:tp", 2, (0, 2))
    assert mismatch.error_types == ("COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH")
    assert findings[3].group == "tp"
