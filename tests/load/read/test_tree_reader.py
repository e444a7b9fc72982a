"""The C reader of pickles (``_scan.read``, _tree.c) against ``pickle`` itself.

``_scan.read`` either declines a stream (None: the caller unpickles it) or gives what
``pickle`` gives: the same values, the same sharing (one object per pickled object, memo
references the same object), its list of entries an ``Entries`` view whose items, columns and
``all_dicts`` are those of the decoded list. Here: random plain data pickled every way Python
pickles it, random dump-shaped payloads (columns read from the nodes against the pass over
decoded entries), damaged and hand-made opcode streams (never a result where pickle fails),
deep nesting, memo fan-out, and memory.
"""

from __future__ import annotations

import gc
import io
import math
import pickle
import random
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frtrace.errors import DumpFormatError, UnsafePickleError
from frtrace.load.read import native, unpickle
from frtrace.load.read.columns import SHAPE_KEYS
from frtrace.load.read.entries import _SPECS, entries_batch
from frtrace.load.read.values import MAX_LEAVES
from tests.conftest import LOADER_SETTINGS, memory_kept
from tests.load.read.differential import mismatch

try:
    from frtrace.load.read import _scan
except ImportError:  # built without a C compiler: nothing to test here
    pytest.skip("frtrace.load.read._scan is not built", allow_module_level=True)

SETTINGS = LOADER_SETTINGS

PROTOCOLS = (2, 3, 4, 5)


# ---- the oracle ------------------------------------------------------------------------------


def _dumps(value: Any, protocol: int, fast: bool = False) -> bytes:
    """``value`` pickled by the C pickler; ``fast``: without its memo (nothing shared)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=protocol)
    pickler.fast = fast
    pickler.dump(value)
    return out.getvalue()


def check_stream(data: bytes, loads: Callable[[bytes], Any] = unpickle.safe_loads) -> Any:
    """The reader declines ``data`` (None) or gives what ``loads`` gives; where ``loads``
    fails it must decline. (``loads`` is called only where the reader gives a result: that
    it declines every stream pickle fails on is the same rule turned round, and a damaged
    memo index cannot make pickle allocate gigabytes here.) The reader's result, or None."""
    got = _scan.read(data)
    if got is None:
        return None
    try:
        want = loads(data)
    except Exception as exc:
        raise AssertionError(f"read {data!r} where pickle raises {exc!r}") from None
    problem = mismatch(got, want)
    assert problem is None, f"{data!r}: {problem}"
    return got


def check_view(view: Any) -> None:
    """What a view offers agrees with itself: len, items made once, iteration, all_dicts."""
    assert isinstance(view, _scan.Entries)
    items = [view[i] for i in range(len(view))]
    assert all(view[i] is item for i, item in enumerate(items))  # (cached)
    assert all(x is y for x, y in zip(iter(view), items, strict=True))
    assert view.all_dicts() == all(type(x) is dict for x in items)
    if items:
        assert view[-1] is items[-1]
    with pytest.raises(IndexError):
        view[len(items)]


# ---- 1. random plain data --------------------------------------------------------------------

_LONE = st.sampled_from(["\ud800", "\udcff", "\udfff", "\ud83d"])
TEXT = st.lists(st.one_of(st.characters(), _LONE), max_size=8).map("".join)
INTS = st.one_of(
    st.integers(),
    st.sampled_from(
        [
            *(0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -(2**31), 2**31, 2**63 - 1),
            *(-(2**63), 2**63, -(2**63) - 1, 2**64, -(2**64), 2**100, -(2**100), 2**2050),
        ]
    ),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 5e-324]),
)
KEYS = st.one_of(TEXT, INTS, FLOATS, st.booleans(), st.none(), st.binary(max_size=8))
LEAVES = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT, st.binary(max_size=300))


def _shared(value: Any) -> list[Any]:
    """The same object in three places."""
    return [value, {"again": value}, (value, value)]


PLAIN = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(KEYS, inner, max_size=5),
        inner.map(_shared),
    ),
    max_leaves=30,
)


def _holds_bytes(value: Any) -> bool:
    todo, seen = [value], set()
    while todo:
        x = todo.pop()
        if isinstance(x, bytes):
            return True
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, dict):
            todo.extend(x)
            todo.extend(x.values())
        elif isinstance(x, list | tuple):
            todo.extend(x)
    return False


@SETTINGS
@given(value=PLAIN, protocol=st.sampled_from(PROTOCOLS), fast=st.booleans())
def test_plain_data_reads_as_pickle_reads_it(value: Any, protocol: int, fast: bool) -> None:
    data = _dumps(value, protocol, fast)
    got = check_stream(data, pickle.loads)
    # (protocol 2 pickles bytes by calling codecs.encode: the one thing declined here)
    assert got is not None or (protocol == 2 and _holds_bytes(value)) or value is None
    if isinstance(got, _scan.Entries):
        check_view(got)


@SETTINGS
@given(value=PLAIN, protocol=st.sampled_from(PROTOCOLS))
def test_plain_data_under_entries_reads_as_pickle_reads_it(value: Any, protocol: int) -> None:
    """The same data as a dump's entries: the view, and the top-level dict around it."""
    payload = {"version": "2.10", "entries": [value, value, [value]], "x": value}
    got = check_stream(_dumps(payload, protocol), pickle.loads)
    if got is not None:
        check_view(got["entries"])


def test_leaves_of_every_sign_and_width_are_read_as_pickle_reads_them() -> None:
    """(An int or float leaf's node holds its value where a str's holds an offset: making one
    formed data + value, pointer arithmetic far outside the data, UB for a negative float or
    a large negative int; test_sanitizers.py runs this under UBSan.)"""
    numbers = [0, 1, -1, -5, 255, -(2**31), 2**31 - 1, -(2**62), -(2**63), 2**63 - 1, 2**64]
    floats = [-1.5, -0.0, 0.5, -math.inf, math.inf, -math.nan, math.nan, -1e308, -5e-324]
    entries = [{"i": n, "f": x, "s": str(n)} for n, x in zip(numbers, floats * 2, strict=False)]
    for protocol in PROTOCOLS:
        data = _dumps({"version": "2.10", "entries": entries, "top": [*numbers, *floats]}, protocol)
        got = check_stream(data)
        assert got is not None
        check_view(got["entries"])
        want = _scan.columns(pickle.loads(data)["entries"], _SPECS, MAX_LEAVES)
        _same_columns(got["entries"].columns(_SPECS, MAX_LEAVES), want)


def test_sharing_is_pickles() -> None:
    inner = [1, 2]
    frame = {"name": "f", "filename": "a.py", "line": 3}
    value = {"a": inner, "b": inner, "c": (inner, frame), "d": [frame, frame]}
    for protocol in PROTOCOLS:
        for fast in (False, True):
            data = _dumps(value, protocol, fast)
            got = check_stream(data, pickle.loads)
            want = pickle.loads(data)
            assert (got["a"] is got["b"]) == (want["a"] is want["b"]) == (not fast)
            assert (got["d"][0] is got["d"][1]) == (not fast)


def test_self_reference_below_the_top_is_pickles() -> None:
    """A list holding itself, and a tuple in a cycle through a list, under a top-level tuple
    (not read as a view): the same cycles as pickle's."""
    loop: list[Any] = []
    loop.append(loop)
    pair: list[Any] = []
    pair.append((pair, 1))
    for protocol in PROTOCOLS:
        got = check_stream(_dumps((loop, {"p": pair}), protocol), pickle.loads)
        assert got is not None
        assert got[0][0] is got[0]
        assert got[1]["p"][0][0] is got[1]["p"]
    # by hand: EMPTY_LIST BINPUT 0 BINGET 0 APPEND, in a tuple; a tuple in the cycle
    got = check_stream(b"]q\x00h\x00a\x85.", pickle.loads)
    assert got is not None and got[0][0] is got[0]
    got = check_stream(b"}q\x00\x8c\x01x]q\x01h\x01\x85q\x02as.", pickle.loads)
    assert got is not None and got["x"][0][0] is got["x"]


SHARED_TOPS = {
    "top list in itself": b"\x80\x04]q\x00h\x00a.",  # L = []; L.append(L)
    "top dict in itself": b"\x80\x04}q\x00\x8c\x02meq\x01h\x00s.",  # d = {}; d["me"] = d
    "entries twice": _dumps({"entries": (shared := [{"record_id": 1}]), "other": shared}, 4),
}


@pytest.mark.parametrize("name", sorted(SHARED_TOPS))
def test_a_top_level_held_inside_itself_is_left_to_the_unpickler(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader makes the top-level dict anew and the entries a view: where either is also
    held inside (only damage or a crafted file does this), it declines, and read_payload's
    unpickler gives pickle's result, sharing and all."""
    data = SHARED_TOPS[name]
    assert _scan.read(data) is None
    got, _ = unpickle.read_payload(Path("x"), len(data), data)
    assert mismatch(got, pickle.loads(data)) is None


# ---- 2. dump-shaped payloads: columns from the nodes -------------------------------------------

_KEYS = [k for key, _, _ in _SPECS for k in ((key,) if isinstance(key, str) else key)]
_FRAMES = [
    {"name": "all_reduce", "filename": "c10d.py", "line": 7},
    {"name": "step", "filename": "train.py", "line": 120},
    {"name": "main", "filename": "train.py", "line": 3},
]
_SIZES = [[2, 4096]]
# (values of every kind; inside containers no object CPython keeps one of (None, True, small
# ints, (), "", 1-char text), which pickle makes once and the reader once per node: as frames
# or dtypes they code differently, see the xfail tests below)
ODD = st.sampled_from(
    [
        *(None, 0, -1, 7, 2**63 - 1, -(2**63), 2**63, 2**70, math.nan, 1.5, -0.0, True, False),
        *("", "x", "Float", "nccl:all_reduce", "\udcff", "é", "completed", ()),
        *(("74", "mesh_tp"), ("74",), ("74", 3000), (("74",), "xx"), ["74", "mesh_tp"], []),
        *([4096, 8192], [[4096, 8192]], [[4.0]], [[True]], [[None]], [[2**63]], [["Float"]]),
        *(["Float"], ["Float", 3000], _SIZES, [_SIZES], {"a": 1}, b"\x04", (("Float",),)),
    ]
)


@st.composite
def frames_values(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 4))
    if kind == 0:  # the frames of a pool, shared with other entries through the memo
        return draw(st.lists(st.sampled_from(_FRAMES), max_size=4))
    if kind == 1:  # equal frames, not the same objects
        return [dict(f) for f in draw(st.lists(st.sampled_from(_FRAMES), max_size=3))]
    if kind == 2:  # not frames
        return draw(st.lists(st.sampled_from(["not a frame", 2.5, 2**70, [1, 2]]), max_size=3))
    return draw(ODD)


@st.composite
def shape_values(draw: st.DrawFn, dtypes: bool) -> Any:
    if draw(st.integers(0, 3)) == 0:
        return draw(ODD)
    if dtypes:
        return draw(st.lists(st.sampled_from(["Float", "BFloat16", "Int", "Long"]), max_size=3))
    dims = st.lists(st.one_of(st.integers(0, 9000), st.sampled_from([2**63 - 1, -1])), max_size=3)
    sizes = draw(st.lists(st.one_of(dims, dims.map(tuple)), max_size=3))
    return tuple(sizes) if draw(st.booleans()) else sizes


@st.composite
def entry(draw: st.DrawFn, i: int) -> dict[str, Any]:
    good: dict[str, Any] = {
        "record_id": i,
        "pg_id": draw(st.sampled_from([0, 1, 2**40])),
        "process_group": draw(st.sampled_from([("0", "default_pg"), ("1", "mesh_tp")])),
        "collective_seq_id": i + 1,
        "p2p_seq_id": 0,
        "op_id": i + 1,
        "profiling_name": draw(st.sampled_from(["nccl:all_reduce", "nccl:send 0->1"])),
        "is_p2p": draw(st.booleans()),
        "time_created_ns": 1_780_000_000_000_000_000 + i,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": 1_780_000_000_000_000_100 + i,
        "state": draw(st.sampled_from(["completed", "scheduled"])),
        "retired": True,
        "timeout_ms": 600_000,
        "thread_id": "140432108021568",
        "thread_name": draw(st.sampled_from(["python3", "\udcff", "pt_autograd_0"])),
        "frames": draw(frames_values()),
        "duration_ms": draw(st.sampled_from([0.5, math.nan, math.inf])),
        "input_sizes": draw(shape_values(False)),
        "output_sizes": draw(shape_values(False)),
        "input_dtypes": draw(shape_values(True)),
        "output_dtypes": draw(shape_values(True)),
    }
    for key in draw(st.lists(st.sampled_from([*_KEYS, "seq_id"]), max_size=5, unique=True)):
        action = draw(st.integers(0, 2))
        if action == 0:
            good.pop(key, None)
        elif action == 1:
            good[key] = draw(ODD)
        else:
            good[key] = draw(st.sampled_from([None, good.get("frames"), _SIZES]))
    if draw(st.booleans()):  # keys in another order
        good = dict(sorted(good.items(), reverse=draw(st.booleans())))
    return good


@st.composite
def dumps(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 8))
    entries: list[Any] = [draw(entry(i)) for i in range(n)]
    if draw(st.booleans()) and entries:  # one entry twice (the same dict)
        entries.append(entries[draw(st.integers(0, n - 1))])
    if draw(st.integers(0, 9)) == 0:  # not a dict
        entries.insert(draw(st.integers(0, len(entries))), draw(ODD))
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": -1}},
        "entries": entries,
    }


def _same_columns(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want) == len(_SPECS)
    for (key, kind, _), a, b in zip(_SPECS, got, want, strict=True):
        if b is None or b is True:
            assert a is b, key
            continue
        assert a is not None, key
        assert type(a[0]) is bytes and a[0] == b[0], key  # values or codes, byte for byte
        if kind in (native.INT64, native.FLOAT64, native.BOOL):
            assert a[1] == b[1], key  # (valid flags, or None)
        elif kind == native.SHAPES:
            assert a[1] == b[1], key  # (first entries)
        else:
            assert len(a[1]) == len(b[1]), key
            for x, y in zip(a[1], b[1], strict=True):
                assert mismatch(x, y) is None, key


@SETTINGS
@given(dump=dumps(), protocol=st.sampled_from(PROTOCOLS), fast=st.booleans())
def test_columns_from_nodes_are_the_columns_of_decoded_entries(
    dump: dict[str, Any], protocol: int, fast: bool
) -> None:
    data = _dumps(dump, protocol, fast)
    got = check_stream(data, pickle.loads)
    if got is None:  # (protocol 2 pickles bytes by calling codecs.encode)
        assert protocol == 2
        return
    view = got["entries"]
    check_view(view)
    want = pickle.loads(data)["entries"]
    if not all(type(e) is dict for e in want):
        with pytest.raises(TypeError):
            view.columns(_SPECS, MAX_LEAVES)
        with pytest.raises(TypeError):
            _scan.columns(want, _SPECS, MAX_LEAVES)
        return
    _same_columns(view.columns(_SPECS, MAX_LEAVES), _scan.columns(want, _SPECS, MAX_LEAVES))
    # (and with few leaves allowed: frames and shapes given up at the same point)
    for leaves in (0, 3):
        _same_columns(view.columns(_SPECS, leaves), _scan.columns(want, _SPECS, leaves))
    # the entries the columns were read from are still the ones the view gives
    assert mismatch(view, want) is None


def test_columns_read_every_column_of_well_formed_entries() -> None:
    """(The property above compares nothing if the node pass always gave up.)"""
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "process_group": ("0", "default_pg"),
            "collective_seq_id": i,
            "p2p_seq_id": 0,
            "op_id": i,
            "profiling_name": "nccl:all_reduce",
            "is_p2p": False,
            "time_created_ns": i,
            "time_discovered_started_ns": None,
            "time_discovered_completed_ns": i,
            "state": "completed",
            "retired": True,
            "timeout_ms": 1,
            "thread_id": "1",
            "thread_name": "python",
            "frames": [_FRAMES[i % 2], _FRAMES[2]],
            "duration_ms": 0.5,
            "input_sizes": [[4]],
            "output_sizes": [[4]],
            "input_dtypes": ["Float"],
            "output_dtypes": ["Float"],
        }
        for i in range(5)
    ]
    data = _dumps({"entries": entries}, 2)
    view = _scan.read(data)["entries"]
    got = view.columns(_SPECS, MAX_LEAVES)
    assert all(x is not None for x in got)
    _same_columns(got, _scan.columns(pickle.loads(data)["entries"], _SPECS, MAX_LEAVES))
    frames = got[[key for key, _, _ in _SPECS].index("frames")]
    assert frames[0] == struct.pack("<5i", 0, 1, 0, 1, 0) and len(frames[1]) == 2
    assert frames[1][0] is view[0]["frames"]  # (the distinct stacks: the entries' own lists)


def test_a_key_set_twice_in_an_entry_reads_its_last_value() -> None:
    # {"pg_id": 1, "state": "a", "pg_id": 2, "state": 5} by SETITEMS (a dict keeps the last)
    data = (
        b"\x80\x04]}(\x8c\x05pg_idK\x01\x8c\x05state\x8c\x01a\x8c\x05pg_idK\x02"
        b"\x8c\x05stateK\x05ua."
    )
    view = check_stream(data)
    assert view is not None and view[0] == {"pg_id": 2, "state": 5}
    _same_columns(view.columns(_SPECS, MAX_LEAVES), _scan.columns([view[0]], _SPECS, MAX_LEAVES))


def _batch_both_ways(data: bytes) -> None:
    """entries_batch from the nodes and from pickle's objects: the same batch and stacks."""
    view = _scan.read(data)["entries"]
    nodes = entries_batch(Path("x"), 0, view, False)
    objects = entries_batch(Path("x"), 0, pickle.loads(data)["entries"], False)
    assert repr(nodes[0].to_pylist()) == repr(objects[0].to_pylist())
    assert nodes[1:] == objects[1:]


def test_frames_of_values_cpython_shares_code_apart_but_read_the_same() -> None:
    """Frames are coded by node, pickle's objects by identity: two unmemoized None (or small
    ints, True, (), "", 1-char text) are one object in pickle and two nodes here, so the codes
    differ from _scan.columns' while standing for equal frames: the batch is the same."""
    entries = [{"frames": [None]}, {"frames": [None]}]  # (None is never memoized)
    data = _dumps({"entries": entries}, 4)
    specs = (("frames", native.FRAMES, False),)
    codes, distinct = _scan.read(data)["entries"].columns(specs, MAX_LEAVES)[0]
    assert codes == struct.pack("<2i", 0, 1) and distinct == [[None], [None]]  # (objects: [0, 0])
    _batch_both_ways(data)


def test_shapes_of_short_dtypes_code_apart_but_read_the_same() -> None:
    one = {"input_sizes": [], "output_sizes": [], "input_dtypes": ["F"], "output_dtypes": []}
    data = _dumps({"entries": [one, dict(one)]}, 4, fast=True)
    _batch_both_ways(data)


@pytest.mark.parametrize(
    "specs",
    [
        (("pg_id", native.INT64, False), ("pg_id", native.INT64, False)),
        (("input_sizes", native.INT64, False), (SHAPE_KEYS, native.SHAPES, True)),
        (("\udcff", native.INT64, False),),
    ],
    ids=["a key twice", "a key twice, one in shapes", "not UTF-8"],
)
def test_specs_the_passes_cannot_both_read_are_refused_by_both(specs: Any) -> None:
    data = _dumps({"entries": [{"pg_id": 3, "\udcff": 3}]}, 4)
    with pytest.raises(ValueError):
        _scan.read(data)["entries"].columns(specs, MAX_LEAVES)
    with pytest.raises(ValueError):
        _scan.columns(pickle.loads(data)["entries"], specs, MAX_LEAVES)


# ---- 3. damage ---------------------------------------------------------------------------------

_SMALL = {
    "version": "2.10",
    "pg_config": {"0": {"name": "0", "ranks": "[0, 1]"}},
    "entries": [
        {"record_id": 2**40, "frames": [_FRAMES[0], _FRAMES[0]], "d": 1.5, "s": ("0", "é")},
        {"record_id": -5, "frames": [_FRAMES[0]], "t": True, "n": None, "b": 2**70},
    ],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_truncation_is_declined_or_read_as_pickle_reads_it(protocol: int) -> None:
    data = _dumps(_SMALL, protocol)
    assert check_stream(data) is not None
    for cut in range(len(data)):
        check_stream(data[:cut])
    # (a cut just before STOP leaves the stack without STOP: never read)
    assert _scan.read(data[:-1]) is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_single_byte_flips_are_declined_or_read_as_pickle_reads_it(protocol: int) -> None:
    data = _dumps(_SMALL, protocol)
    rng = random.Random(protocol)
    read = 0
    for _ in range(3000):
        damaged = bytearray(data)
        at = rng.randrange(len(data))
        damaged[at] = (
            rng.randrange(256) if rng.random() < 0.7 else damaged[at] ^ (1 << rng.randrange(8))
        )
        read += check_stream(bytes(damaged)) is not None
    assert read > 0  # (some flips, in text or numbers, still read)


@SETTINGS
@given(
    value=PLAIN,
    protocol=st.sampled_from(PROTOCOLS),
    at=st.floats(0, 1, exclude_max=True),
    byte=st.integers(0, 255),
)
def test_random_data_with_a_byte_replaced(value: Any, protocol: int, at: float, byte: int) -> None:
    data = bytearray(_dumps(value, protocol))
    data[int(at * len(data))] = byte
    check_stream(bytes(data))


def _calls_recorded(*args: Any) -> None:  # pragma: no cover (must never run)
    raise AssertionError(f"called from a pickle with {args!r}")


_MOD = __name__.encode()
HAND_MADE: dict[str, bytes] = {
    "GLOBAL+REDUCE": b"\x80\x02c" + _MOD + b"\n_calls_recorded\n)R.",
    "GLOBAL builtins.eval": b"cbuiltins\neval\n\x8c\x041+1\x85R.",
    "STACK_GLOBAL+REDUCE": b"\x80\x04\x8c\x08builtins\x8c\x05print\x93)R.",
    "REDUCE on plain data": b"\x80\x04]K\x01\x85R.",
    "INST": b"(i" + _MOD + b"\n_calls_recorded\n.",
    "OBJ": b"(c" + _MOD + b"\n_calls_recorded\no.",
    "BUILD": b"\x80\x04}}b.",
    "PERSID": b"Pfoo\n.",
    "BINPERSID": b"\x80\x04K\x01Q.",
    "EXT1": b"\x80\x02\x82\x01.",
    "POP": b"\x80\x04K\x01K\x020.",
    "POP_MARK": b"\x80\x04K\x01(K\x021.",
    "DUP": b"\x80\x04]2\x86.",
    "protocol 0 text": b"(lp0\nI1\naI2\na.",
    "SETITEM with a list key": b"\x80\x04}]K\x01s.",
    "SETITEM with a tuple key": b"\x80\x04}K\x01\x85K\x02s.",
    "SETITEMS with a dict key": b"\x80\x04}(}K\x01u.",
    "DICT with a list key": b"\x80\x04(]K\x01d.",
    "SETITEM onto a list": b"\x80\x04]K\x05aK\x00K\x07s.",
    "SETITEM onto a tuple": b"\x80\x04)K\x00K\x07s.",
    "APPENDS on a dict": b"\x80\x04}(K\x01e.",
    "APPENDS of nothing on a dict": b"\x80\x04}(e.",
    "APPEND on a tuple": b"\x80\x04)K\x01a.",
    "APPEND on a str": b"\x80\x04\x8c\x01xK\x01a.",
    "APPEND below a MARK": b"\x80\x04](K\x01a.",
    "SETITEMS odd": b"\x80\x04}(K\x01K\x02K\x03u.",
    "DICT odd": b"\x80\x04(K\x01d.",
    "SETITEMS without MARK": b"\x80\x04}K\x01K\x02u.",
    "TUPLE without MARK": b"\x80\x04K\x01t.",
    "TUPLE3 on two": b"\x80\x04K\x01K\x02\x87.",
    "TUPLE2 across a MARK": b"\x80\x04K\x01(K\x02\x86.",
    "memo get of a missing index": b"\x80\x04]h\x05.",
    "LONG_BINGET of a missing index": b"\x80\x04]q\x00j\x01\x00\x00\x00.",
    "BINPUT under a MARK": b"\x80\x04K\x01(q\x00K\x02t.",
    "MEMOIZE on an empty stack": b"\x80\x04\x94N.",
    "BINPUT at len(data)": b"\x80\x04]r\x0b\x00\x00\x00h\x0b.",
    "BINPUT past len(data)": b"\x80\x04]r\x0f\x00\x00\x00j\x0f\x00\x00\x00.",
    "LONG_BINPUT of 1e6": b"\x80\x04]r\x40\x42\x0f\x00.",
    "BINPUT then MEMOIZE": b"\x80\x04]\x94]q\x00]\x94h\x00h\x01\x87.",
    "BINPUT overwritten": b"\x80\x04]q\x00}q\x00h\x00.",
    "BINUNICODE with invalid UTF-8": b"\x80\x04X\x02\x00\x00\x00\xff\xfe.",
    "SHORT_BINUNICODE overlong UTF-8": b"\x80\x04\x8c\x02\xc0\x80.",
    "SHORT_BINUNICODE cut UTF-8": b"\x80\x04\x8c\x01\xc3.",
    "surrogates as UTF-8": b"\x80\x04\x8c\x06\xed\xa0\x80\xed\xb0\x80\x8c\x03\xed\xb3\xbf\x86.",
    "BINUNICODE8 past the data": b"\x80\x04\x8d\x05\x00\x00\x00\x00\x00\x00\x00abc.",
    "BINBYTES8 past the data": b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\xffab.",
    "BINBYTES huge": b"\x80\x04B\xff\xff\xff\xffab.",
    "LONG4 with a negative length": b"\x80\x04\x8b\xff\xff\xff\xff.",
    "LONG4 of 9 bytes": b"\x80\x04\x8b\x09\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\x00.",
    "LONG1 empty": b"\x80\x04\x8a\x00.",
    "LONG1 -1 in 9 bytes": b"\x80\x04\x8a\x09" + b"\xff" * 9 + b".",
    "LONG1 int64 min": b"\x80\x04\x8a\x08" + b"\x00" * 7 + b"\x80.",
    "LONG1 int64 min in 9 bytes": b"\x80\x04\x8a\x09" + b"\x00" * 7 + b"\x80\xff.",
    "LONG1 2**63": b"\x80\x04\x8a\x09" + b"\x00" * 7 + b"\x80\x00.",
    "LONG1 -2**63-1": b"\x80\x04\x8a\x09" + b"\xff" * 7 + b"\x7f\xff.",
    "LONG1 small negative": b"\x80\x04\x8a\x01\x80.",
    "LONG1 past the data": b"\x80\x04\x8a\x09\x01.",
    "BININT negative": b"\x80\x04J\xff\xff\xff\xff.",
    "BININT2 high": b"\x80\x04M\xff\xff.",
    "BINFLOAT nan payload": b"\x80\x04G\x7f\xf0\x00\x00\x00\x00\x00\x01.",
    "BINFLOAT -0.0": b"\x80\x04G\x80\x00\x00\x00\x00\x00\x00\x00.",
    "PROTO 6": b"\x80\x06N.",
    "PROTO 255": b"\x80\xff].",
    "PROTO in the middle": b"\x80\x04]\x80\x02K\x01a.",
    "no PROTO at all": b"]K\x01a.",
    "FRAME longer than the data": b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.",
    "FRAME huge": b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xff].",
    "FRAME exact": b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00].",
    "FRAME in a FRAME": b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x95\x02\x00\x00\x00\x00"
    + b"\x00\x00\x00].",
    # (a frame must end where one of pickle's reads ends: framing.py)
    "FRAME ends inside BININT": b"\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00]J\x05\x00"
    + b"\x00\x00a.",
    "FRAME ends inside a length": b"\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00]X\x01\x00"
    + b"\x00\x00xa.",
    "FRAME ends inside the bytes of a str": b"\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00]"
    + b"\x8c\x02xya.",
    "FRAME ends inside the next FRAME's length": b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00"
    + b"\x00]\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x01a.",
    "FRAME ends between an opcode and its argument": b"\x80\x04\x95\x02\x00\x00\x00\x00\x00"
    + b"\x00\x00]K\x07a.",
    "FRAME ends between a length and its bytes": b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00"
    + b"\x00]\x8c\x02xya.",
    "FRAME header the last bytes of a frame": b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00]"
    + b"\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x01a.",
    "FRAME empty": b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00].",
    "trailing bytes after STOP": b"\x80\x04]K\x01a.garbage\xff",
    "STOP with an empty stack": b"\x80\x04.",
    "STOP with an empty stack, no PROTO": b".",
    "STOP under a MARK": b"\x80\x04K\x01(.",
    "MARK left open at STOP": b"\x80\x04(K\x01.",
    "MARK left open under a list": b"\x80\x04](K\x01K\x02.",
    "no STOP": b"\x80\x04]",
    "empty": b"",
    "equal keys of three types": b"\x80\x04}(K\x01\x8c\x01a\x88\x8c\x01bG?\xf0\x00\x00\x00\x00"
    + b"\x00\x00\x8c\x01cu.",
    "NaN keys": b"\x80\x04}(G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x01G\x7f\xf8\x00\x00\x00\x00"
    + b"\x00\x00K\x02u.",
    "a memoized NaN key twice": b"\x80\x04}(G\x7f\xf8\x00\x00\x00\x00\x00\x00\x94K\x01h\x00"
    + b"K\x02u.",
    "entries twice in the top dict": b"\x80\x04}(\x8c\x07entries]K\x01a\x8c\x07entries]K\x02au.",
    "entries a tuple": b"\x80\x04}\x8c\x07entriesK\x01\x85s.",
    "entries a list then a str": b"\x80\x04}(\x8c\x07entries]\x8c\x07entries\x8c\x01xu.",
    "top-level tuple of lists": b"\x80\x04]K\x01a]\x86.",
    "list holding itself in a tuple": b"]q\x00h\x00a\x85.",
    "tuple in a cycle through a list": b"\x80\x04}\x8c\x01x]q\x00h\x00\x85q\x01as.",
    "one memoized str as key and value": b"\x80\x04}\x8c\x01k\x94h\x00s.",
}


@pytest.mark.parametrize("name", list(HAND_MADE))
def test_hand_made_streams_are_declined_or_read_as_pickle_reads_them(name: str) -> None:
    check_stream(HAND_MADE[name])


@pytest.mark.parametrize(
    "name",
    [
        "GLOBAL+REDUCE",
        "GLOBAL builtins.eval",
        "STACK_GLOBAL+REDUCE",
        "REDUCE on plain data",
        "INST",
        "OBJ",
        "BUILD",
        "PERSID",
        "BINPERSID",
        "EXT1",
        "protocol 0 text",
        "SETITEM with a list key",
        "SETITEM onto a list",
        "APPENDS on a dict",
        "memo get of a missing index",
        "BINPUT past len(data)",
        "LONG_BINPUT of 1e6",
        "BINUNICODE with invalid UTF-8",
        "LONG4 with a negative length",
        "PROTO 6",
        "FRAME longer than the data",
        "FRAME in a FRAME",
        "FRAME ends inside BININT",
        "FRAME ends inside a length",
        "FRAME ends inside the bytes of a str",
        "FRAME ends inside the next FRAME's length",
        "STOP with an empty stack",
        "STOP under a MARK",
        "no STOP",
        "empty",
    ],
)
def test_streams_not_read_here_are_declined(name: str) -> None:
    assert _scan.read(HAND_MADE[name]) is None


@pytest.mark.parametrize(
    "name",
    [
        "BINPUT at len(data)",
        "BINPUT then MEMOIZE",
        "BINPUT overwritten",
        "surrogates as UTF-8",
        "LONG1 -2**63-1",
        "LONG1 int64 min in 9 bytes",
        "BINFLOAT nan payload",
        "PROTO in the middle",
        "no PROTO at all",
        "FRAME ends between an opcode and its argument",
        "FRAME ends between a length and its bytes",
        "FRAME header the last bytes of a frame",
        "FRAME empty",
        "trailing bytes after STOP",
        "MARK left open at STOP",
        "equal keys of three types",
        "NaN keys",
        "a memoized NaN key twice",
        "entries twice in the top dict",
        "entries a list then a str",
        "tuple in a cycle through a list",
        "APPENDS of nothing on a dict",
    ],
)
def test_plain_streams_are_read(name: str) -> None:
    """(The comparison above checks nothing where the reader declines.)"""
    assert check_stream(HAND_MADE[name]) is not None


def test_containers_filled_in_several_runs_keep_their_order() -> None:
    """A container's children are laid out where they were added when they came in one run
    (one SETITEMS, one APPENDS) and copied after the others when it had several: the pickler
    batches a list's or dict's items 1,000 at a time, and a memo reference lets a stream fill
    two lists in turns. Either way, every child in the order pickle adds it."""
    entries = [{"i": i, "frames": [{"line": i}] * (i % 3)} for i in range(2_500)]
    value = {
        "version": "2.10",
        "entries": entries,
        "wide": {str(i): i for i in range(2_100)},
        "lists": [list(range(i, i + 1_001)) for i in range(3)],
    }
    for protocol in PROTOCOLS:
        got = check_stream(_dumps(value, protocol), pickle.loads)
        assert got is not None
        check_view(got["entries"])
    # lists A and B filled in turns through the memo, A and B in a tuple twice
    a_b_a_b = b"\x80\x04(]\x94K\x01a]\x94K\x02ah\x00(K\x03K\x04eh\x01K\x05at."
    got = check_stream(a_b_a_b, pickle.loads)
    assert got == ([1, 3, 4], [2, 5], [1, 3, 4], [2, 5])
    assert got[0] is got[2] and got[1] is got[3]


@pytest.mark.parametrize("data", [b"\x80\x02].", b"\x80\x02}.", b"\x80\x02N.", b"K\x01."])
def test_a_stream_without_children_reads_without_a_spare(data: bytes) -> None:
    """(A zero-size array of children was taken for an allocation that failed.)"""
    held = _scan.read(b"\x80\x04]K\x01a.")  # (its tree, alive, holds the one spare)
    got = _scan.read(data)
    assert got is None or mismatch(got, pickle.loads(data)) is None
    del held


def test_huge_memo_index_is_declined_without_allocating() -> None:
    """LONG_BINPUT 2**32 - 1: declined at once (pickle would ask for 64 GiB of memo)."""
    start = time.perf_counter()
    assert _scan.read(b"\x80\x04]r\xff\xff\xff\xff.") is None
    assert _scan.read(b"\x80\x04]r\xff\xff\xff\x7fj\xff\xff\xff\x7f.") is None
    assert time.perf_counter() - start < 0.5


def test_globals_are_never_called() -> None:
    for name in ("GLOBAL+REDUCE", "INST", "OBJ"):
        assert _scan.read(HAND_MADE[name]) is None
        with pytest.raises(UnsafePickleError):
            unpickle.safe_loads(HAND_MADE[name])


def _outcome(path: Path) -> Any:
    try:
        return unpickle.read_payload(path, path.stat().st_size)
    except DumpFormatError as exc:
        return type(exc), str(exc)


def test_read_payload_is_the_same_with_and_without_the_c_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = _dumps(_SMALL, 4)
    files = {
        "good": good,
        "good-2": _dumps(_SMALL, 2),
        "truncated": good[: len(good) // 2],
        "cut-before-stop": good[:-1],
        "flipped": good[:40] + bytes([good[40] ^ 0xFF]) + good[41:],
        **{name.replace(" ", "-"): HAND_MADE[name] for name in HAND_MADE if "GLOBAL" in name},
        "invalid-utf8": HAND_MADE["BINUNICODE with invalid UTF-8"],
        "negative-long4": HAND_MADE["LONG4 with a negative length"],
        "proto-6": HAND_MADE["PROTO 6"],
        "trailing": HAND_MADE["trailing bytes after STOP"],
        "memo-missing": HAND_MADE["memo get of a missing index"],
        "list-key": HAND_MADE["SETITEM with a list key"],
        "frame-long": HAND_MADE["FRAME longer than the data"],
        "frame-straddled": HAND_MADE["FRAME ends inside BININT"],
        "frame-in-frame": HAND_MADE["FRAME in a FRAME"],
        "empty-stack": HAND_MADE["STOP with an empty stack"],
        "self-dict": b"\x80\x04}q\x00\x8c\x01xq\x01]q\x02h\x02as.",
    }
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        monkeypatch.delenv("FRTRACE_PURE_PYTHON", raising=False)
        fast = _outcome(path)
        monkeypatch.setenv("FRTRACE_PURE_PYTHON", "1")
        assert native.read_pickle(data) is None
        careful = _outcome(path)
        if isinstance(careful, tuple) and isinstance(careful[0], type):
            assert fast == careful, name
        else:
            assert mismatch(fast, careful) is None, name


# ---- 4. depth and fan-out ----------------------------------------------------------------------


def test_deep_nesting_is_read_and_made_without_recursion() -> None:
    depth = 100_000
    data = b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b"."
    view = _scan.read(data)
    assert isinstance(view, _scan.Entries) and len(view) == 1
    assert mismatch(view, pickle.loads(data)) is None
    x: Any = view[0]
    seen = 1
    while x:
        x, seen = x[0], seen + 1
    assert seen == depth - 1  # (the view holds the first list)
    # the same nesting of dicts and tuples, under a top-level dict
    data = b"\x80\x04}\x8c\x01k" + b"}\x8c\x01k" * depth + b"]" + b"s" * (depth + 1) + b"."
    got = _scan.read(data)
    assert got is not None and mismatch(got, pickle.loads(data)) is None
    data = b"\x80\x04)" + b"\x85" * depth + b"."
    got = _scan.read(data)
    assert type(got) is tuple and mismatch(got, pickle.loads(data)) is None
    del view, x, got


def test_a_million_references_to_one_memoized_dict_are_cheap() -> None:
    count = 1_000_000
    frame = b"\x8c\x04name\x8c\x01f\x8c\x04line\x8a\x09" + b"\x01" * 9
    data = b"\x80\x04](}(" + frame + b"u\x94" + b"h\x00" * (count - 1) + b"e."
    start = time.perf_counter()
    view = _scan.read(data)
    assert isinstance(view, _scan.Entries) and len(view) == count
    first = view[0]
    assert view[count - 1] is first and view[count // 2] is first
    assert first == {"name": "f", "line": int.from_bytes(b"\x01" * 9, "little")}
    assert view.all_dicts()
    cols = view.columns(_SPECS, MAX_LEAVES)
    assert len(cols) == len(_SPECS)
    assert time.perf_counter() - start < 3.0
    items = list(view)
    assert len(items) == count and all(x is first for x in items[:: count // 100])
    want = pickle.loads(data)
    assert want[0] is want[-1] and want[0] == first


_GC_LOOKS_AT_LISTS = """
import gc
from frtrace.load.read import _scan

def look(phase, info):
    for o in gc.get_objects():
        if type(o) is list:
            list(o)

gc.callbacks.append(look)
gc.set_threshold(100)
got = _scan.read(b"\\x80\\x04(" + b"]" * 1000 + b"l\\x85.")
assert len(got[0]) == 1000
"""


def test_a_gc_callback_never_sees_a_half_made_list() -> None:
    """Lists and tuples are made at full size and filled slot by slot: the collector is off
    meanwhile, so no Python code (here a gc callback listing every list) sees an empty slot."""
    done = subprocess.run(
        [sys.executable, "-c", _GC_LOOKS_AT_LISTS], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-500:]


def test_the_same_gc_callback_is_harmless_to_pickle() -> None:
    script = _GC_LOOKS_AT_LISTS.replace("_scan.read(", "__import__('pickle').loads(")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-500:]


# ---- 5. memory ---------------------------------------------------------------------------------


def _dump_bytes(n: int) -> bytes:
    frames = [dict(f) for f in _FRAMES]
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "profiling_name": "nccl:all_reduce",
            "state": "completed",
            "frames": [frames[i % 3], frames[(i + 1) % 3]],
            "input_sizes": [[i, 4096]],
            "input_dtypes": ["Float"],
            "big": 2**70 + i,
            "text": f"é{i}",
        }
        for i in range(n)
    ]
    loop: list[Any] = []
    loop.append(loop)
    return _dumps({"version": "2.10", "loop": loop, "entries": entries}, 4)


def test_reading_and_dropping_does_not_grow_memory() -> None:
    data = _dump_bytes(300)

    def once() -> None:
        payload = _scan.read(data)
        view = payload["entries"]
        for i in range(0, len(view), 2):  # (half the entries made)
            view[i]["frames"]
        view.columns(_SPECS, MAX_LEAVES)
        assert _scan.read(data[:-1]) is None  # (a declined stream frees its nodes too)

    grown = memory_kept(once, 200, warm=20)
    assert grown < 64 * 1024, f"{grown} bytes kept after 200 reads"


def test_a_view_outlives_the_dict_it_came_in() -> None:
    data = _dump_bytes(50)
    payload = _scan.read(data)
    view = payload["entries"]
    kept = view[3]
    del payload
    gc.collect()
    assert view[3] is kept
    assert mismatch(view, pickle.loads(data)["entries"]) is None
    want = _scan.columns(pickle.loads(data)["entries"], _SPECS, MAX_LEAVES)
    _same_columns(view.columns(_SPECS, MAX_LEAVES), want)
    # and an entry outlives its view
    del view
    gc.collect()
    assert kept["record_id"] == 3 and kept["frames"][0]["name"] == "all_reduce"
