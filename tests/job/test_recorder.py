"""frtrace.recorder in real Gloo processes: a hung job dumps on SIGUSR1; frtrace names the rank."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace import recorder
from frtrace.cli import app
from frtrace.job.env import DUMP_PREFIX
from tests.conftest import SERIAL

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = SERIAL  # real 4-rank jobs
HUNG_FOR_S = 3.0  # how long the job has been hung when its dumps are taken
JOB = ROOT / "tests" / "job" / "recorder_job.py"
WORLD = 4
STUCK = 2
DEADLINE_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(rank: int, world: int, port: int, out: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for name in list(env):
        if name.startswith(("TORCH_FR_", "TORCH_NCCL_")):
            del env[name]
    return subprocess.Popen(
        [sys.executable, str(JOB), str(rank), str(world), str(port), str(out), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _wait_for_line(proc: subprocess.Popen[str], text: str, deadline: float) -> None:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == text:
            return
        if not line and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"rank exited {proc.returncode} before {text!r}: {err[-2000:]}")
    pytest.fail(f"no {text!r} within {DEADLINE_S} s")


def test_importing_the_recorder_does_not_import_torch() -> None:
    """`import frtrace.recorder` leaves torch unimported (a training script pays nothing)."""
    code = "import sys, frtrace.recorder; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT).returncode == 0


def test_enable_sets_the_recording_environment_and_disable_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """enable() sets buffer size and dump prefix without overriding the user's own values."""
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "77")
    recorder.enable(tmp_path, signals=(), on_exception=False)
    try:
        # the user's value wins: under its old name too (torch 2.8+ reads the new one first)
        assert "TORCH_FR_BUFFER_SIZE" not in os.environ
        assert os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "77"
        assert os.environ["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path.resolve() / DUMP_PREFIX)
        assert recorder.dump_path(3) == tmp_path.resolve() / f"{DUMP_PREFIX}3"
    finally:
        recorder.disable()
    assert "TORCH_FR_BUFFER_SIZE" not in os.environ
    assert recorder.state() is None


def test_enable_sets_only_the_names_this_torch_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.8+ warns that the old names are deprecated: enable() sets only the new ones
    where the installed torch is 2.8 or newer, and only the old ones for older torch."""
    from frtrace.job import recorder as job_recorder

    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", raising=False)
    for version, new in (((2, 13), True), ((2, 4), False)):
        monkeypatch.setattr(job_recorder, "installed_torch", lambda v=version: v)
        recorder.enable(tmp_path, signals=(), on_exception=False)
        try:
            assert ("TORCH_FR_BUFFER_SIZE" in os.environ) is new
            assert ("TORCH_NCCL_TRACE_BUFFER_SIZE" in os.environ) is not new
            assert ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in os.environ) is not new
        finally:
            recorder.disable()


def test_dump_before_enable_is_a_clear_error() -> None:
    """dump() without enable() says what to call first."""
    with pytest.raises(RuntimeError, match=r"enable\(\)"):
        recorder.dump()


def test_unhandled_exception_writes_the_dump(tmp_path: Path) -> None:
    """A rank that dies of an exception leaves its dump behind (Gloo has no dump on error)."""
    proc = _spawn(0, 1, _free_port(), tmp_path, "raise")
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 1
    assert "RuntimeError: the training step failed" in err
    assert "frtrace.recorder: wrote" in err and "unhandled RuntimeError" in err
    result = CliRunner().invoke(app, ["summary", "-d", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 of 1 ranks loaded" in result.output


def test_hung_gloo_job_dumps_on_sigusr1_and_analyze_names_the_rank(tmp_path: Path) -> None:
    """4 real Gloo ranks; rank 2 stalls in host code; SIGUSR1 dumps all; analyze names rank 2."""
    port = _free_port()
    procs = [_spawn(r, WORLD, port, tmp_path, "hang") for r in range(WORLD)]
    try:
        deadline = time.monotonic() + DEADLINE_S
        for proc in procs:
            _wait_for_line(proc, "ready", deadline)
        # A job is hung once it has waited: dumps written milliseconds into a wait show a
        # running job (analysis/facts/capture.py reads the recorder's dump time).
        time.sleep(HUNG_FOR_S)
        for proc in procs:
            proc.send_signal(signal.SIGUSR1)
        expected = {tmp_path / f"{DUMP_PREFIX}{r}" for r in range(WORLD)}
        while time.monotonic() < deadline and not all(p.exists() for p in expected):
            time.sleep(0.05)
        assert all(p.exists() for p in expected), sorted(tmp_path.iterdir())
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.communicate(timeout=10)
    result = CliRunner().invoke(app, ["analyze", "-d", str(tmp_path)])
    assert result.exit_code == 1, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("HANG: culprit rank 2;"), result.output
    assert "rank 2 never joined all_reduce" in result.output


def test_dump_never_writes_through_a_link_planted_in_the_dump_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dump directory is often shared: a link planted under the temporary name of the
    next dump (it used to be predictable: the pid) is never written through."""
    monkeypatch.setenv("FRTRACE_RUNTIME_DIR", str(tmp_path / "rt"))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    name = f"{DUMP_PREFIX}0"
    (dumps / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    recorder.enable(dumps, signals=(), on_exception=False, verbose=False)
    try:
        path = recorder.dump(rank=0)
    finally:
        recorder.disable()
    assert victim.read_bytes() == b"precious\n", "the dump was written through the link"
    assert path == dumps.resolve() / name and path.stat().st_size > 0
    assert not path.is_symlink()


MANY_FDS = """
import os, resource, signal, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < 2048:
    print("skip: RLIMIT_NOFILE", hard, flush=True)
    sys.exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # past select()'s 1,024
import frtrace.recorder
frtrace.recorder.enable(sys.argv[1])
os.kill(os.getpid(), signal.SIGUSR1)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not any(
    n.startswith("comm_lib_trace_rank_") for n in os.listdir(sys.argv[1])
):
    time.sleep(0.2)
print(sorted(os.listdir(sys.argv[1])), flush=True)
"""


def test_a_process_with_more_than_1024_descriptors_still_dumps_on_sigusr1(tmp_path: Path) -> None:
    """(select() refuses a descriptor past 1,024: the recorder's thread died silently)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", MANY_FDS, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE_S + 30,
    )
    if run.stdout.startswith("skip:"):
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stderr[-2000:]
    assert DUMP_PREFIX in run.stdout, run.stdout + run.stderr[-2000:]  # (no RANK: _unknown_pid)


BLOCKED_IN_C = """
import ctypes, os, sys, threading, time
import frtrace.recorder
frtrace.recorder.enable(sys.argv[1])
r, w = os.pipe()
libc = ctypes.CDLL(None, use_errno=True)

def feed():  # once the dump is written, the read gets its byte
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        n.startswith("comm_lib_trace_rank_") for n in os.listdir(sys.argv[1])
    ):
        time.sleep(0.1)
    os.write(w, b"x")

threading.Thread(target=feed, daemon=True).start()
print("ready", flush=True)
buf = ctypes.create_string_buffer(1)
got = libc.read(r, buf, 1)  # C code that does not retry a call a signal interrupted
print("read", got, ctypes.get_errno(), flush=True)
"""


def test_a_dump_request_does_not_interrupt_the_system_call_a_rank_is_blocked_in(
    tmp_path: Path,
) -> None:
    """SIGUSR1 lands while the main thread is blocked in C (a read, torch.save's open on a
    slow mount): the call is restarted, never failed with EINTR (C++ does not retry it, and
    the job raised "Interrupted system call": the recorder broke the rank it observed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_IN_C, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # (in the read by now)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=DEADLINE_S + 30)
    assert "read 1 0" in out, out + err[-2000:]
    assert any(p.name.startswith(DUMP_PREFIX) for p in tmp_path.iterdir())


STOPPED = """
import os, sys, time
os.environ["RANK"] = "3"
import frtrace.recorder
frtrace.recorder.enable(sys.argv[1], signals=())

def sync_to_bucket():  # the rank's own code, where it is stuck
    r, _ = os.pipe()
    print("ready", flush=True)
    os.read(r, 1)

if sys.argv[2] == "stuck":
    sync_to_bucket()
"""


@pytest.mark.parametrize("how", ["stuck", "ends"])
def test_a_rank_stopped_by_sigterm_leaves_its_stack_and_stops_as_it_would_have(
    tmp_path: Path, how: str
) -> None:
    """The launcher stops a rank stuck in its own code: every thread's stack is written to
    traceback_rank_<r>.txt (read as the rank's stack), and the rank still dies by SIGTERM. A
    rank that ends on its own leaves no file."""
    from frtrace.pystack.discover import load_stacks

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPED, str(tmp_path), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    if how == "stuck":
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.terminate()
    _, err = proc.communicate(timeout=DEADLINE_S)
    names = sorted(p.name for p in tmp_path.iterdir())
    if how == "ends":
        assert proc.returncode == 0, err[-2000:]
        assert "traceback_rank_3.txt" not in names
        return
    assert proc.returncode == -signal.SIGTERM, err[-2000:]
    assert (tmp_path / "traceback_rank_3.txt").stat().st_mode & 0o077 == 0
    stacks = load_stacks(tmp_path)
    assert not stacks.problems
    main = [t for t in stacks.by_rank[3].threads if t.current or t.is_main]
    assert main and main[0].frames[0].function == "sync_to_bucket", stacks.by_rank[3]
