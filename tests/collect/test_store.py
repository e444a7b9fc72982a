"""``frtrace collect --store``: a real hung Gloo job on two "hosts" (each rank in a UTS namespace
of its own, named 127.0.0.2 or 127.0.0.3, so torch's debug server registers
``http://127.0.0.3:<port>`` and Gloo binds that address), collected from its TCPStore alone:
every rank's dump, py-spy and faulthandler stacks, into one folder per host, and the report
names the culprit rank, its host, pid and function."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.collect.store import parse_store_address, parse_worker_url
from frtrace.errors import CollectError
from frtrace.job.env import DUMP_PREFIX
from tests.collect.jobs import await_ready, free_port
from tests.conftest import SERIAL

ROOT = Path(__file__).resolve().parents[2]
pytestmark = SERIAL  # real 4-rank jobs
JOB = ROOT / "tests" / "collect" / "hung_job.py"
HOSTS = {0: "127.0.0.2", 1: "127.0.0.2", 2: "127.0.0.3", 3: "127.0.0.3"}


def _own_hostname_works() -> str | None:
    """None where a process can name its own host in a UTS namespace (root, or user
    namespaces), else why not."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return "needs Linux and unshare(1)"
    for prefix in (["unshare", "--uts"], ["unshare", "--user", "--map-root-user", "--uts"]):
        probe = [*prefix, sys.executable, "-c", "import socket; socket.sethostname('x')"]
        if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
            return None
    return "cannot make a UTS namespace here (not root, no user namespaces)"


def _unshare() -> list[str]:
    probe = ["unshare", "--uts", "true"]
    if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
        return ["unshare", "--uts"]
    return ["unshare", "--user", "--map-root-user", "--uts"]


@contextmanager
def two_host_job(
    tmp: Path,
    stuck: int,
    python: str = sys.executable,
    env_extra: dict[str, str] | None = None,
    mode: str = "debug_server",
) -> Iterator[tuple[int, list[subprocess.Popen[str]]]]:
    """4 ranks of hung_job.py with the debug server, 2 per "host", run by ``python`` (this
    interpreter: with the checkout on its path; another: its own packages only); yields
    (store port, processes) once every rank is where it will stay."""
    if python == sys.executable:
        pytest.importorskip("torch")
        pytest.importorskip("jinja2")  # the debug server's frontend (rank 0) imports it
    port, debug_port = free_port(), free_port()
    procs: list[subprocess.Popen[str]] = []
    wrap = _unshare()
    try:
        for r, host in HOSTS.items():
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "MASTER_", "RANK"))
            }
            env.pop("PYTHONPATH", None)
            if python == sys.executable:
                env["PYTHONPATH"] = str(ROOT)
            env.update(
                PYTHONUNBUFFERED="1",
                RANK=str(r),
                LOCAL_RANK=str(r % 2),
                WORLD_SIZE=str(len(HOSTS)),
                FRTRACE_TEST_JOB=uuid.uuid4().hex,
                FRTRACE_TEST_HOSTNAME=host,
                STUCK_RANK=str(stuck),
                DEBUG_PORT=str(debug_port),
            )
            env.update(env_extra or {})
            argv = [python, str(JOB), str(r), str(len(HOSTS)), str(port), str(tmp)]
            procs.append(
                subprocess.Popen(
                    [*wrap, *argv, mode],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=env,
                    cwd=ROOT,
                    start_new_session=True,  # rank 0's debug server frontend goes with it
                )
            )
        await_ready(procs)
        time.sleep(3.0)  # long enough in the wait to be hung, not running
        yield port, procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.communicate(timeout=20)


def test_collect_store_gets_every_host_and_names_the_culprit(tmp_path: Path) -> None:
    why = _own_hostname_works()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "incident"
    with two_host_job(tmp_path, stuck=3) as (port, procs):
        started = time.monotonic()
        result = CliRunner().invoke(app, ["collect", str(out), "--store", f"127.0.0.1:{port}"])
        took = time.monotonic() - started
        assert all(p.poll() is None for p in procs), "collect must not harm the job"
    assert result.exit_code == 1, result.output  # a hang
    lines = result.output.splitlines()
    # (after "collected into", the headers and their rule; progress lines may come before)
    first = next(i for i, ln in enumerate(lines) if ln.startswith("collected into")) + 3
    table = lines[first : next(i for i, ln in enumerate(lines) if ln.startswith("HANG")) - 1]
    rows = {
        int(ln.split()[0]): ln.split() for ln in table if ln.split()[:1] and ln.split()[0].isdigit()
    }
    assert sorted(rows) == [0, 1, 2, 3], result.output
    for r, row in rows.items():
        assert row[1] == HOSTS[r] and row[2] == str(procs[r].pid), result.output
        assert "debug_server (fr_trace_json)" in " ".join(row), result.output
    # one folder per host, private, with the manifest naming each rank's host, pid, dump time
    for host, ranks in (("127.0.0.2", [0, 1]), ("127.0.0.3", [2, 3])):
        folder = out / host
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        manifest = json.loads((folder / "frtrace-collect.json").read_text())
        assert [r["rank"] for r in manifest["ranks"]] == ranks
        assert [r["pid"] for r in manifest["ranks"]] == [procs[r].pid for r in ranks]
        assert all(r["dumped_at_ns"] for r in manifest["ranks"])
        for r in ranks:
            for name in (f"{DUMP_PREFIX}{r}.json", f"traceback_rank_{r}.txt"):
                assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    head = "\n".join(lines[lines.index(next(ln for ln in lines if ln.startswith("HANG"))) :][:8])
    assert head.startswith("HANG: culprit rank 3;"), result.output
    assert "load_batch (hung_job.py:" in head, head
    # the host and pid of the culprit, from collect's manifest (py-spy says the pid only)
    assert f"culprits: 3 (on {HOSTS[3]}, pid {procs[3].pid})" in head, head
    # JSON dumps carry no frames: each column's live stack (collect's py-spy, dump_traceback)
    # says where its ranks are, labelled as such, never as where the op was called
    live = next(ln for ln in lines if ln.strip().startswith("now (live stack)")).split("  ")
    live = [c.strip() for c in live if c.strip()]
    assert live[1].startswith("train_step (hung_job.py:"), result.output  # waiting 0-2
    assert live[2].startswith("load_batch (hung_job.py:"), result.output  # culprit 3
    called = next(ln for ln in lines if ln.strip().startswith("op called from"))
    assert called.split("from", 1)[1].split() == ["(not", "in", "the", "dump)"] * 2, called
    assert took < 60, f"collect took {took:.1f} s"


def test_store_address_and_registry_values_are_checked() -> None:
    assert parse_store_address("node-0:29500") == ("node-0", 29500)
    assert parse_store_address("[::1]:29500") == ("::1", 29500)
    for bad in ("node-0", "node-0:0", ":29500", "node-0:http"):
        with pytest.raises(CollectError, match="HOST:PORT"):
            parse_store_address(bad)
    w = parse_worker_url(3, b"http://node-7:40123")
    assert not isinstance(w, str) and (w.rank, w.host, w.port) == (3, "node-7", 40123)
    for bad_url in (b"file:///etc/passwd", b"http://node-7", b"not a url \xff"):
        assert isinstance(parse_worker_url(3, bad_url), str)


def test_collect_store_with_no_store_there_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    port = free_port()  # nothing listens there
    out = tmp_path / "incident"
    args = ["collect", str(out), "--store", f"127.0.0.1:{port}", "--timeout", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"--store 127.0.0.1:{port}: no TCPStore answered within 1 s" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing written


def test_a_registry_given_late_says_whether_anything_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child's deadline passed with no answer (on a busy host, torch's client may still be
    retrying a refused connection): the line says "nothing accepts" where nothing listens, and
    "accepted, then silent or slow" only where something did (CI saw the latter for a port
    nothing listened on)."""
    import socket

    from frtrace.collect import store

    late = {"error": "deadline", "what": "answer"}
    monkeypatch.setattr(store, "_registry_child", lambda *_: late)
    port = free_port()  # nothing listens there
    with pytest.raises(CollectError, match=r"no TCPStore answered within 1 s \(nothing accepts"):
        store.read_registry("127.0.0.1", port, 1.0)
    with socket.create_server(("127.0.0.1", 0)) as listening:
        taken = listening.getsockname()[1]
        with pytest.raises(CollectError, match="accepted, then silent or slow"):
            store.read_registry("127.0.0.1", taken, 1.0)


def test_collect_store_without_a_registry_says_how_to_start_one(tmp_path: Path) -> None:
    torch_dist = pytest.importorskip("torch.distributed")
    from datetime import timedelta

    port = free_port()
    server = torch_dist.TCPStore(
        "127.0.0.1", port, 1, is_master=True, timeout=timedelta(seconds=10)
    )
    server.set("some/other/key", "1")
    out = tmp_path / "incident"
    result = CliRunner().invoke(app, ["collect", str(out), "--store", f"127.0.0.1:{port}"])
    assert result.exit_code == 2, result.output
    assert "holds no debug server registry" in result.output
    assert "start_debug_server()" in result.output
    del server


def _wait_for_files(folder: Path, pattern: str, count: int, timeout_s: float) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern))
        if len(found) >= count:
            return found
        time.sleep(0.2)
    pytest.fail(f"{count} {pattern} files did not appear in {folder} within {timeout_s} s")


@pytest.mark.parametrize("job", ["hung", "slow"])
def test_periodic_dumps_tell_stuck_from_slow(tmp_path: Path, job: str) -> None:
    """torch's debug server writing every rank's stacks every second (dump_dir): the files
    are read per rank, with each rank's host; a hung job's ranks stay where they are, a slow
    job's move: stuck or slow from one folder, no second command."""
    why = _own_hostname_works()
    if why is not None:
        pytest.skip(why)
    from frtrace.analysis.series import stack_series
    from frtrace.pystack.periodic import parse_periodic

    incident = tmp_path / "incident"
    periodic = incident / "periodic"
    env = {"DEBUG_DUMP_DIR": str(periodic)} | ({"SLOW_JOB": "1"} if job == "slow" else {})
    with two_host_job(tmp_path, stuck=3, env_extra=env) as (port, _):
        first = len(list(periodic.glob("stacks_*.txt"))) if periodic.is_dir() else 0
        files = _wait_for_files(periodic, "stacks_*.txt", first + 4, 30)[first:]
        for old in sorted(periodic.glob("stacks_*.txt"))[:first]:
            old.unlink()  # (written before every rank was where it stays)
        args = ["collect", str(incident), "--store", f"127.0.0.1:{port}", "--no-analyze"]
        collected = CliRunner().invoke(app, args)
        assert collected.exit_code == 0, collected.output
    samples = tuple(s for f in files for s in parse_periodic(f.read_bytes(), f))
    assert {s.rank for s in samples} == {0, 1, 2, 3}
    assert {(s.rank, s.host) for s in samples} == set(HOSTS.items())
    series = stack_series(samples)
    assert series is not None and series.moments >= 2, files
    if job == "hung":
        assert series.moved == (), series
        assert series.still == (0, 1, 2, 3)
        place = {r.rank: r.place for r in series.ranks}
        assert "load_batch (hung_job.py:" in place[3] and "train_step" in place[0], place
    else:
        assert series.moved == (0, 1, 2, 3), series
    # the same from the folder: collect's dumps and the periodic dumps beside them
    report = CliRunner().invoke(app, ["analyze", str(incident)])
    said = " ".join(report.output.split())
    if job == "hung":
        assert report.output.startswith("HANG: culprit rank 3;"), report.output
        assert "no rank's stack moved: stuck, not slow" in said, report.output
    else:
        assert "every rank's stack moved between snapshots: the job is progressing" in said, said


def test_collect_on_each_host_into_one_folder_is_one_set(tmp_path: Path) -> None:
    """The job's ranks with frtrace.recorder, two per host; collect run on each host (in that
    host's UTS namespace, as srun --overlap would), both into one shared folder: one folder
    per host, read back as one set, the culprit named with its host and pid."""
    why = _own_hostname_works()
    if why is not None:
        pytest.skip(why)
    shared = tmp_path / "incident"
    with two_host_job(tmp_path / "job", stuck=3, mode="recorder") as (_, procs):
        for host in ("127.0.0.2", "127.0.0.3"):
            code = (
                "import socket, sys; socket.sethostname(sys.argv[1]); "
                "from frtrace.cli import main; sys.argv = ['frtrace', *sys.argv[2:]]; main()"
            )
            argv = [*_unshare(), sys.executable, "-c", code, host, "collect", str(shared)]
            argv += ["--env", f"FRTRACE_TEST_HOSTNAME={host}", "--no-analyze", "--no-pyspy"]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            assert run.returncode == 0, run.stdout + run.stderr
            assert run.stdout.count(f" {host} ") == 2, run.stdout  # its own two ranks
        assert all(p.poll() is None for p in procs), "collect must not harm the job"
    assert sorted(p.name for p in shared.iterdir()) == ["127.0.0.2", "127.0.0.3"]
    report = CliRunner().invoke(app, ["analyze", str(shared)])
    head = report.output.splitlines()[:8]
    assert head[0].startswith("HANG: culprit rank 3;"), report.output
    assert "ranks:    4 of 4 loaded" in head, head
    assert f"culprits: 3 (on 127.0.0.3, pid {procs[3].pid})" in head, head


def test_collect_store_twice_tells_hung_from_slow(tmp_path: Path) -> None:
    """--store --twice: two snapshots of every host's ranks, one folder per host in each;
    nothing moved between them: hung, and the culprit named with its host."""
    why = _own_hostname_works()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "incident"
    with two_host_job(tmp_path / "job", stuck=3) as (port, procs):
        args = ["collect", str(out), "--store", f"127.0.0.1:{port}", "--twice", "1"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "HUNG: none of the 4 ranks moved between the snapshots" in result.output
    assert f"culprits: 3 (on 127.0.0.3, pid {procs[3].pid})" in result.output
    for snap in ("snap1", "snap2"):
        assert sorted(p.name for p in (out / snap).iterdir()) == ["127.0.0.2", "127.0.0.3"]
