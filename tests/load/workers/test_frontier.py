"""A cluster's load cut to the frontier (``load.workers.frontier``, ``load.workers.cluster``): the
folds merge
alike in any tree, the cut keeps what the rules read, and the verdict is the one every entry
gives, on every NCCL fixture and simulated faults, with the cut as tight as it goes."""

from __future__ import annotations

import concurrent.futures as cf
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from frtrace.incident.discover import discover
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import load_dumps
from frtrace.load.workers import cluster
from frtrace.load.workers.cluster import local_frontier, summarize_files
from frtrace.load.workers.executors import FuturesExecutor
from frtrace.load.workers.frontier import Partial, cut, fold, merge
from frtrace.model import Report
from frtrace.pipeline import analyze_dumps
from frtrace.report.json import render_json
from tests.conftest import fixture_sets

ROOT = Path(__file__).resolve().parents[3]


def _cut_load(directory: Path, margin: int) -> DumpSet:
    """The cluster's two passes, on threads here, cutting from the first byte."""
    with cf.ThreadPoolExecutor(2) as pool:
        prepare = local_frontier(pool, min_bytes=0, margin=margin)
        engine = FuturesExecutor(pool, workers=2, prepare=prepare, files_per_task=3)
        return load_dumps(directory, scheduler=engine)


def _same_entries(kept: DumpSet, whole: DumpSet) -> None:
    """The cut load's entries are the whole load's that its frontier keeps, rank by rank, in
    the same order (each task's dumps merged into one table on the worker), stacks and all."""
    assert kept.window is not None
    columns = ["rank", "entry_index", "record_id", "group_name", "op", "input_sizes", "state"]
    expected = []
    for rank in whole.loaded_ranks:
        mine = whole.entries.filter(pc.equal(whole.entries.column("rank"), rank))
        rows = kept.window.keep(mine)
        expected += [
            (*r.values(), whole.stack(s))
            for r, s in zip(
                rows.select(columns).to_pylist(),
                rows.column("stack_id").to_pylist(),
                strict=True,
            )
        ]
    got = [
        (*r.values(), kept.stack(s))
        for r, s in zip(
            kept.entries.select(columns).to_pylist(),
            kept.entries.column("stack_id").to_pylist(),
            strict=True,
        )
    ]
    assert got == expected


def _named(report: Report) -> tuple[object, ...]:
    return (report.verdict, report.culprit_ranks, report.suspected_ranks)


def _simulated(tmp_path: Path, fault: str, *extra: str) -> Path:
    out = tmp_path / fault
    argv = [sys.executable, "-m", "frsim", "--world", "32", "--entries", "300"]
    argv += ["--fault", fault, "--seed", "3", *extra, "--out", str(out)]
    subprocess.run(argv, check=True, cwd=ROOT, capture_output=True)
    return out


def _nccl_sets() -> list[Path]:
    return [d for d in fixture_sets() if d.relative_to(ROOT).parts[2].startswith("nccl")]


def test_the_cut_names_what_every_entry_names_on_every_nccl_fixture() -> None:
    """The tightest cut (1 op of lead-up) on each NCCL fixture: same verdict and ranks."""
    sets, cut_some = _nccl_sets(), 0
    assert len(sets) >= 20
    for directory in sets:
        whole, kept = load_dumps(directory), _cut_load(directory, margin=1)
        assert _named(analyze_dumps(kept)) == _named(analyze_dumps(whole)), directory
        cut_some += kept.entries.num_rows < whole.entries.num_rows
    assert cut_some >= 10  # (the torch 2.3 sets are kept whole: their group names are local)


@pytest.mark.parametrize(
    "fault",
    ["host_stall", "wrong_size", "wrong_op", "opposite_order", "p2p_no_peer", "straggler"],
)
def test_simulated_faults_keep_their_verdict_and_say_the_history_was_cut(
    tmp_path: Path, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 32-rank job (tp, pp, coalesced ops, batched p2p, uneven all_to_all), 300 entries a
    rank, at the default margin: the same verdict, stragglers included, the same groups (the
    member lists left on the workers put back), and the report says what was left out."""
    monkeypatch.setattr(cluster, "LARGE_MEMBERS", 8)  # (the default group's 32 ranks: large)
    directory = _simulated(tmp_path, fault)
    whole, kept = load_dumps(directory), _cut_load(directory, margin=32)
    assert kept.groups.equals(whole.groups)
    _same_entries(kept, whole)
    full, cut_report = analyze_dumps(whole), analyze_dumps(kept)
    assert _named(cut_report) == _named(full)
    assert [s.rank for s in cut_report.stragglers] == [s.rank for s in full.stragglers]
    assert kept.entries.num_rows < 0.7 * whole.entries.num_rows  # (p2p entries all kept)
    assert kept.window is not None and whole.window is None
    said = render_json(cut_report)
    dropped = whole.entries.num_rows - kept.entries.num_rows
    assert f"({dropped:,} entries of settled ops left out)" in said
    assert "left out" not in render_json(full)


def test_a_first_pass_that_fails_costs_only_the_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold that raises (a bug, a lost worker): every entry is read, no window said."""
    directory = _simulated(tmp_path, "host_stall")

    def broken(candidates: object) -> object:
        raise MemoryError("a worker ran out")

    monkeypatch.setattr(cluster, "summarize_files", broken)
    kept = _cut_load(directory, margin=1)
    assert kept.window is None
    assert kept.entries.num_rows == load_dumps(directory).entries.num_rows


def test_large_member_lists_travel_once_and_a_task_sends_one_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second pass sends a task's dumps as one bundle, no copy of a list the root holds
    in it; the bundle arrives as it left."""
    monkeypatch.setattr(cluster, "LARGE_MEMBERS", 16)
    directory = _simulated(tmp_path, "host_stall")
    candidates = discover(directory).candidates[:3]
    answer = cluster.cut_partials(summarize_files(candidates), margin=4)
    assert len(answer.members) == 1  # the default group (32 ranks; tp 8 x pp 2 x dp 2)
    sent = cluster.parse_kept(candidates, answer)
    assert sent.count == 3 and sent.rows.loaded == 3 and sent.rows.files.num_rows == 3
    assert [ranks for key, ranks in sent.lists if key in answer.members] == [None]
    assert all(r is not None for k, r in sent.lists if k not in answer.members)
    assert 0 < sent.entries.num_rows < 3 * 300
    back = pickle.loads(pickle.dumps(sent))
    assert back.entries.equals(sent.entries) and back.stacks == sent.stacks
    for name in ("files", "groups", "pg_status"):
        assert getattr(back.rows, name).equals(getattr(sent.rows, name)), name
    assert back.rows.codes.tolist() == sent.rows.codes.tolist() and back.paths == sent.paths
    assert [k for k, _ in back.lists] == [k for k, _ in sent.lists]


def test_a_cut_load_has_the_whole_loads_side_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths, a damaged file in the middle of a task, the large lists left on the
    workers: the files, groups and pg_status tables and the problems are the whole load's."""
    monkeypatch.setattr(cluster, "LARGE_MEMBERS", 8)
    directory = _simulated(tmp_path, "host_stall")
    damaged = sorted(directory.iterdir())[4]
    damaged.write_bytes(damaged.read_bytes()[:200])
    monkeypatch.chdir(directory.parent)
    here = Path(directory.name)
    whole, kept = load_dumps(here), _cut_load(here, margin=4)
    assert kept.window is not None
    for name in ("files", "groups", "pg_status"):
        assert getattr(kept, name).equals(getattr(whole, name)), name
    assert kept.problems == whole.problems
    (problem,) = [p for p in kept.problems if p.fatal]
    assert problem.path == str(here / damaged.name)
    assert problem.message.startswith(f"{here / damaged.name}: ")


def _rows(rank: int, group: str, seqs: range, **columns: object) -> pa.Table:
    n = len(seqs)
    base: dict[str, object] = {
        "rank": [rank] * n,
        "group_name": [group] * n,
        "group_desc": ["d"] * n,
        "collective_seq": list(seqs),
        "is_p2p": [False] * n,
        "op": ["all_reduce"] * n,
        "state": ["completed"] * n,
        "input_sig": [7] * n,
        "output_sig": [7] * n,
        "input_dtype_sig": [1] * n,
        "output_dtype_sig": [1] * n,
        "time_created_ns": [s * 1_000_000_000 + rank * 1_000 for s in seqs],
    }
    base.update({k: v if isinstance(v, list) else [v] * n for k, v in columns.items()})
    types = {"input_sig": pa.uint32(), "output_sig": pa.uint32()}
    types |= {"input_dtype_sig": pa.uint32(), "output_dtype_sig": pa.uint32()}
    return pa.table({k: pa.array(v, types.get(k)) for k, v in base.items()})


def _seqs(table: pa.Table, rank: int) -> list[int]:
    mine = table.filter(pc.equal(table.column("rank"), rank))
    out: list[int] = mine.column("collective_seq").to_pylist()
    return out


def _canonical(partial: Partial) -> tuple[dict[object, object], dict[object, object]]:
    """A partial as what it says per (group, seq) and per group, whatever its numbering."""
    ops = {}
    for i, key in enumerate(partial.key.tolist()):
        group = partial.groups[key >> 32]
        ops[group, key & 0xFFFFFFFF] = tuple(
            getattr(partial, f)[i].item() for f in ("n", "done", "sig_min", "sig_max", "t1", "t2")
        )
    extents = {
        g: (partial.first[c].item(), partial.last[c].item()) for c, g in enumerate(partial.groups)
    }
    return ops, extents


def test_folds_merge_alike_in_any_order_and_grouping() -> None:
    ranks = [_rows(r, "g", range(r, 50 + r)) for r in range(5)]
    ranks[3] = pa.concat_tables([ranks[3], _rows(3, "h", range(7), state="started")])
    ranks[1] = ranks[1].set_column(
        ranks[1].schema.get_field_index("time_created_ns"),
        "time_created_ns",
        pa.array([s * 1_000_000_000 + 9_000_000 for s in range(1, 51)]),
    )
    folds = [fold(t) for t in ranks]
    flat = merge(*folds)
    tree = merge(merge(folds[3], folds[0]), merge(folds[4], merge(folds[2], folds[1])))
    assert _canonical(flat) == _canonical(tree)
    ops, extents = _canonical(flat)
    assert extents == {("g", "d"): (4, 53), ("h", "d"): (0, 6)}
    assert ops[("g", "d"), 10] == (
        5,
        True,
        ops[("g", "d"), 10][2],
        ops[("g", "d"), 10][2],
        *[
            10 * 10**9 + 9_000_000,
            10 * 10**9 + 4_000,
        ],
    )  # 5 ranks, all done, one signature; rank 1 last (9 ms late), rank 4 before it
    assert ops[("h", "d"), 3][:2] == (1, False)
    assert cut(flat, 3) == cut(tree, 3)


def test_the_cut_sits_before_the_first_op_not_every_member_finished() -> None:
    """Rank 2 stopped at seq 80 of 100; rank 3 began later (its buffer wrapped); rank 1
    recorded a different size at seq 40 and finished it: the cut is 5 before seq 40."""
    stalled = _rows(2, "g", range(81), state=["completed"] * 80 + ["started"])
    ranks = [
        _rows(0, "g", range(101)),
        _rows(1, "g", range(101), input_sig=[7] * 40 + [8] + [7] * 60),
        stalled,
        _rows(3, "g", range(20, 101)),
    ]
    frontier = cut(merge(*[fold(t) for t in ranks]), margin=5)
    assert frontier.cutoffs == {("g", "d"): 35}
    assert frontier.settled == 35 - 20  # seqs 20-34: every rank, completed, one size
    assert _seqs(frontier.keep(ranks[3]), 3) == list(range(35, 101))
    assert _seqs(frontier.keep(stalled), 2) == list(range(35, 81))


def test_a_rank_stuck_far_behind_keeps_its_own_newest_ops() -> None:
    """The others went on in another group; rank 1's newest op in g is far below g's cut."""
    ahead = _rows(0, "g", range(200))
    behind = _rows(1, "g", range(10))
    late = pa.concat_tables([ahead, _rows(0, "h", range(5), state="started")])
    frontier = cut(merge(fold(late), fold(behind)), margin=4)
    assert frontier.cutoffs[("g", "d")] == 6  # the first unsettled op, 10, less the margin
    kept = frontier.keep(behind)
    assert _seqs(kept, 1) == list(range(6, 10))
    only_finished = cut(merge(fold(ahead), fold(_rows(1, "g", range(200)))), margin=4)
    assert only_finished.cutoffs[("g", "d")] == 196  # all settled: the group's last 4 kept
    assert _seqs(only_finished.keep(_rows(9, "g", range(150, 170))), 9) == list(range(166, 170))


def test_a_settled_op_one_rank_arrived_at_clearly_last_is_kept() -> None:
    """The straggler finder's evidence survives the cut: rank 2 enqueued seq 20 and 30 some
    ms after the others (3 ms: kept; 1 ms: launch jitter, cut)."""
    late = [s * 1_000_000_000 + {20: 3_000_000, 30: 1_000_000}.get(s, 0) for s in range(100)]
    ranks = [_rows(r, "g", range(100)) for r in range(2)]
    ranks.append(_rows(2, "g", range(100), time_created_ns=late))
    frontier = cut(merge(merge(fold(ranks[2]), fold(ranks[0])), fold(ranks[1])), margin=4)
    assert frontier.late == {("g", "d"): frozenset({20})}
    assert _seqs(frontier.keep(ranks[0]), 0) == [20, 96, 97, 98, 99]
    assert frontier.settled == 96 - 1


def test_p2p_and_unsequenced_entries_are_always_kept() -> None:
    ranks = [_rows(r, "g", range(100)) for r in range(3)]
    frontier = cut(merge(*[fold(t) for t in ranks]), margin=2)
    p2p = _rows(0, "g", range(3), is_p2p=True, op="send")
    bare = _rows(0, "g", range(1)).set_column(3, "collective_seq", pa.array([None], pa.int64()))
    stranger = _rows(0, "other", range(3))
    for table in (p2p, bare, stranger):
        assert frontier.keep(table).num_rows == table.num_rows


def test_torch_2_3_dumps_are_never_cut(tmp_path: Path) -> None:
    """Their groups are named by a per-process id: two groups may share a name."""
    old = ROOT / "tests/fixtures/nccl/host_stall/1.4-pickle"
    candidates = discover(old).candidates
    assert summarize_files(candidates).whole
    assert _cut_load(old, margin=1).window is None
