"""The groups table stores each distinct member list once (frtrace.load.handover.members).

Every rank records the default group's world-size list: kept per row, the lists grow with the
square of the job (4 GB at 32,768 ranks). These tests pin that a list is stored once however
many ranks recorded it, that readers still see every row's members, and that Parquet gets
plain lists.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from frtrace.load.export import export_parquet
from frtrace.load.handover.members import recorded_groups
from frtrace.load.tables import load_dumps
from tests.conftest import make_dump, make_entry, write_pickle


def _mesh_set(directory: Path, world: int = 16, tp: int = 4) -> Path:
    """``world`` ranks; each records the default group and its own tp group (2.x pg_config)."""
    for rank in range(world):
        first = rank - rank % tp
        tp_ranks = ", ".join(str(r) for r in range(first, first + tp))
        everyone = ", ".join(str(r) for r in range(world))
        config = {
            "0": {"name": "0", "desc": "default_pg", "ranks": f"[{everyone}]"},
            f"tp{first}": {"name": f"tp{first}", "desc": "mesh_tp", "ranks": f"[{tp_ranks}]"},
            "broken": {"name": "broken", "desc": "x", "ranks": "not a list"},
        }
        write_pickle(
            directory / f"nccl_trace_rank_{rank}",
            make_dump([make_entry()], world=world, pg_config=config),
        )
    return directory


def test_each_distinct_member_list_is_stored_once(tmp_path: Path) -> None:
    dumps = load_dumps(_mesh_set(tmp_path), jobs=1)
    column = dumps.groups.column("ranks").combine_chunks()
    assert pa.types.is_dictionary(column.type)
    # 16 ranks x 3 rows, but 1 default list + 4 tp lists (the unreadable one is null)
    assert dumps.groups.num_rows == 48
    assert len(column.dictionary) == 5
    assert column.null_count == 16
    assert sum(len(v) for v in column.dictionary.to_pylist()) == 16 + 4 * 4


def test_readers_see_every_rows_members_and_share_equal_lists(tmp_path: Path) -> None:
    dumps = load_dumps(_mesh_set(tmp_path), jobs=1)
    rows = recorded_groups(dumps.groups)
    default = [r for r in rows if r.desc == "default_pg"]
    assert len(default) == 16 and all(r.ranks == tuple(range(16)) for r in default)
    assert len({id(r.ranks) for r in default}) == 1  # one tuple shared by all 16 rows
    tp = {r.rank: r.ranks for r in rows if r.desc == "mesh_tp"}
    assert tp[5] == (4, 5, 6, 7) and tp[15] == (12, 13, 14, 15)
    broken = [r for r in rows if r.name == "broken"]
    assert len(broken) == 16 and all(r.ranks is None and not r.trusted for r in broken)
    assert dumps.world.size == 16 and dumps.world.certain


def test_parquet_gets_plain_member_lists(tmp_path: Path) -> None:
    dumps = load_dumps(_mesh_set(tmp_path / "dumps"), jobs=1)
    export_parquet(dumps, tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "groups.parquet")
    assert table.schema.field("ranks").type == pa.list_(pa.int32())
    by_rank = {(r["rank"], r["group_desc"]): r["ranks"] for r in table.to_pylist() if r["ranks"]}
    assert by_rank[(3, "default_pg")] == list(range(16))
    assert by_rank[(9, "mesh_tp")] == [8, 9, 10, 11]
