"""The gather's outputs (frtrace.load.handover.outputs): a block's columns appended by a writer
thread.

tests/load/handover/test_spill.py and test_cache.py load every fixture set through the gather; these
check that a writer thread beside the gather writes what the gather does alone, byte for
byte, and that a writer thread's failure is the gather's (no file left behind).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from frtrace.load.handover import gather, outputs, spill
from frtrace.load.handover.gather import Gather
from frtrace.load.handover.outputs import Hole
from frtrace.load.handover.shipped import ColumnWriter

SCHEMA = pa.schema(
    [
        pa.field("a", pa.int64()),
        pa.field("b", pa.dictionary(pa.int32(), pa.string())),
        pa.field("c", pa.bool_()),
        pa.field("d", pa.int32()),
        pa.field("e", pa.int64()),
    ]
)
APPEND = Hole.append  # (each test wraps this one, never another test's wrapper)


def _gather(tmp_path: Path, parts: int = 40) -> Gather:
    rng = np.random.default_rng(7)
    writer = ColumnWriter(tmp_path, "w.columns")
    built = Gather(SCHEMA, None)
    for k in range(parts):
        n = int(rng.integers(1, 50))
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(rng.integers(0, 1 << 40, n), pa.int64()),
                pa.array([("x", "y", None)[v] for v in rng.integers(0, 3, n)]).dictionary_encode(),
                pa.array(rng.integers(0, 2, n).astype(bool)),
                pa.array([None if i % 3 == 0 else k * i for i in range(n)], pa.int32()),
                pa.array(rng.integers(-5, 5, n), pa.int64()),
            ],
            schema=SCHEMA,
        )
        built.add(writer.put(batch), {})
    return built


def _written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, name: str
) -> tuple[pa.Table, bytes, int, set[int]]:
    monkeypatch.setattr(outputs, "WRITER_THREADS", threads)
    monkeypatch.setattr(outputs, "default_jobs", lambda: 2)
    monkeypatch.setattr(gather, "BLOCK_ROWS", 16)  # (a block written every dump or so)
    writers: set[int] = set()

    def noted(self: Hole, values: np.ndarray) -> None:
        writers.add(threading.get_ident())
        APPEND(self, values)

    monkeypatch.setattr(Hole, "append", noted)
    dictionaries = {1: pa.array(["x", "y"])}
    path = tmp_path / f"{name}.arrow"
    made = _gather(tmp_path / name).table(path, dictionaries)
    assert made is not None
    table, size = made
    return table, path.read_bytes(), size, writers


def test_a_writer_thread_writes_what_the_gather_does_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, one_bytes, one_size, one_writers = _written(tmp_path, monkeypatch, 1, "one")
    two, two_bytes, two_size, two_writers = _written(tmp_path, monkeypatch, 2, "two")
    main = threading.get_ident()
    assert one_writers == {main} and len(two_writers) == 1 and main not in two_writers
    assert two.equals(one) and two.num_rows > 100
    assert two_bytes == one_bytes
    assert two_size == one_size == len(two_bytes)


def test_a_writer_threads_failure_is_the_gathers_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column that cannot be written in the second thread: the gather fails as when the
    first cannot, once the other thread is done, and the file holding dumps' contents goes.
    (Where the file's room could not be reserved: the writers' files are kept, so the columns
    can be gathered again the other way; test_shipped.py has a failure after they went.)"""
    monkeypatch.setattr(spill, "reserve", lambda fd, length: False)
    monkeypatch.setattr(outputs, "default_jobs", lambda: 2)
    main = threading.get_ident()

    def fails_beside(self: Hole, values: np.ndarray) -> None:
        if threading.get_ident() != main:
            raise OSError(28, "No space left on device")
        APPEND(self, values)

    monkeypatch.setattr(Hole, "append", fails_beside)
    path = tmp_path / "entries.arrow"
    with pytest.raises(OSError, match="No space left"):
        _gather(tmp_path).table(path, {1: pa.array(["x", "y"])})
    assert not path.exists()
