"""The loader reads every Flight Recorder format, safely, into the documented tables."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from frtrace.errors import NoReadableDumps
from frtrace.load import schema
from frtrace.load.read.formats import split_profiling_name
from frtrace.load.tables import load_dumps
from tests.conftest import GLOO, GLOO_JSON, make_dump, make_entry, write_json, write_pickle

FRAMES = [
    {"name": "all_reduce", "filename": "distributed_c10d.py", "line": 1},
    {"name": "<module>", "filename": "train.py", "line": 9},
]


def dump_of_version(version: str, rank: int = 0, world: int = 2) -> Any:
    """One completed all_reduce (seq 1) and one scheduled all_gather (seq 2) in ``version``."""
    ranks = list(range(world))
    if version == "2.2":  # torch 2.2: a bare list
        return [
            {
                "pg_id": 0,
                "seq_id": s,
                "profiling_name": f"nccl:{op}",
                "time_created_us": 5 + s,
                "input_sizes": [[4]],
                "output_sizes": [[4 * (world if op == "all_gather" else 1)]],
                "state": st,
                "retired": st == "completed",
                "frames": FRAMES,
            }
            for s, op, st in ((1, "all_reduce", "completed"), (2, "all_gather", "scheduled"))
        ]
    entries = []
    for s, op, st in ((1, "all_reduce", "completed"), (2, "all_gather", "scheduled")):
        e: dict[str, Any] = {
            "record_id": s - 1,
            "pg_id": 0,
            "op_id": s,
            "profiling_name": f"nccl:{op}",
            "time_created_ns": 5000 + s,
            "input_sizes": [[4]],
            "output_sizes": [[4 * (world if op == "all_gather" else 1)]],
            "state": st,
            "time_discovered_started_ns": None,
            "time_discovered_completed_ns": 9000 if st == "completed" else None,
            "retired": st == "completed",
            "frames": FRAMES,
        }
        if version == "1.4":
            e["seq_id"] = s
        else:
            e |= {
                "process_group": ("0", "default_pg"),
                "collective_seq_id": s,
                "p2p_seq_id": 0,
                "input_dtypes": ["Float"],
                "output_dtypes": ["Float"],
                "is_p2p": False,
            }
        if version in ("2.4", "2.9", "2.10", "3.0"):
            e["timeout_ms"] = 600000
        if version in ("2.9", "2.10", "3.0"):
            e |= {"thread_id": "7", "thread_name": "python"}
        entries.append(e)
    top: dict[str, Any] = {"version": version, "entries": entries}
    if version == "1.4":
        top["pg_config"] = {0: ranks}
    else:
        top["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(ranks)}}
    if version in ("2.4", "2.9", "2.10", "3.0"):
        top["pg_status"] = {
            "0": {
                "last_enqueued_collective": 2,
                "last_started_collective": -1,
                "last_completed_collective": 1,
            }
        }
    if version == "2.9":
        top["nccl_version"] = "2.21.5"
    if version in ("2.10", "3.0"):
        top["comm_lib_version"] = "2.21.5"
    return top


@pytest.mark.parametrize(
    ("version", "layout"),
    [
        ("2.2", "list"),
        ("1.4", "1.x"),
        ("2.1", "2.x"),
        ("2.4", "2.x"),
        ("2.9", "2.x"),
        ("2.10", "2.x"),
    ],
)
def test_every_torch_format_loads_into_the_same_model(
    tmp_path: Path, version: str, layout: str
) -> None:
    """torch 2.2 list, FR 1.4, 2.1, 2.4, 2.9, 2.10: same seqs, ops, states, times, stacks."""
    for rank in (0, 1):
        write_pickle(tmp_path / f"nccl_trace_rank_{rank}", dump_of_version(version, rank))
    dumps = load_dumps(tmp_path)
    assert not dumps.problems
    e = dumps.entries
    assert e.schema == schema.ENTRIES
    assert e.column("collective_seq").to_pylist() == [1, 2, 1, 2]
    assert e.column("op").to_pylist() == ["all_reduce", "all_gather"] * 2
    assert e.column("state").to_pylist() == ["completed", "scheduled"] * 2
    assert e.column("backend").to_pylist() == ["nccl"] * 4
    assert e.column("group_name").to_pylist() == ["0"] * 4
    created = e.column("time_created_ns").to_pylist()
    assert created[:2] == ([6000, 7000] if version == "2.2" else [5001, 5002])
    assert dumps.stacks.num_rows == 1  # the same stack on every entry of every rank, stored once
    files = dumps.files.to_pylist()
    assert [f["layout"] for f in files] == [layout, layout]
    assert files[0]["format_version"] == (None if version == "2.2" else version)
    if version != "2.2":
        assert dumps.world.size == 2 and dumps.world.certain == (version != "1.4")
    if version in ("2.9", "2.10"):
        assert files[0]["comm_lib_version"] == "2.21.5"
        assert e.column("thread_name").to_pylist()[0] == "python"
    if version in ("2.4", "2.9", "2.10"):
        assert dumps.pg_status.column("last_completed").to_pylist() == [1, 1]


def test_a_newer_version_loads_best_effort_with_a_warning(tmp_path: Path) -> None:
    """Version 3.0 (unknown) loads by its fields and says so."""
    payload = dump_of_version("3.0")
    payload["entries"][0]["brand_new_field"] = {"x": 1}
    write_pickle(tmp_path / "rank_0", payload)
    dumps = load_dumps(tmp_path)
    assert dumps.entries.num_rows == 2
    (problem,) = dumps.problems
    assert not problem.fatal and "newer than this frtrace knows" in problem.message


def test_pickle_and_json_of_the_same_real_dump_give_the_same_tables() -> None:
    """A real Gloo job dumped both ways: identical but for stacks (JSON has none)."""
    for scenario in ("never_joins", "mesh_stall", "healthy"):
        a = load_dumps(GLOO / scenario)
        b = load_dumps(GLOO_JSON / scenario)
        assert a.entries.drop_columns(["stack_id"]).equals(b.entries.drop_columns(["stack_id"]))
        assert a.groups.equals(b.groups) and a.pg_status.equals(b.pg_status)
        assert a.entries.column("stack_id").null_count == 0
        assert b.entries.column("stack_id").null_count == b.entries.num_rows
        assert set(b.files.column("encoding").to_pylist()) == {"json"}


def test_json_quirks_are_normalised(tmp_path: Path) -> None:
    """JSON: 0 for unobserved times -> null, strings in pg_status -> ints, no entries key."""
    entry = make_entry(
        time_discovered_started_ns=0,
        time_discovered_completed_ns=0,
        process_group=["0", "default_pg"],
    )
    entry.pop("frames")
    payload = make_dump([entry])
    payload["pg_status"] = {
        "0": {
            "last_enqueued_collective": "1",
            "last_started_collective": "-1",
            "last_completed_collective": "1",
        }
    }
    write_json(tmp_path / "rank_0.json", payload)
    empty = make_dump([])
    del empty["entries"]
    write_json(tmp_path / "rank_1.json", empty)
    dumps = load_dumps(tmp_path)
    assert dumps.entries.column("time_discovered_completed_ns").to_pylist() == [None]
    status = dumps.pg_status.to_pylist()[0]
    assert (status["rank"], status["last_enqueued"], status["last_started"]) == (0, 1, -1)
    assert dumps.files.column("entry_count").to_pylist() == [1, 0]
    assert not [p for p in dumps.problems if p.fatal]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nccl:all_reduce", ("nccl", "all_reduce", None, None)),
        ("gloo:all_gather", ("gloo", "all_gather", None, None)),
        ("nccl:send 1->0", ("nccl", "send", 1, 0)),
        ("nccl:recv 0<-1", ("nccl", "recv", 1, 0)),
        ("nccl:recv 3<-?", ("nccl", "recv", None, 3)),
        ("nccl:coalesced", ("nccl", "coalesced", None, None)),
        ("nccl:ALLGATHER_coalesced", ("nccl", "ALLGATHER_coalesced", None, None)),
        (
            "xccl:reduce_scatter_tensor_coalesced",
            ("xccl", "reduce_scatter_tensor_coalesced", None, None),
        ),
        ("nccl2:brand_new_op extra words", ("nccl2", "brand_new_op", None, None)),
        ("no_backend_at_all", (None, "no_backend_at_all", None, None)),
    ],
)
def test_profiling_names_split_into_backend_op_and_local_peers(
    name: str, expected: tuple[object, ...]
) -> None:
    """Unknown ops are kept as-is; p2p names give group-local src and dst."""
    assert split_profiling_name(name) == expected


def test_unknown_op_names_load(tmp_path: Path) -> None:
    """An op no torch version knows is kept, never a crash."""
    write_pickle(
        tmp_path / "rank_0", make_dump([make_entry(profiling_name="hccl:fancy_new_collective")])
    )
    assert load_dumps(tmp_path).entries.column("op").to_pylist() == ["fancy_new_collective"]


def test_malicious_pickle_is_refused_without_side_effects(tmp_path: Path) -> None:
    """A __reduce__ payload is refused by name; the command never runs; others still load."""
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            import os

            return (os.system, (f"touch {marker}",))

    (tmp_path / "rank_3").write_bytes(pickle.dumps({"entries": [Exploit()]}, protocol=2))
    write_pickle(tmp_path / "rank_0", make_dump([make_entry()]))
    dumps = load_dumps(tmp_path)
    assert not marker.exists()
    (problem,) = dumps.problems
    assert problem.fatal and problem.rank == 3
    assert "refused to load: the pickle asks for posix.system" in problem.message
    assert "contain only plain data" in problem.message
    assert dumps.loaded_ranks == (0,)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty file"),
        (pickle.dumps(make_dump([make_entry()]), protocol=2)[:-40], "truncated pickle"),
        (b"\x80\x02\xff\xfe garbage", "corrupt pickle"),
        (b'{"version": "2.10", "entries": [', "not valid JSON"),
        (pickle.dumps(42, protocol=2), "decoded to a int"),
        (pickle.dumps({"hello": "world"}, protocol=2), "without any Flight Recorder keys"),
        (pickle.dumps({"entries": "nope"}, protocol=2), "'entries' is a str"),
        (b"\x7fELF\x02\x01\x01 binary", "corrupt pickle"),
    ],
)
def test_damaged_files_give_one_line_and_the_rest_still_load(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    """Each kind of damage: one line naming the file; rank 0 is still analysed."""
    (tmp_path / "rank_1").write_bytes(content)
    write_pickle(tmp_path / "rank_0", make_dump([make_entry()]))
    dumps = load_dumps(tmp_path)
    (problem,) = dumps.problems
    assert problem.fatal and str(tmp_path / "rank_1") in problem.message
    assert expected in problem.message
    assert "\n" not in problem.message
    assert dumps.loaded_ranks == (0,) and dumps.unreadable_ranks == (1,)
    files = {f["rank"]: f for f in dumps.files.to_pylist()}
    assert files[1]["loaded"] is False and files[1]["error"] == problem.message


def test_wrong_field_types_become_null_with_a_warning(tmp_path: Path) -> None:
    """A string where an int belongs is nulled and reported; the entry is kept."""
    entries = [make_entry(), make_entry(record_id=1, collective_seq_id="two", retired="yes")]
    write_pickle(tmp_path / "rank_0", make_dump(entries))
    dumps = load_dumps(tmp_path)
    assert dumps.entries.column("collective_seq").to_pylist() == [1, None]
    assert dumps.entries.column("retired").to_pylist() == [True, None]
    messages = " ".join(p.message for p in dumps.problems)
    assert "'collective_seq_id' has values of the wrong type in entries #1 (str)" in messages
    assert all(not p.fatal for p in dumps.problems)


def test_no_readable_file_at_all_is_an_input_error(tmp_path: Path) -> None:
    """If every candidate fails, the set cannot be analysed."""
    (tmp_path / "rank_0").write_bytes(b"")
    with pytest.raises(NoReadableDumps, match="none of the 1 dump files could be read"):
        load_dumps(tmp_path)


def test_missing_ranks_are_recorded(tmp_path: Path) -> None:
    """pg_config says 4 ranks, files exist for 0 and 2."""
    for rank in (0, 2):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=4))
    dumps = load_dumps(tmp_path)
    assert dumps.missing_ranks == (1, 3) and dumps.world.size == 4 and dumps.world.certain


def test_gloo_pg_config_is_kept_but_marked_untrusted() -> None:
    """Gloo writes pg_config {'': {...}}: kept as recorded, trusted=False, with a reason."""
    dumps = load_dumps(GLOO / "healthy")
    rows = dumps.groups.to_pylist()
    assert {r["group_name"] for r in rows} == {""}
    assert not any(r["trusted"] for r in rows)
    assert "Gloo" in rows[0]["note"]
    assert set(dumps.files.column("backend").to_pylist()) == {"gloo"}
    # Gloo entries stay "scheduled"; completion shows only as retired
    assert set(dumps.entries.column("state").to_pylist()) == {"scheduled"}


def test_stacks_are_interned_so_memory_does_not_grow_with_frames(tmp_path: Path) -> None:
    """1,000 entries sharing 2 distinct 30-frame stacks store 2 stacks, 60 frames."""
    deep = [{"name": f"f{i}", "filename": "m.py", "line": i} for i in range(30)]
    other = [*deep[1:], {"name": "g", "filename": "m.py", "line": 99}]
    entries = [
        make_entry(
            record_id=i,
            collective_seq_id=i + 1,
            frames=[dict(f) for f in (deep if i % 2 else other)],
        )
        for i in range(1000)
    ]
    write_pickle(tmp_path / "rank_0", make_dump(entries))
    dumps = load_dumps(tmp_path)
    assert dumps.stacks.num_rows == 2
    assert pa.compute.list_value_length(dumps.stacks.column("frames")).to_pylist() == [30, 30]
    assert dumps.entries.column("stack_id").to_pylist()[:4] == [0, 1, 0, 1]
    assert dumps.stack(1)[0] == ("f0", "m.py", 0)


def test_parallel_loading_gives_the_same_tables(tmp_path: Path) -> None:
    """Worker processes and the single-process path agree, in rank order."""
    import frtrace.load.workers.parallel as parallel

    for rank in range(6):
        entries = [make_entry(record_id=i, collective_seq_id=i + 1) for i in range(50)]
        write_pickle(tmp_path / f"rank_{rank}", make_dump(entries, world=6))
    one = load_dumps(tmp_path, jobs=1)
    old = parallel.PARALLEL_MIN_BYTES
    parallel.PARALLEL_MIN_BYTES = 0
    try:
        two = load_dumps(tmp_path, jobs=2)
    finally:
        parallel.PARALLEL_MIN_BYTES = old
    assert one.entries.equals(two.entries) and one.stacks.equals(two.stacks)


def test_json_with_pickle_extension_is_sniffed(tmp_path: Path) -> None:
    """Content decides the encoding, not the extension."""
    (tmp_path / "rank_0.pkl").write_text(json.dumps(make_dump([make_entry()])))
    dumps = load_dumps(tmp_path)
    assert dumps.files.column("encoding").to_pylist() == ["json"]


def test_a_files_backend_is_the_most_named_the_first_of_equals() -> None:
    """The backend of a file, counted on the dictionary's codes, is what counting the
    decoded names says (Arrow's value_counts: the first to appear of equals, empty names
    and nulls left out), whatever the dictionary (repeated or empty values, an offset)."""
    from collections import Counter

    import numpy as np
    import pyarrow.compute as pc

    from frtrace.load.read.parse import _most_common
    from frtrace.load.read.plain import Column

    def counted(column: pa.Array) -> Any:
        counts = pc.value_counts(column.dictionary_decode().drop_null())
        values, tally = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
        named = zip(values, tally, strict=True)
        most = Counter({value: n for value, n in named if value})
        return most.most_common(1)[0][0] if most else None

    rng = np.random.default_rng(32)
    for _ in range(3000):
        k, n = int(rng.integers(1, 5)), int(rng.integers(0, 12))
        dictionary = pa.array([str(x) if x else "" for x in rng.integers(0, 3, k)])
        codes = pa.array(rng.integers(0, k, n).astype(np.int32), mask=rng.random(n) < 0.2)
        column = pa.DictionaryArray.from_arrays(codes, dictionary)
        for case in (column, column.slice(min(1, n))):
            assert _most_common(case) == counted(case)
        # a fast path's column (no Arrow array made): its codes, -1 where null
        fast = codes.fill_null(-1).to_numpy()
        listed = dictionary.to_pylist()
        for valid in (fast >= 0, None):
            assert _most_common(Column(fast, valid, listed)) == counted(column)


def test_a_files_record_id_span_from_a_fast_paths_column() -> None:
    """A file's lowest and highest record id read from a fast path's column are what Arrow
    says of the same column, nulls aside."""
    import numpy as np
    import pyarrow.compute as pc

    from frtrace.load.read.parse import _span
    from frtrace.load.read.plain import Column, to_arrow

    rng = np.random.default_rng(45)
    for _ in range(300):
        n = int(rng.integers(0, 6))
        values = rng.integers(-5, 5, n).astype(np.int64)
        for valid in (None, rng.random(n) < 0.6, np.zeros(n, dtype=bool)):
            column = Column(values, valid)
            arrow = to_arrow(column, pa.int64())
            span = pc.min_max(arrow)
            assert _span(column) == _span(arrow) == (span["min"].as_py(), span["max"].as_py())
