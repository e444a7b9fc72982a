"""``FRTRACE_WATCH`` with no code change: torch's import calls frtrace's entry point
(:mod:`frtrace.job.autowatch`), which does nothing unless asked, never raises, waits for the
default process group and leaves a job's own ``enable()`` alone. The hung job that reports
itself this way is in tests/job/test_watch.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import frtrace_torch_plugin
from frtrace.job import autowatch
from frtrace.job.env import DUMP_PREFIX

ROOT = Path(__file__).resolve().parents[2]


def test_torch_finds_the_entry_point() -> None:
    (ep,) = [e for e in entry_points(group="torch.backends") if e.name == "frtrace_watch"]
    assert ep.load() is frtrace_torch_plugin.load


def test_another_frtrace_on_the_path_never_breaks_torchs_import(tmp_path: Path) -> None:
    """A frtrace without frtrace.job.autowatch (an older one ahead on the path): torch still
    imports, with FRTRACE_WATCH set too; one line says there is no watch (torch raised
    'Failed to load the backend extension' while the entry point was inside the package)."""
    code = "import sys; sys.modules['frtrace.job.autowatch'] = None; import torch; print('ok')"
    for watch in ("", "30"):
        env = {**os.environ, "FRTRACE_WATCH": watch}
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(tmp_path / DUMP_PREFIX)
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180
        )
        assert (run.returncode, run.stdout) == (0, "ok\n"), run.stderr[-2000:]
        said = [ln for ln in run.stderr.splitlines() if ln.startswith("frtrace:")]
        if watch:
            assert len(said) == 1 and "FRTRACE_WATCH: not watching" in said[0], run.stderr
        else:
            assert said == [], run.stderr


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autowatch, "_started", False)
    for name in ("FRTRACE_WATCH", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("fresh")
def test_unset_it_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    before = _threads()
    autowatch.load()
    assert _threads() == before
    assert "TORCH_FR_BUFFER_SIZE" not in os.environ
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("fresh")
def test_without_a_dump_folder_it_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FRTRACE_WATCH", "30")
    autowatch.load()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "TORCH_FR_DUMP_TEMP_FILE=DIR/comm_lib_trace_rank_" in err and "not watching" in err
    assert "frtrace-autowatch" not in _threads()


@pytest.mark.usefixtures("fresh")
def test_nonsense_is_one_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FRTRACE_WATCH", "soon")
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", str(tmp_path / DUMP_PREFIX))
    with pytest.warns(RuntimeWarning, match="FRTRACE_WATCH='soon'.*not watching"):
        autowatch.load()
    assert "frtrace-autowatch" not in _threads()


@pytest.mark.usefixtures("fresh")
def test_it_never_raises_into_torch_import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> None:
        raise OSError("no threads left")

    monkeypatch.setattr(autowatch, "_load", broken)
    autowatch.load()
    assert "FRTRACE_WATCH: not watching (OSError: no threads left)" in capsys.readouterr().err


def test_the_folder_is_the_recipes() -> None:
    env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/shared/nccl/comm_lib_trace_rank_"}
    assert autowatch.dump_folder(env) == Path("/shared/nccl")
    env["TORCH_FR_DUMP_TEMP_FILE"] = "/shared/fr/comm_lib_trace_rank_"
    assert autowatch.dump_folder(env) == Path("/shared/fr")
    assert autowatch.dump_folder({"TORCH_FR_DUMP_TEMP_FILE": " "}) is None


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for name in list(full):
        if name.startswith(("TORCH_FR_", "TORCH_NCCL_")) and name not in env:
            del full[name]
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=180,
    )


def test_a_process_with_no_group_only_waits(tmp_path: Path) -> None:
    """torchrun's agent imports torch and never makes a process group: the waiting thread,
    nothing else (no dump, no registry entry, no line), and the process ends as it would."""
    run = _python(
        """
        import threading, time, torch, os
        time.sleep(1.5)
        print(sorted(t.name for t in threading.enumerate() if t.name.startswith("frtrace")))
        print(os.environ["TORCH_FR_BUFFER_SIZE"])
        """,
        {"FRTRACE_WATCH": "1", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / DUMP_PREFIX)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["['frtrace-autowatch']", "20000"], run.stdout
    assert "frtrace" not in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_job_that_enables_keeps_its_own_setup(tmp_path: Path) -> None:
    """enable(watch=...) before init_process_group, FRTRACE_WATCH also set: one watch, the
    job's (its interval), and the waiting thread gone once the group exists."""
    run = _python(
        f"""
        import threading, time
        from datetime import timedelta
        import torch, torch.distributed as dist
        import frtrace.recorder
        frtrace.recorder.enable({str(tmp_path)!r}, watch=50, verbose=False)
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        time.sleep(1.5)
        print(sorted(t.name for t in threading.enumerate() if t.name.startswith("frtrace")))
        dist.destroy_process_group()
        """,
        {"FRTRACE_WATCH": "1", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / DUMP_PREFIX)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "['frtrace-recorder', 'frtrace-watch']", run.stdout


def test_attached_after_the_group_exists(tmp_path: Path) -> None:
    """No enable(): once the default group exists, the recorder is attached (the watch, the
    registry's helper), with no signal handler of frtrace's."""
    run = _python(
        """
        import signal, threading, time
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        time.sleep(1.5)
        import frtrace.recorder
        st = frtrace.recorder.state()
        print(sorted(t.name for t in threading.enumerate() if t.name.startswith("frtrace")))
        default = signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
        print(st is not None and str(st.dump_dir), default)
        dist.destroy_process_group()
        """,
        {"FRTRACE_WATCH": "60", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / DUMP_PREFIX)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    names, where = run.stdout.strip().split("\n")
    assert names == "['frtrace-recorder', 'frtrace-watch']", run.stdout
    assert where == f"{tmp_path.resolve()} True", run.stdout
