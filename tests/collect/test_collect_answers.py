"""A real hung job that dumped by itself, then ``frtrace collect``: its dumps stay as they were.

4 real Gloo ranks with ``frtrace.recorder`` (``tests/collect/hung_job.py``, rank 2 never joins
the all_reduce of step 3). Every rank dumps on SIGUSR1, as it would on its stall watch: the
moment the job hung. collect then asks every rank: the recorder answers beside its own dump
(``frtrace.job.answers``), so the job's files are byte for byte what they were, ``frtrace
analyze`` on its folder says what it said before, and collect's folder (a later moment of the
same hang) names the same culprit; so does collect into the job's own folder (its answers
beside the recorder's files: copies where a hung rank's buffer did not change, else a later
snapshot of the same processes).
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.collect.run import host_folder
from frtrace.job.answers import answer_name
from frtrace.job.env import DUMP_PREFIX, STACKS_PREFIX, TERM_STACKS_PREFIX
from tests.collect.test_collect import hung_job
from tests.conftest import SERIAL

pytest.importorskip("torch")

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    SERIAL,  # a real 4-rank job
]
WORLD, STUCK = 4, 2


def _files(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Each file's bytes, inode and time: a file written again (a new file renamed into
    place) is another, even with the same bytes (a hung rank's buffer does not change)."""
    return {
        p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def _analyze(folder: Path) -> str:
    result = CliRunner().invoke(app, ["analyze", "-d", str(folder), "--no-cache"])
    assert result.exit_code == 1, result.output
    return result.output


def _collect(out: Path, tag: str) -> str:
    args = ["collect", str(out), "--env", f"FRTRACE_TEST_JOB={tag}", "--no-pyspy"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # (a hang)
    return result.output


def test_collect_leaves_the_jobs_own_dumps_and_their_verdict(tmp_path: Path) -> None:
    dumps = tmp_path / "job_dumps"
    own = [f"{DUMP_PREFIX}{r}" for r in range(WORLD)] + [
        f"{STACKS_PREFIX}{r}.json" for r in range(WORLD)
    ]
    with hung_job(tmp_path, WORLD, "recorder", stuck=STUCK) as (tag, procs):
        for p in procs:
            p.send_signal(signal.SIGUSR1)  # (the rank's own dump, as its watch would write)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all((dumps / n).exists() for n in own):
            time.sleep(0.05)
        time.sleep(0.5)  # (the last sidecar written)
        before = _files(dumps)
        # (and each rank's file for its stacks on SIGTERM, empty while it runs: termstack)
        armed = {n for n in before if n.startswith(TERM_STACKS_PREFIX) and not before[n][0]}
        assert sorted(set(before) - armed) == sorted(own), sorted(before)
        assert len(armed) == WORLD, sorted(before)
        verdict = _analyze(dumps)
        elsewhere = _collect(tmp_path / "incident", tag)
        after = _files(dumps)
        again = _analyze(dumps)  # the job's folder, collect's answers beside its dumps
        into_own = _collect(dumps, tag)  # (into the recorder's own folder: DIR/<host>/)
        assert all(p.poll() is None for p in procs), "collect must not kill the job"
    assert verdict.startswith(f"HANG: culprit rank {STUCK};"), verdict
    assert elsewhere.count("recorder (request (+ stacks sidecar))") == WORLD, elsewhere
    assert {n: after[n] for n in before} == before  # byte for byte, never written again
    assert set(after) == set(before) | {answer_name(n) for n in own}, sorted(after)
    assert again == verdict  # the same files read: the same report, word for word
    here = host_folder(socket.gethostname())
    for r in range(WORLD):  # collect copied the answers, not the rank's own dump
        got = (tmp_path / "incident" / here / f"{DUMP_PREFIX}{r}").read_bytes()
        assert got == after[answer_name(f"{DUMP_PREFIX}{r}")][0]
    assert f"\nHANG: culprit rank {STUCK};" in elsewhere, elsewhere
    # into the job's folder: collect's folder is a later snapshot of the same processes
    assert f"\nHANG: culprit rank {STUCK};" in into_own, into_own
    assert {n: _files(dumps)[n] for n in before} == before
    # (a hung rank's answer has its own dump's bytes: read once, as copies)
    assert f"\nHANG: culprit rank {STUCK};" in _analyze(dumps)
