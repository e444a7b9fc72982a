"""An Arrow IPC file written around holes, its values put in afterwards
(frtrace.load.handover.ipcfile)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from frtrace.load.handover.ipcfile import stand_ins, write_around


def test_the_values_put_in_the_holes_make_the_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rows = 1001
    values = [
        rng.integers(0, 50, rows).astype(np.int64),
        rng.integers(0, 3, rows).astype(np.int32),
        np.packbits(rng.random(rows) < 0.5, bitorder="little"),
    ]
    valid = rng.random(rows) < 0.8
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = int(rows - valid.sum())
    dictionary = pa.array(["a", "b", "c"])

    def table(buffers: list[pa.Buffer]) -> pa.Table:
        return pa.table(
            {
                "x": pa.Array.from_buffers(pa.int64(), rows, [bitmap, buffers[0]], nulls),
                "d": pa.DictionaryArray.from_arrays(
                    pa.Array.from_buffers(pa.int32(), rows, [None, buffers[1]]),
                    dictionary,
                    safe=False,
                ),
                "b": pa.Array.from_buffers(pa.bool_(), rows, [None, buffers[2]]),
            }
        )

    _region, buffers = stand_ins([v.nbytes for v in values])
    written = write_around(tmp_path / "t.arrow", table(buffers), buffers)
    assert written is not None and len(set(written.holes)) == 3
    for at, part in zip(written.holes, values, strict=True):
        os.pwrite(written.fd, part.tobytes(), at)
    written.close()
    data = (tmp_path / "t.arrow").read_bytes()
    assert len(data) == written.size
    back = ipc.open_file(pa.py_buffer(data)).read_all()
    assert back.equals(table([pa.py_buffer(v) for v in values]))


def test_where_arrow_does_not_write_the_stand_ins_there_is_no_file(tmp_path: Path) -> None:
    _, buffers = stand_ins([8 * 10])
    copied = pa.table({"x": pa.array(range(10), pa.int64())})  # (not the stand-in's memory)
    assert write_around(tmp_path / "t.arrow", copied, buffers) is None
    assert not (tmp_path / "t.arrow").exists()
