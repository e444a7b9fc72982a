"""Dumps from newer torch (FR format 2.11, torch 2.16's hook-based recorders; FORMAT.md §9)."""

from __future__ import annotations

from pathlib import Path

from frtrace.load.tables import load_dumps
from tests.conftest import fr211_set


def test_format_2_11_loads_without_a_newer_version_warning(tmp_path: Path) -> None:
    """2.11 is known: no 'newer than this frtrace knows' problem; its backends are kept."""
    dumps = load_dumps(fr211_set(tmp_path), jobs=1)
    assert dumps.loaded_ranks == (0, 1, 2, 3)
    assert not any("newer" in p.message for p in dumps.problems)
    assert set(dumps.entries.column("backend").to_pylist()) == {"nccl2", "c10d"}
    assert set(dumps.entries.column("op").to_pylist()) == {"all_reduce", "all_to_all_single"}


def test_split_sizes_are_columns_read_by_presence(tmp_path: Path) -> None:
    """input/output_split_sizes become list columns; null where an entry has none."""
    dumps = load_dumps(fr211_set(tmp_path), jobs=1)
    rows = dumps.entries.select(["rank", "op", "input_split_sizes", "output_split_sizes"])
    by_rank = {
        (r["rank"], r["op"]): (r["input_split_sizes"], r["output_split_sizes"])
        for r in rows.to_pylist()
    }
    assert by_rank[(1, "all_to_all_single")] == ([4, 4, 8, 4], [4, 4, 4, 4])
    assert by_rank[(0, "all_reduce")] == (None, None)


def test_bad_split_sizes_are_nulled_and_reported(tmp_path: Path) -> None:
    """A split list holding a string is null, with one problem line for the file."""
    from tests.conftest import make_dump, make_entry, write_pickle

    entry = make_entry(input_split_sizes=[1, "x"], output_split_sizes=[1, 1])
    write_pickle(tmp_path / "rank_0", make_dump([entry], world=1))
    dumps = load_dumps(tmp_path, jobs=1)
    assert dumps.entries.column("input_split_sizes").to_pylist() == [None]
    assert dumps.entries.column("output_split_sizes").to_pylist() == [[1, 1]]
    assert any("input_split_sizes" in p.message for p in dumps.problems)


def test_empty_pg_config_ranks_are_not_trusted(tmp_path: Path) -> None:
    """A group whose pg_config ranks are '[]' is marked untrusted with a note."""
    dumps = load_dumps(fr211_set(tmp_path), jobs=1)
    ep = [g for g in dumps.groups.to_pylist() if g["group_name"] == "1"]
    assert ep and all(not g["trusted"] and "no ranks" in g["note"] for g in ep)
