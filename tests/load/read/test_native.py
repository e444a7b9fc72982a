"""The C pass (frtrace.load.read._scan) gives what the Python passes give.

It is a fast path only: every column it reads must equal the Python reading, and every value
it does not expect must make it give the column up (the Python pass then reads it). Checked on
every committed fixture file three ways (the pickle read into nodes, decoded entries, Python
alone), and value by value on what damaged dumps hold, over decoded entries and over the nodes
of the same entries pickled (``via``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from frtrace.errors import InputError
from frtrace.incident.discover import Candidate, discover
from frtrace.load.read import native
from frtrace.load.read.entries import _SPECS
from frtrace.load.read.parse import ParsedDump, try_parse
from frtrace.load.read.values import MAX_LEAVES
from tests.conftest import memory_kept

FIXTURES = Path(__file__).parents[2] / "fixtures"
SHAPE_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")


def test_the_c_pass_is_built() -> None:
    """CI installs with a C compiler: the tests must exercise the C pass, not only the
    fallback (without one, frtrace still works: the tests below then compare Python with
    itself)."""
    assert native.active(), (
        "frtrace.load.read._scan is not built: reinstall with a C compiler (pip install -e .)"
    )


def _fixture_files() -> list[Candidate]:
    """Every dump file among the fixtures (damaged ones included), as the loader sees it."""
    out = []
    for sub in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        if sub.name in ("golden", "pystack"):
            continue
        for directory in sorted({p.parent for p in sub.rglob("*") if p.is_file()}):
            with contextlib.suppress(InputError):  # (a folder of no dump: notes, a manifest)
                out.extend(discover(directory, only="*").candidates)
    return out


FIXTURE_FILES = _fixture_files()


def _read_all(monkeypatch: pytest.MonkeyPatch, how: str) -> list[Any]:
    """Every fixture file parsed: from the pickle's nodes ("nodes"), unpickled and then the C
    pass ("decoded"), or in Python alone ("pure")."""
    with monkeypatch.context() as m:
        if how == "pure":
            m.setenv("FRTRACE_PURE_PYTHON", "1")
        if how == "decoded":
            m.setattr(native, "read_pickle", lambda data: None)
        return [try_parse(c) for c in FIXTURE_FILES]


def test_most_fixture_pickles_are_read_as_nodes() -> None:
    """(Else the comparison below would compare the decoded path with itself.)"""
    read = unread = 0
    for cand in FIXTURE_FILES:
        data = cand.data if cand.data is not None else cand.path.read_bytes()
        if data[:1] != b"\x80":
            continue
        try:
            pickle.loads(data)
        except Exception:  # (damaged: the reader must leave it to the unpickler)
            assert native.read_pickle(data) is None, cand.path
            continue
        if native.read_pickle(data) is None:
            unread += 1
        else:
            read += 1
    assert read >= 200 and unread <= read // 20, (read, unread)


@pytest.mark.parametrize("how", ["decoded", "pure"])
def test_every_fixture_file_reads_the_same_from_nodes_as_decoded_and_in_python(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    assert len(FIXTURE_FILES) >= 100
    fast, slow = _read_all(monkeypatch, "nodes"), _read_all(monkeypatch, how)
    assert len(fast) == len(slow)
    compared = 0
    for a, b in zip(fast, slow, strict=True):
        assert type(a) is type(b)
        if not isinstance(a, ParsedDump):
            assert str(a) == str(b)
            continue
        assert isinstance(b, ParsedDump)
        assert a.meta == b.meta
        assert a.entries.equals(b.entries), a.meta.path
        for x, y in zip(a.entries.columns, b.entries.columns, strict=True):
            if hasattr(x, "dictionary"):
                assert x.dictionary.equals(y.dictionary), a.meta.path
        assert a.stacks == b.stacks
        assert repr((a.groups, a.pg_status)) == repr((b.groups, b.pg_status))  # (numpy inside)
        compared += 1
    assert compared >= 100


Via = Callable[[list[Any]], Sequence[Any]]


@pytest.fixture(params=["decoded", "nodes"])
def via(request: pytest.FixtureRequest) -> Via:
    """The entries as they are, or pickled and read back as the C reader's nodes."""
    if request.param == "decoded":
        return lambda entries: entries

    def nodes(entries: list[Any]) -> Sequence[Any]:
        view = native.read_pickle(pickle.dumps(entries, protocol=2))
        assert view is not None and not isinstance(view, list)
        return view  # type: ignore[no-any-return]

    return nodes


def _one(via: Via, kind: int, values: list[Any], required: bool = False) -> Any:
    entries = [{"k": v} for v in values]
    return native.columns(via(entries), [("k", kind, required)]).get("k")


def test_numbers_are_read_exactly_and_anything_else_gives_the_column_up(via: Via) -> None:
    got = _one(via, native.INT64, [1, None, -(2**63), 2**63 - 1])
    assert got is not None
    values, valid = got
    assert values.tolist()[2:] == [-(2**63), 2**63 - 1]
    assert valid.tolist() == [True, False, True, True]
    assert _one(via, native.INT64, [1, 2])[1] is None  # (no null: no validity)
    for odd in (2**63, -(2**63) - 1, True, 1.0, "1", [1]):
        assert _one(via, native.INT64, [1, odd]) is None, odd
    assert _one(via, native.FLOAT64, [0.5, float("nan"), None])[0][0] == 0.5
    for odd in (1, True, "0.5"):
        assert _one(via, native.FLOAT64, [0.5, odd]) is None, odd
    values, valid = _one(via, native.BOOL, [True, False, None])
    assert values.tolist()[:2] == [True, False] and valid.tolist() == [True, True, False]
    for odd in (1, 0, "True"):
        assert _one(via, native.BOOL, [True, odd]) is None, odd


def test_a_missing_key_is_null_unless_the_column_may_have_another_name(via: Via) -> None:
    entries = [{"k": 1}, {}]
    assert native.columns(via(entries), [("k", native.INT64, False)])["k"][1].tolist() == [
        True,
        False,
    ]
    assert "k" not in native.columns(via(entries), [("k", native.INT64, True)])


def test_text_pairs_and_frames_are_coded_first_seen_first(via: Via) -> None:
    codes, distinct = _one(via, native.TEXT, ["b", None, "a", "b", "\udcff"])
    assert codes.tolist() == [0, -1, 1, 0, 2] and distinct == ["b", "a", "\udcff"]
    assert _one(via, native.TEXT, ["a", 3]) is None
    codes, distinct = _one(
        via, native.PAIR, [("0", "default_pg"), ("1", "tp"), ("0", "default_pg")]
    )
    assert codes.tolist() == [0, 1, 0] and distinct == [("0", "default_pg"), ("1", "tp")]
    for odd in (None, ["0", "x"], ("0", 3), (("0",),)):
        assert _one(via, native.PAIR, [("0", "x"), odd]) is None, odd
    frame, other = {"name": "f"}, {"name": "f"}  # (equal, but not the same object)
    shared = [frame]
    codes, distinct = _one(via, native.FRAMES, [shared, [frame], [], None, [other], shared])
    assert codes.tolist() == [0, 0, -1, -1, 1, 0]
    assert distinct[0] == [frame] == distinct[1] and distinct[1][0] is not distinct[0][0]
    codes, _ = _one(via, native.FRAMES, [[frame, frame], [frame, other], [frame], [other, frame]])
    assert codes.tolist() == [0, 1, 2, 3]  # (every frame counts, in order)
    for odd in ((frame,), "f", 3):
        assert _one(via, native.FRAMES, [[frame], odd]) is None, odd


def test_frames_past_the_leaf_budget_are_left_to_the_careful_path(via: Via) -> None:
    many = [{"name": "f"}] * 1000
    entries = [{"frames": many} for _ in range(MAX_LEAVES // 1000 + 2)]
    assert native.columns(via(entries), [("frames", native.FRAMES, False)]) == {}


def test_an_empty_column_is_told_from_one_with_values(via: Via) -> None:
    assert _one(via, native.NONE, [None, None]) is True
    assert native.columns(via([{}, {}]), [("k", native.NONE, False)]) == {"k": True}
    assert _one(via, native.NONE, [None, [1, 2]]) is None


def _shape_entry(sizes: Any, dtypes: Any) -> dict[str, Any]:
    return dict(zip(SHAPE_KEYS, (sizes, sizes, dtypes, dtypes), strict=True))


def test_shapes_are_keyed_by_content(via: Via) -> None:
    a = _shape_entry([[2, 4]], ["Float"])
    b = _shape_entry([[2, 4]], ["Float"])
    c = _shape_entry([[2, 5]], ["Float"])
    d = _shape_entry(([2, 4],), ("Float",))  # (tuples: what the careful path accepts too)
    codes, firsts = native.shapes(via([a, b, c, a, d]), SHAPE_KEYS)
    assert codes[0] == codes[1] == codes[3] != codes[2]
    assert firsts[codes[2]] == 2
    assert list(firsts) == sorted(set(firsts))


@pytest.mark.parametrize(
    "odd",
    [
        _shape_entry([[True]], ["Float"]),
        _shape_entry([[2**63]], ["Float"]),
        _shape_entry([[2.0]], ["Float"]),
        _shape_entry([2], ["Float"]),
        _shape_entry(None, ["Float"]),
        _shape_entry([[2]], [3]),
        _shape_entry([[2]], "Float"),
        {"input_sizes": [[2]]},
    ],
)
def test_shapes_give_up_on_anything_not_plain(odd: dict[str, Any], via: Via) -> None:
    plain = _shape_entry([[2, 4]], ["Float"])
    with pytest.raises(LookupError):
        native.shapes(via([plain, odd]), SHAPE_KEYS)


def test_shapes_past_the_leaf_budget_are_left_to_the_careful_path(via: Via) -> None:
    huge = [list(range(64))] * 4096  # shared, as a pickle's memo shares one list
    entries = [_shape_entry(huge, ["Float"]) for _ in range(MAX_LEAVES // (64 * 4096 * 2) + 2)]
    with pytest.raises(LookupError):
        native.shapes(via(entries), SHAPE_KEYS)


def test_what_is_not_a_list_of_dicts_is_left_to_python(via: Via) -> None:
    assert native.columns(via([{"k": 1}, ("k", 1)]), [("k", native.INT64, False)]) is None
    with pytest.raises(LookupError):
        native.shapes(via([_shape_entry([[1]], ["Float"]), 3]), SHAPE_KEYS)


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRTRACE_PURE_PYTHON", "1")
    assert not native.active()
    assert native.columns([{"k": 1}], [("k", native.INT64, False)]) is None


def test_no_memory_is_kept_from_one_call_to_the_next(via: Via) -> None:
    """(A reference the C code forgot to drop would keep its object alive: a leak per file.)"""
    frames = [{"name": "f", "filename": "a.py", "line": i} for i in range(9)]
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "process_group": ("0", f"pg{i % 7}"),
            "collective_seq_id": i,
            "profiling_name": f"nccl:op{i % 5}",
            "is_p2p": False,
            "state": None if i % 3 else "completed",
            "duration_ms": 0.5,
            "frames": list(frames[: i % 9]),
            **_shape_entry([[i % 11, 4]], ["Float", f"T{i % 3}"]),
        }
        for i in range(500)
    ]

    def run() -> None:
        native.columns(via(entries), _SPECS)
        native.shapes(entries, SHAPE_KEYS)

    grown = memory_kept(run, 50)
    assert grown < 50_000, grown
    assert np.asarray(native.columns(via(entries), _SPECS)["record_id"][0]).sum() == sum(range(500))


@pytest.mark.parametrize(
    "fixture",
    ["gloo/mesh_stall", "gloo_json/mesh_stall", "nccl/host_stall/2.10-pickle"],
    ids=str,
)
def test_the_console_script_says_the_same_without_the_c_pass(fixture: str, tmp_path: Path) -> None:
    """`FRTRACE_PURE_PYTHON=1` (docs/performance.md) through the installed console script: the
    same JSON report, byte for byte, as with the C pass."""
    from tests.test_commands import frtrace_script

    directory = FIXTURES / fixture
    outputs = []
    for pure in ("", "1"):
        env = os.environ | {"FRTRACE_PURE_PYTHON": pure, "XDG_CACHE_HOME": str(tmp_path / pure)}
        proc = subprocess.run(
            [frtrace_script(), "analyze", "-d", str(directory), "-f", "json", "--no-cache"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert proc.returncode in (0, 1), proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and '"culprit_ranks"' in outputs[0]


def test_a_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build of another version of the C module (other kind numbers, or from before the
    reader) is passed over: every file is then unpickled and read in Python."""
    import types

    from frtrace.load.read import _scan

    old = types.ModuleType("frtrace.load.read._scan")
    for name in ("INT64", "FLOAT64", "BOOL", "TEXT", "PAIR", "FRAMES", "NONE", "SHAPES"):
        setattr(old, name, getattr(_scan, name))
    old.columns = _scan.columns  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "frtrace.load.read._scan", old)
    monkeypatch.delattr("frtrace.load.read._scan", raising=False)
    assert native._load() is None  # (no reader: before it)
    old.read, old.Entries = _scan.read, _scan.Entries  # type: ignore[attr-defined]
    assert native._load() is old
    old.SHAPES = 99  # type: ignore[attr-defined]
    assert native._load() is None


def test_the_reader_declines_what_is_not_bytes() -> None:
    data = pickle.dumps([{"k": 1}], protocol=2)
    assert native.read_pickle(data) is not None
    assert native.read_pickle(bytearray(data)) is None  # type: ignore[arg-type]
    assert native.read_pickle(memoryview(data)) is None  # type: ignore[arg-type]


@pytest.mark.skipif(not native.active(), reason="the C module is not used here")
def test_the_counting_sort_is_numpys_stable_sort() -> None:
    """``native.runs_order`` against numpy: the stable order of keys (with every rank's rows
    together, in rank order, as loaded), and the starts of the runs of equal key and rank;
    a key outside [0, span) is refused (the caller then sorts with numpy)."""
    rng = np.random.default_rng(45)
    for trial in range(200):
        n = int(rng.integers(0, 3000))
        span = int(rng.integers(1, 50 if trial % 2 else 5000))
        dtype = np.int64 if trial % 3 else np.int32
        key = rng.integers(0, span, n).astype(dtype)
        rank = np.sort(rng.integers(0, 9, n)).astype(np.int32)
        got = native.runs_order(key, rank, span)
        assert got is not None
        order, first = got
        expected = np.argsort(key, kind="stable")
        assert order.tolist() == expected.tolist()
        pairs = list(zip(key[order].tolist(), rank[order].tolist(), strict=True))
        assert first.tolist() == [i for i in range(n) if i == 0 or pairs[i] != pairs[i - 1]]
    rank = np.zeros(3, dtype=np.int32)
    for outside in ([0, 5, 1], [0, -1, 1]):
        assert native.runs_order(np.array(outside, dtype=np.int64), rank, 5) is None
    with pytest.raises(ValueError, match="an int32 or int64 key per rank"):
        native.runs_order(np.zeros(4, dtype=np.int32), np.zeros(3, dtype=np.int32), 5)
    room = np.empty(4, dtype=np.int64)
    assert native._SCAN is not None
    with pytest.raises(ValueError, match="a key and a rank per row"):  # (the C module's own)
        native._SCAN.runs_order(np.zeros(4, np.int32), False, rank, 5, room, room.copy())
