"""A coverage-guided fuzz run of the pickle readers, for a fixed time (``fuzz_readers.py``).

In a subprocess: atheris (libFuzzer) where it is installed (the ``dev`` extra installs it),
else the seeded mutation loop, for ``FRTRACE_FUZZ_READERS_SECONDS`` (40 unless set), seeded
from the fixture pickles. Every input must keep ``differential.check_readers``: what either
reader accepts is what ``pickle.loads`` gives, frames judged as the Python unpickler judges
them, and nothing crashes. A failing input is kept under the test's temporary folder (its
path is in the failure).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SECONDS = float(os.environ.get("FRTRACE_FUZZ_READERS_SECONDS", "40"))
ROOT = Path(__file__).parents[3]


def test_fuzzed_pickles_read_as_pickle_loads_reads_them_or_are_refused(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    started = time.monotonic()
    command = [sys.executable, "-m", "tests.load.read.fuzz_readers", "--seconds", str(SECONDS)]
    done = subprocess.run(
        [*command, "--seed", "23", "--artifacts", str(artifacts), "--corpus", str(tmp_path / "c")],
        cwd=ROOT,
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=SECONDS + 180,
        check=False,
    )
    took = time.monotonic() - started
    output = done.stdout + done.stderr
    kept = sorted(str(p) for p in artifacts.glob("*")) if artifacts.exists() else []
    assert done.returncode == 0, (
        f"rc {done.returncode} after {took:.0f} s, kept {kept}:\n" + (output[-4000:])
    )
    summary = [line for line in output.splitlines() if line.startswith("fuzz_readers:")]
    assert summary, output[-2000:]
    assert " 0 inputs" not in summary[-1], summary[-1]
