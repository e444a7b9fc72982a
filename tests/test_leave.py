"""The command's end (``frtrace/cli/leave.py``): the process ends without its teardown, but
with what the interpreter's exit does that matters: threads joined, exit handlers and
finalizers run, output flushed, the exit code kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from frtrace.cli.leave import exit_status

JOB = """
import atexit, sys, tempfile, threading, time, weakref
from pathlib import Path
from frtrace.cli.leave import leave
out = Path(sys.argv[1])
def later():
    time.sleep(0.3)
    (out / "thread").write_text("joined")
threading.Thread(target=later).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
held = tempfile.TemporaryDirectory(dir=out)  # (removed by its finalizer at exit)
(out / "tmp").write_text(held.name)
sys.stdout.write("no newline, still buffered")
leave(eval(sys.argv[2]))
"""


BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _job(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path), code],
        capture_output=True,
        text=True,
        env=BUFFERED,
    )


@pytest.mark.parametrize(("code", "status"), [("None", 0), ("1", 1), ("3", 3), ("256", 0)])
def test_the_process_ends_with_its_code_after_what_matters(
    tmp_path: Path, code: str, status: int
) -> None:
    done = _job(tmp_path, code)
    assert done.returncode == status, done.stderr
    assert done.stdout == "no newline, still buffered"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not Path((tmp_path / "tmp").read_text()).exists()
    assert done.stderr == ""


def test_a_message_is_written_and_ends_with_1(tmp_path: Path) -> None:
    done = _job(tmp_path, "'error: bad'")
    assert (done.returncode, done.stderr) == (1, "error: bad\n")


def test_a_closed_pipe_costs_no_traceback(tmp_path: Path) -> None:
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path), "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=BUFFERED,
    )
    assert job.stdout is not None
    job.stdout.close()  # (the reader is gone before the job writes)
    _, err = job.communicate()
    assert (job.returncode, err) == (2, "")


def test_exit_status_is_sys_exits() -> None:
    assert [exit_status(c) for c in (None, 0, 1, 2, 130, 257)] == [0, 0, 1, 2, 130, 1]


def test_the_console_script_ends_through_it(tmp_path: Path) -> None:
    """``python -m frtrace`` (and the ``frtrace`` script: the same ``main``) keeps the
    command's exit code and its whole output."""
    done = subprocess.run(
        [sys.executable, "-m", "frtrace", "analyze", str(tmp_path / "none"), "-f", "json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
