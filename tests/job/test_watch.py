"""The job watches itself (frtrace.recorder.enable(watch=...), $FRTRACE_WATCH): the stall clock
on made-up readings, and real 4-rank Gloo jobs: a hung one writes its own report naming the
stuck rank and its function while every rank lives on; a healthy one with compute longer than
the watch between its collectives never fires."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frtrace.job.env import job_environment
from frtrace.job.watch import REPORT_STEM, Stall, StallClock, parse_watch
from tests.conftest import SERIAL

ROOT = Path(__file__).resolve().parents[2]
pytestmark = SERIAL  # real 4-rank jobs
JOB = ROOT / "tests" / "job" / "watch_job.py"
WORLD = 4
STUCK = 2
DEADLINE_S = 120.0
PG = ("fr", "0")


def test_parse_watch() -> None:
    assert parse_watch("15") == 15.0
    assert parse_watch(2.5) == 2.5
    assert parse_watch(None) is None
    assert parse_watch("") is None
    assert parse_watch("0") is None
    with pytest.raises(ValueError, match=r"FRTRACE_WATCH='soon' is not a number of seconds"):
        parse_watch("soon")
    with pytest.raises(ValueError, match="watch='nan'"):
        parse_watch("nan", source="watch")


def test_frtrace_env_sets_the_watch_only_when_asked_and_enable_never_sets_it() -> None:
    from frtrace.job.env import render_env

    text = render_env("/shared/fr")
    assert "FRTRACE_WATCH=" not in text.replace("adds FRTRACE_WATCH=300", "")
    assert "`frtrace env --dir /shared/fr --watch 300` adds FRTRACE_WATCH=300" in text
    assert "\nexport FRTRACE_WATCH=120\n" in render_env("/shared/fr", watch=120)
    assert "FRTRACE_WATCH" not in job_environment("/shared/fr")


def test_a_watch_that_is_not_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """watch= nonsense is the caller's error; $FRTRACE_WATCH nonsense is one warning (the job
    runs on, unwatched)."""
    from frtrace import recorder

    with pytest.raises(ValueError, match="watch='soon' is not a number of seconds"):
        recorder.enable(tmp_path, watch="soon", signals=())  # type: ignore[arg-type]
    assert recorder.state() is None
    monkeypatch.setenv("FRTRACE_WATCH", "soon")
    with pytest.warns(RuntimeWarning, match="FRTRACE_WATCH='soon'.*not watching"):
        recorder.enable(tmp_path, signals=())
    recorder.disable()


def test_an_op_pending_past_the_watch_is_a_stall_once() -> None:
    clock = StallClock(10.0)
    assert clock.update({PG: (5, 5)}, 0.0) == []  # nothing pending
    assert clock.update({PG: (6, 5)}, 1.0) == []  # op 6 pending since t=1
    assert clock.update({PG: (7, 5)}, 10.5) == []  # still op 6, 9.5 s
    assert clock.update({PG: (7, 5)}, 11.0) == [Stall(PG, 5, 10.0)]
    assert Stall(PG, 5, 10.0).describe() == "op #6 of process group 0 pending for 10 s"
    clock.cover()  # the alarm was raised: the same op never fires again
    assert clock.update({PG: (7, 5)}, 100.0) == []


def test_ops_that_complete_never_stall() -> None:
    clock = StallClock(10.0)
    for step in range(100):  # each op pending a few seconds, then done: the clock restarts
        t = step * 5.0
        assert clock.update({PG: (step + 1, step)}, t) == []
        assert clock.update({PG: (step + 1, step + 1)}, t + 4.0) == []
    assert clock.oldest(1000.0) == 0.0
    clock.update({PG: (8, 6)}, 2000.0)  # two pending: the oldest one counts
    clock.update({PG: (8, 7)}, 2005.0)  # op 7 done: op 8 pending since now
    assert clock.update({PG: (8, 7)}, 2014.0) == []
    assert clock.update({("nccl", "3"): (1, 0)}, 2015.0) == []  # a group gone is forgotten
    assert list(clock.since) == [("nccl", "3")]


def _spawn(
    rank: int,
    port: int,
    out: Path,
    mode: str,
    watch: str,
    *extra: str,
    env_watch: str = "",
    confirm: str = "",
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for name in list(env):
        if name.startswith(("TORCH_FR_", "TORCH_NCCL_", "FRTRACE_WATCH")):
            del env[name]
    if env_watch:  # the job's environment as `frtrace env OUT` prints it, and the watch
        env.update(job_environment(out))
        env["FRTRACE_WATCH"] = env_watch
    if confirm:
        env["FRTRACE_WATCH_CONFIRM"] = confirm
    argv = [sys.executable, str(JOB), str(rank), str(WORLD), str(port), str(out), mode, watch]
    return subprocess.Popen(
        [*argv, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=DEADLINE_S))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate())
    return outs


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hung_job_reports_itself(tmp_path: Path, watch: str, env_watch: str = "") -> None:
    port = _free_port()
    procs = [_spawn(r, port, tmp_path, "hang", watch, env_watch=env_watch) for r in range(WORLD)]
    try:
        html = tmp_path / f"{REPORT_STEM}.html"
        deadline = time.monotonic() + DEADLINE_S
        while not html.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "a rank ended before the report"
            time.sleep(0.1)
        assert html.exists(), "no report within the deadline"
        time.sleep(1.0)  # the report is written: every rank still lives, none was signalled
        assert [p.poll() for p in procs] == [None] * WORLD
        written = (tmp_path / f"{REPORT_STEM}.txt").read_text()  # before the stall ends
    finally:
        (tmp_path / "release").touch()  # the stuck rank goes on: the job finishes
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0] * WORLD, [err[-1500:] for _, err in outs]
    for suffix in ("txt", "json", "html"):
        path = tmp_path / f"{REPORT_STEM}.{suffix}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        text = path.read_text()
        assert "load_batch" in text, suffix
    assert written.startswith(f"HANG: culprit rank {STUCK};"), written[:300]
    # the threshold, the second look, the time pending, the group's timeout (600 s: the job's)
    stall = (
        r"all_reduce #4 of pg 0 pending ([0-9.]+) s on rank [013] "
        r"\(threshold 2 s, confirmed 1 s later; the group's timeout 600 s\)"
    )
    assert re.search(rf"\nwatch: +{stall}\n", written), written[:1500]
    lines = [line for _, err in outs for line in err.splitlines() if "job hung" in line]
    assert len(lines) == 1, lines  # one rank reports, once
    line = 1 + JOB.read_text().splitlines().index("        time.sleep(0.05)")
    page = re.escape(str(tmp_path.resolve() / (REPORT_STEM + ".html")))
    said = re.fullmatch(
        rf"frtrace: job hung: culprit rank {STUCK} in load_batch \(watch_job.py:{line}\); "
        rf"{stall}; report: {page}",
        lines[0],
    )
    assert said is not None, lines[0]
    assert float(said.group(1)) >= 3.0  # confirmed: pending past the threshold and the window
    # released, the op completes: said at most once, the files marked first (the job may end
    # before the watch looks again, or while it marks them)
    ended = [line for _, err in outs for line in err.splitlines() if "ended after" in line]
    assert len(ended) <= 1, ended
    if ended:
        for suffix in ("txt", "html"):
            text = (tmp_path / f"{REPORT_STEM}.{suffix}").read_text()
            assert "SUPERSEDED: the stall of all_reduce #4 ended after " in text, suffix
        doc = json.loads((tmp_path / f"{REPORT_STEM}.json").read_text())
        assert doc["watch"]["superseded"]["summary"] in ended[0]
    hooks = [line for out, _ in outs for line in out.splitlines() if line.startswith("hung:")]
    assert hooks == ([] if watch == "env" else [f"hung: culprits [{STUCK}]"])  # on_hang, once
    for rank in range(WORLD):  # every rank dumped, the stuck one included
        assert (tmp_path / f"stacks_rank_{rank}.json").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".frtrace-watch")]


def test_a_hung_job_writes_its_own_report_naming_the_stuck_rank(tmp_path: Path) -> None:
    _hung_job_reports_itself(tmp_path, "2")


def test_frtrace_watch_in_the_environment_needs_no_code_change(tmp_path: Path) -> None:
    _hung_job_reports_itself(tmp_path, "env", env_watch="2")


def test_a_healthy_job_with_compute_longer_than_the_watch_never_fires(tmp_path: Path) -> None:
    port = _free_port()
    procs = [_spawn(r, port, tmp_path, "healthy", "1", "600", "2.5") for r in range(WORLD)]
    outs = _finish(procs)
    assert [p.returncode for p in procs] == [0] * WORLD, [err[-1500:] for _, err in outs]
    assert all(out.strip().endswith("done") for out, _ in outs)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dump, no report
    assert not [line for _, err in outs for line in err.splitlines() if "frtrace:" in line]


# The case (a 40 s checkpoint behind a barrier, FRTRACE_WATCH=20, the group's timeout
# 1,800 s), scaled down: a 12 s checkpoint, FRTRACE_WATCH=4 (its second look 2 s later).
CHECKPOINT_S = 12.0


def test_a_slow_checkpoint_reported_as_a_stall_is_superseded_when_it_ends(tmp_path: Path) -> None:
    """Rank 0 in torch.save for 12 s while the others wait in a barrier, the watch from
    FRTRACE_WATCH alone: confirmed at 6 s, the report says the threshold, the time pending, the
    group's timeout and that rank 0 was writing a checkpoint; once the barrier completes the
    log says once that the stall ended, a slow step, and the report files say so at their top,
    within a minute of the checkpoint's end. The job runs to its end."""
    port = _free_port()
    argv = ("1800", str(CHECKPOINT_S), str(DEADLINE_S))  # training goes on until released
    procs = [_spawn(r, port, tmp_path, "checkpoint", "env", *argv, env_watch="4") for r in range(4)]
    txt, page = (tmp_path / f"{REPORT_STEM}.{suffix}" for suffix in ("txt", "html"))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not _marked(page):
            assert all(p.poll() is None for p in procs), "a rank ended"
            time.sleep(0.2)
        time.sleep(2.0)  # (the html is marked last, then the line is said)
    finally:
        (tmp_path / "release").touch()
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0] * WORLD, [err[-1500:] for _, err in outs]
    done = [float(line.split()[2]) for line in outs[0][0].splitlines() if "checkpoint done" in line]
    said = [
        [line for line in err.splitlines() if "job hung" in line or "ended after" in line]
        for _, err in outs
    ]
    (lines,) = [lines for lines in said if lines]  # one rank (the leader) says it all
    *hung, ended = lines
    html = re.escape(str(tmp_path.resolve() / (REPORT_STEM + ".html")))
    over = re.fullmatch(
        r"frtrace: the stall of barrier #4 ended after (?:at most )?([0-9.]+) s: "
        r"a slow step, not a hang; "
        rf"{html} marked superseded",
        ended,
    )
    assert over is not None, lines
    assert 6.0 <= float(over.group(1)) <= CHECKPOINT_S + 30, over.group(1)
    assert len(hung) <= 1, lines  # paged once, or never: over before its report was written
    for line in hung:
        assert line.startswith("frtrace: job hung: culprit rank 0 in "), line
        assert "(threshold 4 s, confirmed 2 s later; the group's timeout 1800 s)" in line
        assert "; rank 0 was writing a checkpoint (torch's checkpoint code on its stack);" in line
    text = txt.read_text()
    assert text.startswith("SUPERSEDED: the stall of barrier #4 ended after "), text[:300]
    phase = "rank 0 was writing a checkpoint (torch's checkpoint code on its stack)"
    assert f"\nphase:    {phase}\n" in text
    assert txt.stat().st_mtime - done[0] <= 60.0
    watch = json.loads((tmp_path / f"{REPORT_STEM}.json").read_text())["watch"]
    assert (watch["threshold_s"], watch["confirm_s"], watch["group_timeout_s"]) == (4, 2, 1800)
    assert watch["op"] == {"group": "0", "seq": 4, "name": "barrier"}
    assert watch["pending_s"] >= 6.0 and watch["superseded"]["ended_after_s"] >= 6.0
    assert [(p["rank"], p["phase"], p["basis"]) for p in watch["phases"]] == [
        (0, "checkpoint", "stack")
    ]


def _marked(page: Path) -> bool:
    return page.exists() and "SUPERSEDED: " in page.read_text()


def test_a_slow_step_over_before_the_second_look_pages_nobody(tmp_path: Path) -> None:
    """A 6 s checkpoint (in frtrace.recorder.phase) behind a barrier, watch=4 and
    FRTRACE_WATCH_CONFIRM=4: the first look at 4 s, the op done at 6 s, before the second
    look (8 s): no alarm, no dump, no report, not a line. (One look would have paged.)"""
    port = _free_port()
    argv = ("1800", "6")
    procs = [_spawn(r, port, tmp_path, "checkpoint", "4", *argv, confirm="4") for r in range(4)]
    outs = _finish(procs)
    assert [p.returncode for p in procs] == [0] * WORLD, [err[-1500:] for _, err in outs]
    assert all(out.strip().endswith("done") for out, _ in outs)
    assert "checkpoint done" in outs[0][0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dump, no report
    assert not [line for _, err in outs for line in err.splitlines() if "frtrace" in line]
