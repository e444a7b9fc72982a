"""A pickle's frames (protocol 4): one verdict for a file, whichever reader reads it.

A FRAME that ends inside one of pickle's reads (an argument, a length, the bytes it counts)
was read by the C reader as ``pickle.loads`` reads it, across the frame's end, and by the
careful unpickler another way: where the frame ran past its read-ahead (1 MiB) the rest of
the frame was dropped, so the same file gave another dump, or an error (issue 23: one dump
set was HEALTHY, WITH STRAGGLERS one way and DESYNC the other). Both refuse such a stream now,
with the Python unpickler's words (``frtrace/load/read/framing.py``): the C reader declines it and
the careful unpickler refuses it, so a file has one problem line either way. Every stream
either accepts decodes to what ``pickle.loads`` gives (``differential.check_readers``; the
fuzz run, ``test_fuzz_readers.py``, checks the same on mutated fixtures).
"""

from __future__ import annotations

import itertools
import pickle
import pickletools
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frtrace.errors import DumpFormatError
from frtrace.load.read import framing, native, unpickle
from tests.conftest import FIXTURES, LOADER_SETTINGS
from tests.load.read.differential import (
    active,
    body,
    check_readers,
    frames_anywhere,
    mismatch,
    opcode_starts,
    reframe,
)


def _dump(n: int) -> bytes:
    """A dump of ``n`` entries, pickled without frames (as torch's pickler writes it)."""
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "collective_seq_id": i,
            "profiling_name": "nccl:all_reduce",
            "state": "completed",
            "time_created_ns": 1_700_000_000_000_000_000 + i,
            "duration_ms": -1.5 if i % 2 else 0.25,
            "input_sizes": [[1024, 4096]],
            "input_dtypes": ["Float"],
            "frames": [{"name": f"step{i % 9}", "filename": "train.py", "line": i % 300}],
        }
        for i in range(n)
    ]
    return pickle.dumps({"version": "2.10", "pg_config": {}, "entries": entries}, protocol=3)


def _opcode_at(stream: bytes, after: int, names: tuple[str, ...]) -> int:
    """Where the first opcode named ``names`` at or past ``after`` starts in ``stream``."""
    for op, _, at in pickletools.genops(b"\x80\x03" + stream):
        if at is not None and at - 2 >= after and op.name in names:
            return at - 2
    raise AssertionError("no such opcode")


def _outcome(path: Path) -> Any:
    try:
        return unpickle.read_payload(path, path.stat().st_size)
    except DumpFormatError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("names", [("LONG1",), ("BINUNICODE",), ("BINFLOAT",)])
def test_a_frame_that_ends_inside_a_read_is_one_problem_either_way(
    names: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Before: the C reader read the file as pickle.loads does, the careful unpickler dropped
    the rest of a frame past its 1 MiB read-ahead and failed or read another dump.)"""
    stream = body(_dump(12_000))
    assert len(stream) > 1_400_000
    # (past the careful unpickler's read-ahead; two bytes into an argument, a length or a str)
    cut = _opcode_at(stream, 1_200_000, names) + 3
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(reframe(stream, [(0, cut)]))  # (the opcodes go on after it, unframed)
    fast = _outcome(path)
    monkeypatch.setenv("FRTRACE_PURE_PYTHON", "1")
    careful = _outcome(path)
    assert fast == careful
    assert careful == (
        "DumpFormatError",
        f"{path}: not a readable Flight Recorder dump: corrupt pickle (UnpicklingError: "
        f"{framing.STRADDLE}); re-dump the rank or analyse without it.",
    )


def test_frames_that_end_between_reads_read_as_pickle_writes_them(tmp_path: Path) -> None:
    """Frames ending where a read ends (between an opcode and its argument, a length and its
    bytes: CPython's pickler writes a large str's bytes after its frame) are read, by both."""
    data = _dump(3_000)
    stream = body(data)
    # frames from one str to the next, ending after the str's code or after its length
    strs = [_opcode_at(stream, at, ("BINUNICODE",)) for at in range(0, 200_000, 7919)]
    after = dict(itertools.pairwise(opcode_starts(stream)))
    starts = [0, *(after[at] for at in strs[:-1])]  # (the opcode after each str)
    ends = [at + (1 if k % 2 else 5) for k, at in enumerate(strs)]
    framed = reframe(stream, list(zip(starts, ends, strict=True)))
    assert check_readers(framed) == ("c" if active() else "careful")
    big = pickle.dumps(["x" * 70_000, {"k": 1}], protocol=4)  # (its bytes after its frame)
    assert check_readers(big) == ("c" if active() else "careful")
    path = tmp_path / "rank_0"
    path.write_bytes(framed)
    read = unpickle.read_payload(path, len(framed))[0]
    assert mismatch(read, pickle.loads(data)) is None


@pytest.mark.parametrize(
    ("stream", "problem"),
    [
        (b"\x95\x03\x00\x00\x00\x00\x00\x00\x00]J\x05\x00\x00\x00a.", framing.STRADDLE),
        (b"\x95\x04\x00\x00\x00\x00\x00\x00\x00]\x8c\x02xya.", framing.STRADDLE),
        (b"\x95\x03\x00\x00\x00\x00\x00\x00\x00]I1\naI2\na.", framing.STRADDLE),
        (
            b"\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x01a.",
            framing.STRADDLE,
        ),
        (
            b"\x95\x0c\x00\x00\x00\x00\x00\x00\x00]\x95\x01\x00\x00\x00\x00\x00\x00\x00KK\x01a.",
            framing.NEW_FRAME_INSIDE,
        ),
        (
            b"\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x95\x01\x00\x00\x00\x00\x00\x00\x00K\x01a.",
            framing.NEW_FRAME_INSIDE,
        ),
        (b"\x95\x02\x00\x00\x00\x00\x00\x00\x00]\x8c\x02xya.", None),
        (b"\x95\x02\x00\x00\x00\x00\x00\x00\x00]I1\naI2\na.", None),
        (b"\x95\x02\x00\x00\x00\x00\x00\x00\x00]\x95\x01\x00\x00\x00\x00\x00\x00\x00K\x01a.", None),
        (b"\x95\x0a\x00\x00\x00\x00\x00\x00\x00]\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x01a.", None),
        (b"\x95\x01\x00\x00\x00\x00\x00\x00\x00]\x95\x00\x00\x00\x00\x00\x00\x00\x00K\x01a.", None),
    ],
    ids=[
        "ends inside BININT's argument",
        "ends inside a str's bytes",
        "ends inside a line",
        "ends inside the next FRAME's length",
        "ends inside a FRAME with 2 bytes of its frame left",
        "ends inside a FRAME with 1 byte of its frame left",
        "ends after an opcode",
        "ends after an opcode of a line",
        "ends after a FRAME's code",
        "ends after the next FRAME (the last bytes of its frame)",
        "ends before an empty FRAME",
    ],
)
def test_frame_edge_cases_are_judged_as_the_python_unpickler_judges_them(
    stream: bytes, problem: str | None
) -> None:
    """Each stream after PROTO 4. ``problem``: the careful unpickler's refusal, in pickle's own
    words (None: read by both readers, as pickle.loads reads it)."""
    data = b"\x80\x04" + stream
    verdict = check_readers(data)
    if problem is None:
        assert verdict in ("c", "careful")  # (and as pickle.loads reads it)
        return
    assert verdict == "frames"
    with pytest.raises(pickle.UnpicklingError, match=problem):
        unpickle.safe_loads(data)


def test_streams_without_a_frame_byte_are_not_walked() -> None:
    """(The walk is for streams that can hold a FRAME: others cost a memchr.)"""
    framing.check_frames(b"\x80\x02" + b"J" * 10 + b"\x00")  # (a FRAME-less stream: no walk)
    with pytest.raises(pickle.UnpicklingError):
        framing.check_frames(b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00JAAAA.")


# ---- generated streams: plain data in frames cut anywhere --------------------------------


_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.binary(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=25,
)


@LOADER_SETTINGS
@given(
    value=_VALUES,
    picks=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 4), st.floats(0, 1)), max_size=6),
    protocol=st.sampled_from([4, 5]),
)
def test_plain_data_framed_anywhere_is_read_as_pickle_loads_or_refused_by_both(
    value: Any, picks: list[tuple[float, int, float]], protocol: int
) -> None:
    """Frames put at opcode starts, each ending at the next (as a pickler writes them), inside
    itself, past the next, or anywhere."""
    stream = body(pickle.dumps(value, protocol=3))
    starts = opcode_starts(stream)
    chosen = sorted({0, *(starts[int(at * (len(starts) - 1))] for at, _, _ in picks)})
    frames = []
    for k, (start, (_, how, where)) in enumerate(zip(chosen, [(0, 0, 0), *picks], strict=False)):
        nxt = chosen[k + 1] if k + 1 < len(chosen) else len(stream)
        end = (nxt, start + int(where * (nxt - start)), nxt + 1, nxt + 9, int(where * len(stream)))
        frames.append((start, max(start, end[how])))
    check_readers(reframe(stream, frames, protocol))


def test_fixture_pickles_framed_anywhere_are_read_as_pickle_loads_or_refused_by_both() -> None:
    rng = random.Random(23)
    files = [
        p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.read_bytes()[:1] == b"\x80"
    ]
    verdicts = set()
    for path in rng.sample(files, 40):
        stream = body(path.read_bytes())
        for _ in range(5):
            verdicts.add(check_readers(reframe(stream, frames_anywhere(stream, rng))))
    assert "frames" in verdicts
    assert ("c" if native.active() else "careful") in verdicts
