"""collect's requests never overwrite a dump the job or its stall watch wrote (``collect/keep.py``).

The recorder's request socket is served here by this very process (its registry entry and the
recorder's answer, as ``frtrace.recorder`` gives them); the NCCL debug pipe by
``tests/collect/fake_rank.py`` (it writes ``<prefix><rank>`` as NCCL does). Where the file the
answer would go to holds the rank's own dump, it is taken as it is and the rank keeps it; an
answer to collect, or an earlier process's file, is asked over.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.base.files import open_out_dir, replace_file
from frtrace.cli import app
from frtrace.collect import ask, keep
from frtrace.collect.procs import RankProcess
from frtrace.collect.run import host_folder
from frtrace.job import registry as reg
from frtrace.job.env import DUMP_PREFIX, STACKS_PREFIX
from frtrace.job.sidecar import capture_current_stacks, write_stacks
from tests.collect.test_collect_security import fake_rank

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@contextmanager
def recorder_here(dump_dir: Path) -> Iterator[tuple[RankProcess, list[bytes]]]:
    """This process registered as rank 0's recorder, dumping into ``dump_dir`` when asked (as
    ``frtrace.recorder`` answers collect); yields the rank and the answers written."""
    answers: list[bytes] = []
    done = threading.Event()

    def do_dump() -> tuple[Path, Path | None]:
        body = f"ANSWER {len(answers)}".encode()
        answers.append(body)
        path, side = dump_dir / f"{DUMP_PREFIX}0", dump_dir / f"{STACKS_PREFIX}0.json"
        replace_file(path, body)
        write_stacks(side, capture_current_stacks("on_demand", "frtrace collect", rank=0))
        return path, side

    registration = reg.register({"dump_dir": str(dump_dir), "fmt": "pickle", "signals": []})
    assert registration is not None

    def serve() -> None:
        while not done.is_set():
            ready, _, _ = select.select([registration.listener], [], [], 0.1)
            if ready:
                conn, _ = registration.listener.accept()
                reg.answer_request(conn, do_dump)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    me = os.getpid()
    proc = RankProcess(
        pid=me,
        rank=0,
        local_rank=0,
        cmdline="test",
        env={"RANK": "0", reg.REGISTRY_ENV: os.environ[reg.REGISTRY_ENV]},
        uid=os.geteuid(),
        start_time=reg.process_start_time(me),
    )
    try:
        yield proc, answers
    finally:
        done.set()
        server.join(timeout=5)
        registration.close()


def _dumped_by_itself(dump_dir: Path, body: bytes, detail: str, pid: int | None = None) -> None:
    replace_file(dump_dir / f"{DUMP_PREFIX}0", body)
    doc = capture_current_stacks("on_demand", detail, rank=0)
    if pid is not None:
        doc["pid"] = pid
    write_stacks(dump_dir / f"{STACKS_PREFIX}0.json", doc)


@pytest.fixture
def dump_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(reg.REGISTRY_ENV, str(tmp_path / "registry"))
    monkeypatch.setenv("RANK", "0")
    folder = tmp_path / "fr"
    folder.mkdir(mode=0o700)
    return folder


def test_the_watchs_dump_is_taken_never_asked_over(dump_dir: Path, tmp_path: Path) -> None:
    """The stall watch's dump (and sidecar) where the recorder would answer: not asked, both
    copied as they are, the rank's files unchanged; the table says when it was written."""
    _dumped_by_itself(dump_dir, b"THE WATCH'S DUMP", "op pending 300 s in all_reduce #7")
    before = {p.name: p.read_bytes() for p in dump_dir.iterdir()}
    with recorder_here(dump_dir) as (proc, answers), open_out_dir(tmp_path / "out") as out:
        got = ask.recorder(proc, out, 5.0)
    assert answers == []
    assert {p.name: p.read_bytes() for p in dump_dir.iterdir()} == before
    assert got.ok and got.written_ns is not None
    assert got.detail.startswith("its own dump of ")
    assert "(on demand: op pending 300 s in all_reduce #7); not asked" in got.detail
    copied = {Path(p).name: Path(p).read_bytes() for p in got.paths}
    assert copied == before


@pytest.mark.parametrize("trigger", ["signal", "exception"])
def test_a_signals_or_an_exceptions_dump_is_kept_too(
    dump_dir: Path, tmp_path: Path, trigger: str
) -> None:
    replace_file(dump_dir / f"{DUMP_PREFIX}0", b"ITS OWN")
    doc = capture_current_stacks(trigger, "SIGUSR1" if trigger == "signal" else "ValueError")  # type: ignore[arg-type]
    write_stacks(dump_dir / f"{STACKS_PREFIX}0.json", doc)
    with recorder_here(dump_dir) as (proc, answers), open_out_dir(tmp_path / "out") as out:
        got = ask.recorder(proc, out, 5.0)
    assert answers == [] and (dump_dir / f"{DUMP_PREFIX}0").read_bytes() == b"ITS OWN"
    assert got.ok and "not asked" in got.detail


def test_collects_own_answer_and_an_earlier_process_dump_are_asked_over(
    dump_dir: Path, tmp_path: Path
) -> None:
    """No dump yet: asked. Again (``--twice``): the file is collect's answer, asked over. A
    dump whose sidecar names another process (a run before this one): asked over."""
    with recorder_here(dump_dir) as (proc, answers):
        for i in range(2):
            with open_out_dir(tmp_path / f"snap{i}") as out:
                got = ask.recorder(proc, out, 5.0)
            assert got.ok and got.detail.startswith("request"), got.detail
            assert got.written_ns is None
        _dumped_by_itself(dump_dir, b"AN EARLIER RUN", "op pending 300 s", pid=1)
        with open_out_dir(tmp_path / "snap2") as out:
            got = ask.recorder(proc, out, 5.0)
    assert got.ok and got.detail.startswith("request")
    assert answers == [b"ANSWER 0", b"ANSWER 1", b"ANSWER 2"]
    assert (dump_dir / f"{DUMP_PREFIX}0").read_bytes() == b"ANSWER 2"


def test_a_dump_without_a_sidecar_is_the_processes_own_if_written_since_it_started(
    dump_dir: Path, tmp_path: Path
) -> None:
    """No sidecar says who wrote it: written since the process started, its own (kept);
    before, an earlier process's (asked over)."""
    path = dump_dir / f"{DUMP_PREFIX}0"
    with recorder_here(dump_dir) as (proc, answers):
        replace_file(path, b"NO SIDECAR")
        with open_out_dir(tmp_path / "a") as out:
            kept = ask.recorder(proc, out, 5.0)
        os.utime(path, (1_000_000_000, 1_000_000_000))  # (2001: before this process)
        with open_out_dir(tmp_path / "b") as out:
            asked = ask.recorder(proc, out, 5.0)
    assert kept.ok and "not asked" in kept.detail and "no sidecar says by what" in kept.detail
    assert asked.ok and asked.detail.startswith("request") and answers == [b"ANSWER 0"]


def _collect(out: Path, tag: str) -> str:
    args = ["collect", str(out), "--env", f"FRTRACE_TEST_JOB={tag}", "--no-pyspy"]
    result = CliRunner().invoke(app, [*args, "--no-analyze", "--timeout", "3"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_the_nccl_pipe_is_not_written_over_the_jobs_own_dump(tmp_path: Path) -> None:
    """NCCL's own dump (on a timeout) at ``<prefix><rank>``: collect does not write into the
    pipe, copies that dump, and the rank's file stays. Without one it asks; and it asks again
    over its own answer (``--twice``)."""
    tag = uuid.uuid4().hex
    stem, prefix = tmp_path / "pipe_rank_", tmp_path / "trace_rank_"
    env = {
        "FRTRACE_TEST_JOB": tag,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(stem),
        "TORCH_FR_DUMP_TEMP_FILE": str(prefix),
    }
    here = host_folder(socket.gethostname())
    target = Path(f"{prefix}0")
    with fake_rank(["pipe", "write", str(stem), str(prefix), "0"], env):
        first = _collect(tmp_path / "one", tag)
        second = _collect(tmp_path / "two", tag)
        assert target.read_bytes() == b"DUMP OF RANK 0"
        time.sleep(0.05)
        target.write_bytes(b"NCCL'S OWN DUMP ON A TIMEOUT")  # (the job, since it started)
        third = _collect(tmp_path / "three", tag)
    assert "nccl_pipe (pipe_rank_0.pipe)" in first and "nccl_pipe (pipe_rank_0.pipe)" in second
    assert "nccl_pipe (its own dump of " in third and "not asked" in third, third
    assert target.read_bytes() == b"NCCL'S OWN DUMP ON A TIMEOUT"
    got = tmp_path / "three" / here / f"{DUMP_PREFIX}0"
    assert got.read_bytes() == b"NCCL'S OWN DUMP ON A TIMEOUT"


def test_answers_are_remembered_by_their_version_only(tmp_path: Path) -> None:
    """An answer collect got is that version of the file: rewritten, it is no answer."""
    path = tmp_path / "f"
    path.write_bytes(b"one")
    keep.answered(path)
    stamp = keep._stamp(path)
    assert stamp is not None and stamp[0] in keep._answers
    time.sleep(0.02)
    path.write_bytes(b"two, longer")
    again = keep._stamp(path)
    assert again is not None and again[0] not in keep._answers
