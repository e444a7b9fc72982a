"""A dump that records no op and no group (a process that died in ``init_process_group``)
beside ranks that ran ops (``frtrace.load.inits``): set aside where they completed one or it
was dumped before their first, kept where it may be the rank they wait on; the recorder's
sidecar says the job's world (a Gloo dump does not)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from frtrace.load.tables import load_dumps
from tests.conftest import make_dump, make_entry, write_pickle

BASE = 1_700_000_000_000_000_000
SECOND = 1_000_000_000


def _job(directory: Path, *, completed: bool) -> None:
    """Ranks 0-2 of a 4-rank job in all_reduce #2 (#1 completed, or not), rank 3's dump
    with no op and no group (what the recorder writes when init_process_group raises)."""
    for rank in range(3):
        first = make_entry(time_created_ns=BASE, collective_seq_id=1)
        if not completed:
            first |= {"state": "scheduled", "time_discovered_completed_ns": None}
            first |= {"retired": False}
        pending = make_entry(
            record_id=1,
            collective_seq_id=2,
            op_id=2,
            time_created_ns=BASE + SECOND,
            state="scheduled",
            time_discovered_completed_ns=None,
            retired=False,
        )
        entries = [first, pending] if completed else [first]
        write_pickle(directory / f"nccl_trace_rank_{rank}", make_dump(entries, world=4))
    empty = make_dump([], world=4) | {"pg_config": {}, "pg_status": {}}
    write_pickle(directory / "nccl_trace_rank_3", empty)


def _set_aside(problems: tuple[object, ...]) -> list[str]:
    return [m for p in problems if "never got through init_process_group" in (m := str(p))]


def test_beside_ranks_that_completed_an_op_it_is_another_process(tmp_path: Path) -> None:
    _job(tmp_path, completed=True)
    dumps = load_dumps(tmp_path, cache=False)
    assert dumps.loaded_ranks == (0, 1, 2) and dumps.world.size == 4
    (said,) = _set_aside(dumps.problems)
    assert "rank 3 has no dump of attempt" in said and "of another attempt or run" in said


def test_beside_ranks_stuck_in_their_first_op_it_may_be_the_one_they_wait_on(
    tmp_path: Path,
) -> None:
    """No op completed: the job may never have got through its init because of rank 3."""
    _job(tmp_path, completed=False)
    dumps = load_dumps(tmp_path, cache=False)
    assert dumps.loaded_ranks == (0, 1, 2, 3) and not _set_aside(dumps.problems)


def test_written_before_their_first_op_it_is_an_earlier_attempt(tmp_path: Path) -> None:
    """No op completed, but the file was written an hour before their first op (no sidecar
    says when it was dumped: its file time, as stale dumps are read)."""
    _job(tmp_path, completed=False)
    hour_before = BASE - 3600 * SECOND
    os.utime(tmp_path / "nccl_trace_rank_3", ns=(hour_before, hour_before))
    dumps = load_dumps(tmp_path, cache=False)
    assert dumps.loaded_ranks == (0, 1, 2)
    (said,) = _set_aside(dumps.problems)
    assert "its file written before ranks 0-2' first op: an earlier attempt" in said


def test_the_sidecar_says_the_jobs_world(monkeypatch: pytest.MonkeyPatch) -> None:
    from frtrace.job.sidecar import capture_current_stacks

    monkeypatch.setenv("WORLD_SIZE", "3")
    assert capture_current_stacks("on_demand", rank=1)["world_size"] == 3
    monkeypatch.delenv("WORLD_SIZE")
    assert json.loads(json.dumps(capture_current_stacks("on_demand")))["world_size"] is None
