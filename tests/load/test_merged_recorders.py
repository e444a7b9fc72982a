"""One rank's several dumps made one rank's evidence (``frtrace.load.recorders``): entries seen
twice counted once, each keeping its recorder, completion read as each recorder marks it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from frtrace.load.recorders import qualified
from frtrace.load.tables import load_dumps
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from tests.conftest import (
    FIXTURES,
    GLOO,
    GLOO_JSON,
    make_dump,
    make_entry,
    write_json,
    write_pickle,
)

RECORDERS = FIXTURES / "recorders"
MANIFEST = json.loads((RECORDERS / "MANIFEST.json").read_text())
T0 = 1_800_000_000_000_000_000


@pytest.mark.parametrize("scenario", sorted(p.name for p in GLOO.iterdir() if p.is_dir()))
def test_a_pickle_beside_its_json_gives_the_pickles_answer(tmp_path: Path, scenario: str) -> None:
    """Every real Gloo scenario: its pickles and their JSON twins (the same processes, ms
    apart) in one folder load as the pickles alone (every entry once, stacks kept) and get
    their verdict and culprits."""
    for src in (GLOO / scenario).glob("rank_*"):
        shutil.copy(src, tmp_path / src.name)
    for src in (GLOO_JSON / scenario).glob("rank_*.json"):
        shutil.copy(src, tmp_path / src.name)
    alone, both = load_dumps(GLOO / scenario), load_dumps(tmp_path)
    assert both.loaded_ranks == alone.loaded_ranks
    assert both.files.num_rows == alone.files.num_rows
    keys = ["rank", "collective_seq", "op", "retired"]
    assert both.entries.select(keys).to_pylist() == alone.entries.select(keys).to_pylist()
    assert both.entries.column("stack_id").null_count == alone.entries.column("stack_id").null_count
    a, b = analyze(GLOO / scenario), analyze(tmp_path)
    assert (b.verdict, b.culprit_ranks, b.suspected_ranks) == (
        a.verdict,
        a.culprit_ranks,
        a.suspected_ranks,
    )


def test_the_real_pickle_and_json_job_names_its_culprit() -> None:
    """recorders/pickle_and_json: rank 2 never joined; one files row per rank."""
    truth = MANIFEST["pickle_and_json"]
    dumps = load_dumps(RECORDERS / "pickle_and_json")
    assert dumps.files.column("rank").to_pylist() == [0, 1, 2, 3]
    assert all(dumps.files.column("has_stacks").to_pylist())
    report = analyze(RECORDERS / "pickle_and_json")
    assert list(report.culprit_ranks) == truth["culprit_ranks"]
    assert list(report.victim_ranks) == truth["waiting_ranks"]


def test_a_gloo_and_nccl_process_is_one_rank_with_two_recorders() -> None:
    """recorders/gloo_nccl: each rank's Gloo and NCCL recorders read as one rank; the default
    group, recorded by both with a sequence each, is one group per recorder with the recorded
    members; the NCCL part's culprit is named, the Gloo part's finished ops are finished."""
    truth = MANIFEST["gloo_nccl"]
    dumps = load_dumps(RECORDERS / "gloo_nccl")
    assert dumps.loaded_ranks == tuple(range(8)) and dumps.world.size == 8
    names = set(dumps.entries.column("group_name").to_pylist())
    assert {qualified("0", "gloo"), qualified("0", "nccl")} <= names and "0" not in names
    backends = dumps.entries.column("backend").to_pylist()
    assert backends.count("gloo") == 16  # two CPU all_reduces on each of the 8 ranks
    report = analyze(RECORDERS / "gloo_nccl")
    assert list(report.culprit_ranks) == truth["culprit_ranks"]
    assert list(report.victim_ranks) == truth["waiting_ranks"]
    alone = analyze(FIXTURES / "nccl/host_stall/2.10-pickle")
    assert [f.kind for f in report.findings] == [f.kind for f in alone.findings]
    gloo_group = next(g for g in report.groups if g.name == qualified("0", "gloo"))
    assert gloo_group.members == tuple(range(8)) and not gloo_group.inferred


def _nccl(rank: int, seq: int, state: str, at: int, **more: Any) -> dict[str, Any]:
    done = state == "completed"
    return make_entry(
        record_id=seq - 1,
        collective_seq_id=seq,
        op_id=seq,
        state=state,
        retired=done,
        time_created_ns=T0 + at,
        time_discovered_completed_ns=T0 + at + 1_000 if done else None,
        **more,
    )


def test_a_later_dump_of_one_recorder_moves_its_entries_on(tmp_path: Path) -> None:
    """Two dumps of one NCCL recorder, the pickle taken while #2 ran, the JSON after it
    completed: one entry #2, completed (a completion only moves an entry on); the healthy
    job is healthy whichever file comes first by name."""
    for r in range(2):
        early = [_nccl(r, 1, "completed", 0), _nccl(r, 2, "scheduled", 10)]
        late = [_nccl(r, 1, "completed", 0), _nccl(r, 2, "completed", 10)]
        doc = make_dump(late, world=2)
        for e in doc["entries"]:
            e.pop("frames")
            e["process_group"] = list(e["process_group"])
            for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                e[key] = e[key] or 0
        write_pickle(tmp_path / f"rank_{r}", make_dump(early, world=2))
        write_json(tmp_path / f"rank_{r}.json", doc)
    dumps = load_dumps(tmp_path)
    assert dumps.entries.num_rows == 4
    assert dumps.entries.column("state").to_pylist() == ["completed"] * 4
    assert dumps.entries.column("stack_id").null_count == 0  # (the pickle's frames kept)
    assert analyze(tmp_path).verdict == Verdict.HEALTHY


def test_completion_is_read_per_recorder(tmp_path: Path) -> None:
    """A rank whose hook recorder (``nccl2:``) marks completions and whose Gloo recorder
    never moves ``state``: its Gloo ops are finished by ``retired`` (not pending because the
    rank's other recorder shows states), its hook op not completed is pending; a subgroup
    whose members the hook recorder does not know has none in pg_config (inferred)."""
    for r in range(2):
        gloo = [
            make_entry(
                record_id=i,
                collective_seq_id=i + 1,
                op_id=i + 1,
                profiling_name="gloo:all_reduce",
                state="scheduled",
                time_discovered_completed_ns=None,
                time_created_ns=T0 + i * 1_000,
            )
            for i in range(2)
        ]
        hook = [
            _nccl(
                r, 1, "completed", 500, profiling_name="nccl2:all_reduce", process_group=("5", "tp")
            ),
            _nccl(
                r, 2, "scheduled", 800, profiling_name="nccl2:all_reduce", process_group=("5", "tp")
            ),
        ]
        write_pickle(tmp_path / f"gloo_trace_rank_{r}", make_dump(gloo, world=2))
        pg_config = {"5": {"name": "5", "desc": "tp", "ranks": "[]"}}
        write_pickle(tmp_path / f"rank_{r}", make_dump(hook, world=2, pg_config=pg_config))
    report = analyze(tmp_path)
    assert report.verdict == Verdict.CANNOT_TELL  # (nccl2 #2 issued everywhere, not completed)
    stuck = [f for f in report.findings if f.group is not None]
    assert stuck and {f.group.name for f in stuck} == {"5"}
    assert all(f.seq == 2 for f in stuck)
    tp = next(g for g in report.groups if g.name == "5")
    assert tp.inferred
