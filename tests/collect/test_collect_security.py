"""frtrace collect on a shared machine: it runs beside a live job, often as root, among other
users' processes (issue 23). Each test is an attack or an accident seen on a real cluster:

* another user's process names a debug pipe or a dump that is a link to a file of root's;
* collect's copies must be private (0600 files, 0700 folders): dumps hold the job's data;
* a SIGUSR1 handler installed after ``frtrace.recorder.enable()`` (Lightning's SLURM requeue),
  and a stale ``recorder-<pid>.json`` whose pid now belongs to another process: neither is
  ever signalled;
* a registry directory pre-created by another user (or writable by others) is not trusted.

"Another user" is uid 65534 (nobody): files are chown'ed to it and its processes run with
``user=`` in subprocess, so those tests need root and are skipped without it. Processes are
tagged with a unique FRTRACE_TEST_JOB and collected with ``--env``; all are killed in
``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.collect.run import host_folder
from frtrace.job.env import DUMP_PREFIX

ROOT = Path(__file__).resolve().parents[2]
FAKE = (ROOT / "tests" / "collect" / "fake_rank.py").read_text()
NOBODY = 65534
READY_S = 60.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="simulates another user (chown, setuid): needs root",
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder under the temp dir that another user can enter (pytest's tmp_path is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="frtrace-sec-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _other_users_dir(parent: Path, name: str, mode: int = 0o755) -> Path:
    path = parent / name
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    return path


def _root_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


_pythons: dict[int, str | None] = {}


def _python_for(uid: int) -> str:
    """A Python interpreter that ``uid`` may run (root's own may sit under /root)."""
    if uid not in _pythons:
        _pythons[uid] = None
        candidates = [sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3"]
        for exe in dict.fromkeys(c for c in candidates if c):
            try:
                run = subprocess.run(
                    [exe, "-c", "pass"],
                    user=uid,
                    group=uid,
                    extra_groups=[],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if run.returncode == 0:
                _pythons[uid] = exe
                break
    exe = _pythons[uid]
    if exe is None:
        pytest.skip(f"no Python interpreter that uid {uid} may run")
    return exe


@contextmanager
def fake_rank(
    args: list[str], env: dict[str, str], *, uid: int | None = None
) -> Iterator[subprocess.Popen[str]]:
    """Start tests/collect/fake_rank.py (as ``uid`` when given); yield it once ready."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RANK": "0", "LOCAL_RANK": "0"}
    full.update(env)
    kwargs: dict[str, object] = {}
    if uid is not None:
        kwargs = {"user": uid, "group": uid, "extra_groups": []}
    exe = _python_for(uid) if uid is not None else sys.executable
    proc = subprocess.Popen(
        [exe, "-c", FAKE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        cwd="/",
        **kwargs,  # type: ignore[call-overload]
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.strip() == "ready":
                break
            if not line and proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"fake rank exited {proc.returncode}: {err[-2000:]}")
        yield proc
    finally:
        proc.kill()
        proc.communicate(timeout=20)


def _collect(out: Path, tag: str, *extra: str) -> tuple[int, str]:
    args = ["collect", str(out), "--env", f"FRTRACE_TEST_JOB={tag}", "--no-pyspy"]
    result = CliRunner().invoke(app, [*args, "--no-analyze", "--timeout", "3", *extra])
    return result.exit_code, result.output


def _everything_under(folder: Path) -> bytes:
    if not folder.exists():
        return b""
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


# --- 1. another user's links, and private copies ------------------------------------------------


@needs_root
def test_collect_leaves_other_users_processes_alone_by_default(shared: Path) -> None:
    """As root, a rank process of another user (its debug pipe a link to root's file) is not
    collected at all without --any-user: nothing is written anywhere."""
    victim = _root_file(shared / "victim", "precious\n", 0o644)
    evil = _other_users_dir(shared, "evil")
    tag = uuid.uuid4().hex
    env = {"FRTRACE_TEST_JOB": tag, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{evil}/pipe_"}
    args = ["pipe", "linkpipe", f"{evil}/pipe_", f"{evil}/dump_", "0", str(victim)]
    with fake_rank(args, env, uid=NOBODY):
        code, output = _collect(shared / "out", tag)
    assert victim.read_text() == "precious\n", "collect wrote through another user's link"
    assert code == 2, output
    assert "no rank process found" in output
    assert "1 rank process of other users left alone (--any-user" in output, output


@needs_root
def test_collect_any_user_never_writes_through_a_link_named_like_the_pipe(shared: Path) -> None:
    """--any-user: the debug pipe is written only when it is a real FIFO of the rank's user,
    never through a symbolic link (here to a root-owned file)."""
    victim = _root_file(shared / "victim", "precious\n", 0o644)
    evil = _other_users_dir(shared, "evil")
    tag = uuid.uuid4().hex
    env = {"FRTRACE_TEST_JOB": tag, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{evil}/pipe_"}
    args = ["pipe", "linkpipe", f"{evil}/pipe_", f"{evil}/dump_", "0", str(victim)]
    with fake_rank(args, env, uid=NOBODY) as proc:
        code, output = _collect(shared / "out", tag, "--any-user")
        assert proc.poll() is None
    assert victim.read_text() == "precious\n", "collect wrote through a link named like the pipe"
    assert code == 0, output
    assert "nccl_pipe: pipe_0.pipe is a symbolic link, not a FIFO: not written" in output, output


@needs_root
@pytest.mark.parametrize("action", ["symlink", "rename"])
def test_collect_any_user_never_copies_a_file_the_rank_does_not_own(
    shared: Path, action: str
) -> None:
    """--any-user: after the pipe is written, the rank swaps its dump for a link to a root-only
    file, or moves a root-only file there: neither is copied into the output folder."""
    evil = _other_users_dir(shared, "evil")
    secret = _root_file((shared if action == "symlink" else evil) / "secret", "TOPSECRET\n")
    tag = uuid.uuid4().hex
    env = {
        "FRTRACE_TEST_JOB": tag,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{evil}/pipe_",
        "TORCH_FR_DUMP_TEMP_FILE": f"{evil}/dump_",
    }
    args = ["pipe", action, f"{evil}/pipe_", f"{evil}/dump_", "0", str(secret)]
    out = shared / "out"
    with fake_rank(args, env, uid=NOBODY):
        code, output = _collect(out, tag, "--any-user")
    assert b"TOPSECRET" not in _everything_under(out), "a root-only file was copied"
    assert code == 0, output
    why = (
        "is a symbolic link" if action == "symlink" else f"owned by uid 0, not the rank's {NOBODY}"
    )
    assert f"dump_0 {why}: not copied" in output, output


@pytest.mark.parametrize("who", ["same user", "another user"])
def test_collect_writes_private_copies(shared: Path, tmp_path: Path, who: str) -> None:
    """What collect writes holds the job's data: folders 0700, files 0600, whatever the umask
    (here through the NCCL debug pipe of a rank of this user, or of another user's with
    --any-user, as root)."""
    if who == "another user" and os.geteuid() != 0:
        pytest.skip("simulates another user (setuid): needs root")
    uid = NOBODY if who == "another user" else None
    job = _other_users_dir(shared, "job") if uid is not None else tmp_path / "job"
    job.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex
    env = {
        "FRTRACE_TEST_JOB": tag,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{job}/pipe_",
        "TORCH_FR_DUMP_TEMP_FILE": f"{job}/dump_",
    }
    out = tmp_path / "new" / "incident"
    old = os.umask(0)
    try:
        with fake_rank(["pipe", "write", f"{job}/pipe_", f"{job}/dump_", "0"], env, uid=uid):
            extra = ("--any-user",) if uid is not None else ()
            code, output = _collect(out, tag, *extra)
    finally:
        os.umask(old)
    assert code == 0, output
    assert "nccl_pipe (pipe_0.pipe)" in output, output
    here = out / host_folder(socket.gethostname())  # collect writes DIR/<host>/
    dump = here / f"{DUMP_PREFIX}0"
    assert dump.read_bytes() == b"DUMP OF RANK 0"
    for folder in (here, out, out.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for path in here.iterdir():
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600, path


@pytest.mark.parametrize("where", ["host", "snap1"])
def test_collect_never_writes_through_a_link_at_its_folders(tmp_path: Path, where: str) -> None:
    """A link at ``DIR/<host>`` (or ``DIR/snap1`` of ``--twice``), planted before collect runs,
    to a folder only root may write: collect refuses it in one line, writes nothing there."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    job = tmp_path / "job"
    job.mkdir()
    tag = uuid.uuid4().hex
    env = {
        "FRTRACE_TEST_JOB": tag,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{job}/pipe_",
        "TORCH_FR_DUMP_TEMP_FILE": f"{job}/dump_",
    }
    out = tmp_path / "incident"
    out.mkdir()
    host = host_folder(socket.gethostname())
    link = out / host if where == "host" else out / "snap1"
    os.symlink(victim, link)
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)  # (another user's, in a shared folder)
    with fake_rank(["pipe", "write", f"{job}/pipe_", f"{job}/dump_", "0"], env):
        extra = ("--twice", "0.5") if where == "snap1" else ()
        code, output = _collect(out, tag, *extra)
    assert code == 2, output
    assert "symbolic link" in output and str(link) in output, output
    assert not list(victim.iterdir())


# --- 2. SIGUSR1 never reaches a handler that is not the recorder's ------------------------------


def _job_env(tag: str, runtime: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "RANK"))
    }
    env.update(FRTRACE_TEST_JOB=tag, FRTRACE_RUNTIME_DIR=str(runtime), PYTHONPATH=str(ROOT))
    return env


def test_collect_does_not_signal_a_recorder_whose_handler_was_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """frtrace.recorder enabled, then the script installs its own SIGUSR1 handler (Lightning's
    SLURM requeue exits on it): collect gets the dump without the signal; the job lives."""
    pytest.importorskip("torch")
    runtime = tmp_path / "rt"
    monkeypatch.setenv("FRTRACE_RUNTIME_DIR", str(runtime))
    tag = uuid.uuid4().hex
    dumps = tmp_path / "dumps"
    with fake_rank(["recorder-then-handler", str(dumps)], _job_env(tag, runtime)) as proc:
        code, output = _collect(tmp_path / "out", tag)
        time.sleep(0.5)
        assert proc.poll() is None, f"the job exited ({proc.returncode}): it was signalled"
    assert code == 0, output
    assert "recorder (request (+ stacks sidecar))" in output, output
    here = tmp_path / "out" / host_folder(socket.gethostname())
    assert (here / f"{DUMP_PREFIX}0").stat().st_size > 0


@pytest.mark.parametrize("entry", ["older recorder", "earlier process"])
def test_collect_does_not_trust_a_stale_registry_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """A process whose pid matches a recorder-<pid>.json left by a dead process (killed, so
    it never cleaned up) is not signalled (here its own SIGUSR1 handler exits), and the table
    says why; an entry of an earlier process whose socket nobody listens on is removed as
    stale before anything is asked (the registry's cleanup)."""
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("FRTRACE_RUNTIME_DIR", str(runtime))
    tag = uuid.uuid4().hex
    with fake_rank(["signal-exit"], _job_env(tag, runtime) | {"RANK": "0"}) as proc:
        doc: dict[str, object] = {
            "pid": proc.pid,
            "dump_dir": str(tmp_path),
            "fmt": "pickle",
            "stacks": True,
            "signals": [10],
            "rank_env": "0",
        }
        if entry == "earlier process":
            doc.update(format="frtrace-recorder", version=2, start_time="1")
            doc["socket"] = f"recorder-{proc.pid}.sock"
        (runtime / f"recorder-{proc.pid}.json").write_text(json.dumps(doc))
        code, output = _collect(tmp_path / "out", tag)
        time.sleep(0.5)
        assert proc.poll() is None, f"the process exited ({proc.returncode}): it was signalled"
    assert code == 0, output
    if entry == "earlier process":  # (nothing listens on its socket: cleaned up as stale)
        assert not (runtime / f"recorder-{proc.pid}.json").exists()
        assert "recorder: frtrace.recorder not enabled in it" in output, output
        return
    assert "written by an older frtrace.recorder" in output and "not asked" in output, output


# --- 3. the registry directory is trusted only when it is the user's own -----------------------


@pytest.mark.parametrize("owner", ["same user, mode 0777", "another user, mode 0777"])
def test_collect_refuses_a_registry_dir_others_can_write(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch, owner: str
) -> None:
    """A registry directory writable by others (or another user's) could name any dump dir:
    here one where another user's file appears as rank 0's dump. collect does not read it and
    says which directory and what to do."""
    other = owner.startswith("another")
    if other and os.geteuid() != 0:
        pytest.skip("simulates another user (chown): needs root")
    runtime = _other_users_dir(shared, "rt", 0o777) if other else tmp_path / "rt"
    if not other:
        runtime.mkdir()
        runtime.chmod(0o777)
    planted = shared / "planted"
    planted.mkdir()
    monkeypatch.setenv("FRTRACE_RUNTIME_DIR", str(runtime))
    tag = uuid.uuid4().hex
    with fake_rank(["signal-noop"], _job_env(tag, runtime) | {"RANK": "0"}) as proc:
        doc = {"pid": proc.pid, "dump_dir": str(planted), "signals": [10], "rank_env": "0"}
        reg = runtime / f"recorder-{proc.pid}.json"
        reg.write_text(json.dumps(doc))
        if other:
            os.chown(reg, NOBODY, NOBODY)
        plant = threading.Timer(
            1.0, lambda: (planted / f"{DUMP_PREFIX}0").write_text("SUBSTITUTED")
        )
        plant.start()
        try:
            code, output = _collect(tmp_path / "out", tag)
        finally:
            plant.cancel()
            plant.join()
    assert b"SUBSTITUTED" not in _everything_under(tmp_path / "out"), "the dump was substituted"
    assert code == 0, output
    text = " ".join(output.split())
    assert f"recorder: {runtime}" in text and "not trusted" in text, output
