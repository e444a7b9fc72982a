"""`frtrace export` as a user reads it back: pandas and DuckDB, row counts, joins, column types."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from frtrace.load import export, schema
from frtrace.load.dumpset import DumpSet
from frtrace.load.export import TABLES, export_parquet, parquet_schema
from frtrace.load.tables import load_dumps
from tests.conftest import FIXTURES, GLOO, GLOO_JSON

SETS = {
    "gloo": GLOO / "mesh_stall",  # stacks, subgroups
    "gloo_json": GLOO_JSON / "never_joins",  # no stacks
    "nccl_2.2": FIXTURES / "nccl" / "host_stall" / "2.2-pickle",  # oldest layout
    "nccl_2.10": FIXTURES / "nccl" / "p2p_no_peer" / "2.10-pickle",  # p2p, timing
    "nccl_missing": FIXTURES / "nccl" / "missing_dump" / "2.4-json",  # a rank without a file
}
SCHEMAS = {
    "entries": schema.ENTRIES,
    "stacks": schema.STACKS,
    "groups": schema.GROUPS,
    "pg_status": schema.PG_STATUS,
    "files": schema.FILES,
}


@pytest.fixture(scope="module", params=sorted(SETS))
def exported(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DumpSet, Path]:
    dumps = load_dumps(SETS[request.param], jobs=1)
    out = tmp_path_factory.mktemp(request.param)
    written = export_parquet(dumps, out)
    assert [p.name for p, _ in written] == [f"{t}.parquet" for t in TABLES]
    return dumps, out


def test_every_table_keeps_its_documented_types(exported: tuple[DumpSet, Path]) -> None:
    """Each file's Arrow schema is the documented one (list dictionaries written as lists)."""
    _, out = exported
    for name in TABLES:
        read = pq.read_schema(out / f"{name}.parquet").remove_metadata()
        assert read == parquet_schema(SCHEMAS[name]), name


def test_pandas_reads_every_table_with_the_loaded_row_counts(
    exported: tuple[DumpSet, Path],
) -> None:
    """pandas reads each file; row counts are those of the loaded set (and of `summary`)."""
    pd = pytest.importorskip("pandas")
    dumps, out = exported
    for name in TABLES:
        frame = pd.read_parquet(out / f"{name}.parquet")
        assert len(frame) == getattr(dumps, name).num_rows, name
    files = pd.read_parquet(out / "files.parquet")
    entries = pd.read_parquet(out / "entries.parquet")
    per_rank = entries.groupby("rank").size().to_dict()
    for row in files[files["loaded"]].itertuples():
        assert per_rank.get(row.rank, 0) == row.entry_count
    sizes = entries["input_sizes"].dropna()
    assert all(isinstance(list(s), list) for s in sizes)


def test_duckdb_joins_entries_to_stacks_and_groups(exported: tuple[DumpSet, Path]) -> None:
    """DuckDB: every entry's stack_id resolves in stacks; every (rank, group) is in groups."""
    duckdb = pytest.importorskip("duckdb")
    dumps, out = exported
    con = duckdb.connect()
    for name in TABLES:
        con.execute(f"create view {name} as select * from '{out / name}.parquet'")
    (n,) = con.execute("select count(*) from entries").fetchone()
    assert n == dumps.entries.num_rows
    (orphans,) = con.execute(
        "select count(*) from entries e left join stacks s using (stack_id) "
        "where e.stack_id is not null and s.stack_id is null"
    ).fetchone()
    assert orphans == 0
    (with_frames,) = con.execute(
        "select count(*) from entries e join stacks s using (stack_id) where len(s.frames) > 0"
    ).fetchone()
    assert with_frames == len(dumps.entries.column("stack_id").drop_null())
    # groups: each rank's pg_config rows; entries name their group by name (Gloo records '')
    (joined,) = con.execute(
        "select count(*) from entries e join groups g on g.rank = e.rank "
        "and (g.group_name = e.group_name or g.group_name = '')"
    ).fetchone()
    assert joined > 0 or dumps.groups.num_rows == 0  # torch 2.2 dumps have no pg_config
    (loaded,) = con.execute("select count(*) from files where loaded").fetchone()
    assert loaded == len(dumps.loaded_ranks)
    described = {r[0]: r[1] for r in con.execute("describe entries").fetchall()}
    assert described["rank"] == "INTEGER" and described["record_id"] == "BIGINT"
    assert described["input_sizes"] == "BIGINT[][]"
    assert described["input_dtypes"] == "VARCHAR[]"
    assert described["op"] == "VARCHAR"


def test_unwritable_output_is_a_one_line_input_error(tmp_path: Path) -> None:
    """-o under a file: InputError naming the directory, nothing written."""
    from frtrace.errors import InputError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    dumps = load_dumps(GLOO / "never_joins", jobs=1)
    with pytest.raises(InputError, match="cannot create the output directory"):
        export_parquet(dumps, blocker / "out")


def test_row_groups_of_any_size_write_the_same_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables are written a row group at a time (a large set's sizes, decoded at once, would
    not fit in memory): groups of 7 rows read back as the whole tables do."""
    dumps = load_dumps(SETS["nccl_2.10"], jobs=1)
    export_parquet(dumps, tmp_path / "whole")
    monkeypatch.setattr(export, "ROWS_PER_GROUP", 7)
    export_parquet(dumps, tmp_path / "groups")
    for name in TABLES:
        whole = pq.read_table(tmp_path / "whole" / f"{name}.parquet")
        grouped = pq.ParquetFile(tmp_path / "groups" / f"{name}.parquet")
        if getattr(dumps, name).num_rows > 7:
            assert grouped.metadata.num_row_groups > 1, name
        assert grouped.read().equals(whole), name
