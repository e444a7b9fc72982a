"""frtrace.recorder's registry on a shared machine (issue 23): where ``frtrace collect`` finds an
enabled recorder, and the request socket it asks it to dump on (no signal).

The registry directory is trusted only when it is the user's own and nobody else can write
to it; otherwise the recorder warns in one line and does not register: the training job
never fails for it.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import warnings
from pathlib import Path

import pytest

from frtrace import recorder
from frtrace.job.registry import REGISTRY_ENV, process_start_time

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(autouse=True)
def _always_disabled() -> object:
    yield None
    recorder.disable()


def test_recorder_refuses_a_registry_dir_writable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry directory mode 0777 (anyone could plant recorder-<pid>.json files in it):
    one warning naming it and what to do; no registration; recording itself goes on."""
    runtime = tmp_path / "rt"
    runtime.mkdir()
    runtime.chmod(0o777)
    monkeypatch.setenv(REGISTRY_ENV, str(runtime))
    with pytest.warns(RuntimeWarning) as caught:
        st = recorder.enable(tmp_path / "dumps", signals=(), on_exception=False)
    text = str(caught[-1].message)
    assert str(runtime) in text and "writable by group or others" in text, text
    assert "\n" not in text
    assert st.registry is None
    assert os.listdir(runtime) == []
    assert os.environ["TORCH_FR_BUFFER_SIZE"]  # enabled all the same


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")
def test_recorder_refuses_a_registry_dir_of_another_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry directory owned by another user, even mode 0700: not this user's."""
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 65534, 65534)
    monkeypatch.setenv(REGISTRY_ENV, str(runtime))
    with pytest.warns(RuntimeWarning, match="owned by uid 65534"):
        st = recorder.enable(tmp_path / "dumps", signals=(), on_exception=False)
    assert st.registry is None
    assert os.listdir(runtime) == []


def test_recorder_registers_privately_with_its_start_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry directory is created 0700 and the entry 0600 whatever the umask; the
    entry names this very process (pid, start time, RANK) and its request socket; disable()
    removes both."""
    runtime = tmp_path / "new" / "rt"
    monkeypatch.setenv(REGISTRY_ENV, str(runtime))
    monkeypatch.setenv("RANK", "5")
    old = os.umask(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            st = recorder.enable(tmp_path / "dumps", signals=(), on_exception=False)
    finally:
        os.umask(old)
    assert st.registry == runtime / f"recorder-{os.getpid()}.json"
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    assert stat.S_IMODE(st.registry.stat().st_mode) == 0o600
    doc = json.loads(st.registry.read_text())
    assert doc["pid"] == os.getpid()
    assert doc["start_time"] == process_start_time(os.getpid()) is not None
    assert doc["rank_env"] == "5"
    sock = runtime / doc["socket"]
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    recorder.disable()
    assert os.listdir(runtime) == []


def test_recorder_dumps_on_a_request_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What frtrace collect does instead of a signal: a connection to the request socket,
    ``dump``; the recorder dumps (stacks sidecar too) and answers with the two paths."""
    pytest.importorskip("torch")
    runtime = tmp_path / "rt"
    monkeypatch.setenv(REGISTRY_ENV, str(runtime))
    monkeypatch.setenv("RANK", "0")
    st = recorder.enable(tmp_path / "dumps", signals=(), on_exception=False, verbose=False)
    assert st.registry is not None
    doc = json.loads(st.registry.read_text())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(runtime / doc["socket"]))
        conn.sendall(b"dump\n")
        reply = json.loads(conn.makefile("rb").readline())
    assert reply["ok"] is True, reply
    # (beside the rank's own dump, never over it: frtrace.job.answers)
    assert Path(reply["dump"]) == tmp_path.resolve() / "dumps" / ".comm_lib_trace_rank_0.request"
    assert Path(reply["dump"]).stat().st_size > 0
    assert Path(reply["stacks"]).name == ".stacks_rank_0.request.json"
    side = json.loads(Path(reply["stacks"]).read_text())
    assert side["trigger"] == {"kind": "on_demand", "detail": "frtrace collect"}


def _dead_pid() -> int:
    """A pid with no process now (a child that has exited and been reaped)."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def _stale_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # bound, then closed: the file stays, nobody listens


def test_a_killed_jobs_entries_go_when_the_next_job_registers_or_collect_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recorder-<pid>.{json,sock} of a pid that is gone, or reused by a later process, are
    removed; a live recorder's, and one whose socket someone listens on, are kept."""
    from frtrace.collect.run import CollectOptions, collect
    from frtrace.job.registry import clean

    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv(REGISTRY_ENV, str(runtime))
    dead, reused, elsewhere = _dead_pid(), os.getppid(), _dead_pid()
    for pid, start in ((dead, "123"), (reused, "1"), (elsewhere, "77")):
        (runtime / f"recorder-{pid}.json").write_text(json.dumps({"pid": pid, "start_time": start}))
        _stale_socket(runtime / f"recorder-{pid}.sock")
    (runtime / f"recorder-{elsewhere}.sock").unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # another pid namespace's
    listener.bind(str(runtime / f"recorder-{elsewhere}.sock"))
    listener.listen(1)
    assert process_start_time(reused) not in (None, "1")  # alive, started later: reused
    st = recorder.enable(tmp_path / "dumps", signals=())
    assert st.registry is not None
    names = sorted(p.name for p in runtime.iterdir())
    mine = [f"recorder-{os.getpid()}.json", f"recorder-{os.getpid()}.sock"]
    theirs = [f"recorder-{elsewhere}.json", f"recorder-{elsewhere}.sock"]
    assert names == sorted(mine + theirs)
    listener.close()  # nobody listens any more: stale too
    assert clean() == theirs
    assert sorted(p.name for p in runtime.iterdir()) == sorted(mine)  # the live one stays
    recorder.disable()
    again = _dead_pid()
    (runtime / f"recorder-{again}.json").write_text(json.dumps({"pid": again}))
    tag = {"FRTRACE_TEST_NO_SUCH_JOB": str(again)}  # no process of another test is collected
    result = collect(tmp_path / "out", CollectOptions(match_env=tag, pyspy=False))
    assert result.ranks == ()
    assert not (runtime / f"recorder-{again}.json").exists()
