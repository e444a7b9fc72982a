"""A stale dump told by its entries, whatever its file time (frtrace.load.lifetimes): a rank
whose ops of a group run past the first op the others recorded in it, all of them long
before, is of an earlier run even where a checkout or a copy gave its file a new time; a rank
whose ops stop short of the others' first stays in (without a restart or an older file time
nothing shows it is another run's)."""

from __future__ import annotations

import os
import pickle
import shutil
import time
from pathlib import Path
from typing import Any

from frtrace.load.tables import load_dumps

GLOO = Path(__file__).resolve().parents[1] / "fixtures" / "gloo"
HOUR_NS = 3_600_000_000_000
_KEYS = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


def _job(tmp_path: Path, base: str, rank3: Any) -> Path:
    """``base``'s real dumps, rank 3's made by ``rank3`` (its dump's dict, changed in place),
    every file's time now (a checkout's)."""
    folder = tmp_path / base
    shutil.copytree(GLOO / base, folder)
    path = folder / "rank_3"
    doc = pickle.loads(path.read_bytes())  # (a fixture of this repository: plain data)
    rank3(doc)
    path.write_bytes(pickle.dumps(doc, protocol=2))
    now = time.time()
    for f in folder.iterdir():
        os.utime(f, (now, now))
    return folder


def _earlier(doc: dict[str, Any]) -> None:
    for entry in doc["entries"]:
        for key in _KEYS:
            if entry.get(key):
                entry[key] -= HOUR_NS


def test_a_stale_dump_whose_ops_run_past_the_others_is_set_aside_with_a_new_file_time(
    tmp_path: Path,
) -> None:
    """Rank 3's dump of the same job an hour earlier (its ops #1 on, as far as the others'
    or further): not one run, set aside, said with why."""
    dumps = load_dumps(_job(tmp_path, "healthy", _earlier), cache=False)
    assert dumps.loaded_ranks == (0, 1, 2)
    (said,) = [p.message for p in dumps.problems if p.rank == 3]
    assert "rank 3's dump is of an earlier attempt or run" in said
    assert "run to #" in said and "not one run" in said


def test_a_dump_whose_ops_stop_short_of_the_others_stays_in(tmp_path: Path) -> None:
    """Rank 3 recorded only ops before the others' first (their buffers begin later), an
    hour before: nothing but the time gap says another run, and a new file time does not
    prove it: read as one moment (as before)."""

    def behind(doc: dict[str, Any]) -> None:
        _earlier(doc)
        doc["entries"] = [e for e in doc["entries"] if e["collective_seq_id"] <= 2]

    folder = _job(tmp_path, "healthy", behind)
    for rank in (0, 1, 2):  # (their first ops gone, as a wrapped buffer's)
        path = folder / f"rank_{rank}"
        doc = pickle.loads(path.read_bytes())
        doc["entries"] = doc["entries"][2:]
        path.write_bytes(pickle.dumps(doc, protocol=2))
    dumps = load_dumps(folder, cache=False)
    assert dumps.loaded_ranks == (0, 1, 2, 3)
    assert not [p for p in dumps.problems if "earlier attempt or run" in p.message]


def test_each_ranks_span_is_its_least_creation_and_greatest_time() -> None:
    """A rank's span is the least creation time and the greatest of the three times of its
    entries, nulls aside, wherever its rows lie (a rank's rows in one run or several); a rank
    with no creation time, or none after 0, has none."""
    from types import SimpleNamespace

    import numpy as np
    import pyarrow as pa

    from frtrace.load.lifetimes import _spans

    rng = np.random.default_rng(46)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        ranks = np.sort(rng.integers(0, 4, n)) if rng.random() < 0.5 else rng.integers(0, 4, n)
        columns: dict[str, list[int | None]] = {}
        for key in _KEYS:
            times = rng.integers(0, 50, n).tolist()
            columns[key] = [t if rng.random() < 0.7 else None for t in times]
        rows: dict[int, list[int]] = {}
        for i, r in enumerate(ranks.tolist()):
            rows.setdefault(r, []).append(i)
        wanted = {}
        for r, at in rows.items():
            created = [columns[_KEYS[0]][i] for i in at if columns[_KEYS[0]][i] is not None]
            times = [columns[k][i] for k in _KEYS for i in at if columns[k][i] is not None]
            if created and min(created) > 0:
                wanted[r] = (min(created), max(times))
        table = pa.table(
            {"rank": pa.array(ranks, pa.int32())}
            | {k: pa.array(v, pa.int64()) for k, v in columns.items()}
        )
        assert _spans(SimpleNamespace(entries=table)) == wanted  # type: ignore[arg-type]
