"""The line that makes the next collect get dumps (``collect.nextdump``): right for the job's
backend and torch, and it runs as written."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from frtrace.collect import nextdump
from frtrace.collect.procs import RankProcess, gpu_open

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _ranks(**env: str) -> list[RankProcess]:
    return [
        RankProcess(pid=os.getpid(), rank=r, local_rank=r, cmdline="train.py", env=env, uid=0)
        for r in range(2)
    ]


def _job(
    monkeypatch: pytest.MonkeyPatch,
    torch: tuple[int, int] | None,
    gpu: bool | None,
    here: tuple[int, int] | None = None,
) -> None:
    monkeypatch.setattr(nextdump, "_torch_of", lambda pid: torch)
    monkeypatch.setattr(nextdump, "gpu_open", lambda pid: gpu)
    monkeypatch.setattr(nextdump, "installed_torch", lambda: here)


PREFIX = {"TORCH_FR_DUMP_TEMP_FILE": "/shared/fr dumps/comm_lib_trace_rank_"}


@pytest.mark.parametrize("gpu", [False, None], ids=["no-gpu", "cannot-see"])
def test_gloo_on_a_recent_torch_gets_the_watch(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> None:
    """Gloo (no GPU open, or none seen), torch 2.13: FRTRACE_WATCH from frtrace env for that
    torch, into the job's dump folder (quoted), in the shell that starts the job."""
    _job(monkeypatch, (2, 13), gpu)
    nt = nextdump.next_time(_ranks(**PREFIX))
    assert nt is not None and nt.line is not None
    assert nt.line == ("eval \"$(frtrace env --dir '/shared/fr dumps' --torch 2.13 --watch 300)\"")
    assert nt.job == "Gloo (no GPU open), torch 2.13 (the ranks' own)"
    assert "shell that starts the job" in nt.where
    assert nt.needs == "the job's Python able to import frtrace (pip install frtrace)"


def test_gloo_before_the_watch_gets_enable_in_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.4 has no backend entry point for the watch: enable() in the script."""
    _job(monkeypatch, (2, 4), False)
    nt = nextdump.next_time(_ranks(**PREFIX))
    assert nt is not None
    assert nt.line == "import frtrace.recorder; frtrace.recorder.enable('/shared/fr dumps')"
    assert nt.where == "in the training script, before init_process_group"


@pytest.mark.parametrize("torch", [(2, 4), (2, 13)])
def test_nccl_gets_its_debug_pipe(monkeypatch: pytest.MonkeyPatch, torch: tuple[int, int]) -> None:
    """A GPU open (NCCL): the recipe for the job's torch and the pipe collect writes into."""
    _job(monkeypatch, torch, True)
    nt = nextdump.next_time(_ranks())
    assert nt is not None and nt.line is not None
    folder = f"/tmp/frtrace_dumps-{_ranks()[0].uid}"
    v = f"{torch[0]}.{torch[1]}"
    assert nt.line == (
        f'eval "$(frtrace env --dir {folder} --torch {v})"; '
        f"export TORCH_NCCL_DEBUG_INFO_PIPE_FILE={folder}/pipe_rank_"
    )
    assert nt.job.startswith("NCCL")


def test_a_torch_without_a_flight_recorder_gets_no_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _job(monkeypatch, (2, 1), False)
    nt = nextdump.next_time(_ranks())
    assert nt is not None and nt.line is None and nt.needs is not None and "2.2+" in nt.needs


def test_torch_unknown_gets_the_watch_said_to_need_2_5(monkeypatch: pytest.MonkeyPatch) -> None:
    """No version from the rank, none installed here: the watch's line without --torch."""
    _job(monkeypatch, None, False)
    nt = nextdump.next_time(_ranks(**PREFIX))
    assert nt is not None and nt.line is not None and "--torch" not in nt.line
    assert nt.needs is not None and "torch 2.5+" in nt.needs


def test_the_torch_installed_here_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the torch installed here known: frtrace env picks it itself (no --torch)."""
    _job(monkeypatch, None, False, here=(2, 13))
    nt = nextdump.next_time(_ranks(**PREFIX))
    assert nt is not None and nt.line is not None and "--torch" not in nt.line
    assert nt.job.endswith("torch 2.13 (installed here)")


def test_the_watch_set_without_frtrace_in_the_job_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    _job(monkeypatch, (2, 13), False)
    nt = nextdump.next_time(_ranks(FRTRACE_WATCH="300", **PREFIX))
    assert nt is not None and nt.needs is not None and "FRTRACE_WATCH is set" in nt.needs


def test_no_line_where_a_recorder_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank runs frtrace.recorder (it gave no dump: the table says why): no setting helps."""
    _job(monkeypatch, (2, 13), False)
    assert nextdump.next_time(_ranks(), [False, True]) is None
    assert nextdump.next_time([]) is None


def test_the_torch_of_a_rank_is_read_from_its_process() -> None:
    """A process that imported torch: its version.py's version, as torch says it."""
    pytest.importorskip("torch")
    code = "import torch, sys; print(torch.__version__, flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        said = proc.stdout.readline().split("+")[0].split(".")
        assert nextdump._torch_of(proc.pid) == (int(said[0]), int(said[1]))
        assert gpu_open(proc.pid) is False
        assert nextdump._torch_of(os.getpid()) in (None, (int(said[0]), int(said[1])))
    finally:
        proc.kill()
        proc.communicate(timeout=20)


def test_the_watch_line_runs_as_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The line, run by bash with frtrace on PATH: the job's environment then has the watch,
    the recording and the dump folder the line names."""
    pytest.importorskip("torch")
    folder = tmp_path / "fr dumps"
    _job(monkeypatch, (2, 13), False)
    procs = _ranks(TORCH_FR_DUMP_TEMP_FILE=f"{folder}/comm_lib_trace_rank_")
    nt = nextdump.next_time(procs)
    assert nt is not None and nt.line is not None
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "frtrace").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m frtrace "$@"\n'
    )
    (shim / "frtrace").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"}
    env = {k: v for k, v in env.items() if not k.startswith(("TORCH_", "FRTRACE_"))}
    out = subprocess.run(
        ["bash", "-c", f"{nt.line} && env"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert got["FRTRACE_WATCH"] == "300"
    assert got["TORCH_FR_DUMP_TEMP_FILE"] == f"{folder}/comm_lib_trace_rank_"
    assert got["TORCH_FR_BUFFER_SIZE"] == "20000"
    assert folder.is_dir()
