"""A load worker's process (``frtrace/load/workers/worker.py``): it reads every format without
pandas,
which pyarrow would otherwise import on its first array."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

PROBE = """
import sys
from pathlib import Path
from frtrace.incident.discover import discover
from frtrace.load.read.parse import ParsedDump, try_parse
from frtrace.load.workers.worker import _without_pandas
_without_pandas()
read = 0
for folder in sys.argv[1:]:
    for cand in discover(Path(folder)).candidates:
        result = try_parse(cand)
        assert isinstance(result, ParsedDump), (cand.path, result)
        read += 1
try:
    import pandas
except ImportError:
    pandas = None
print(read, pandas is None, "pandas" in sys.modules)
"""


def test_a_worker_reads_every_format_without_pandas() -> None:
    folders = [FIXTURES / name for name in ("gloo/never_joins", "gloo_json/mesh_stall")]
    folders += sorted(p for p in (FIXTURES / "nccl" / "healthy").iterdir() if p.is_dir())
    folders.append(FIXTURES / "nccl_real" / "stream_busy")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, folders)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    read, missing, imported = done.stdout.split()
    assert int(read) >= 8 and (missing, imported) == ("True", "False")
