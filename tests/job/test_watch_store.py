"""The watch against a hostile client of the job's TCPStore (issue 53, items 2 and 3).

Whoever reaches the store's port can list, read, write and delete every key. Such a client
must not make the ranks dump again and again (flooding the alarm), nor silence the watch
(pre-claiming the leader's keys, poisoning the alarm with text): only the job's ranks can
raise or claim an alarm (the keys are named from a secret rank 0 makes and the others read
from the dump folder, never from the store), a rank dumps at most once per alarm and
follows alarms at a bounded rate, and no value read from the store is trusted.

In-process: four watches (threads running ``Watch.run``) share a :class:`FakeStore`, each
with its own rank, readings and connection; the report is a stand-in. Then a real 4-rank
Gloo job whose store a hostile process attacks while rank 2 is stuck in host code.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from frtrace.job import watch as watching
from tests.conftest import SERIAL
from tests.job.hostile_store import OLD, POINTER, FakeClient, FakeStore, flood, poison, pre_claim

ROOT = Path(__file__).resolve().parents[2]
WORLD = 4
STUCK = 2
WATCH_S = 0.3
INTERVAL_S = 0.02
PG = ("fr", "0")
REPORTER = "frtrace_test_watch_store_reporter"


@dataclass
class Rank:
    """One rank as its watch sees it: its number, whether an op is pending, its dumps."""

    rank: int
    store: FakeStore
    pending: bool = False
    completed: int = 4
    dumps: list[str] = field(default_factory=list)
    clients: list[FakeClient] = field(default_factory=list)

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return WORLD

    def status(self) -> dict[tuple[str, str], tuple[int, int]]:
        return {PG: (self.completed + (1 if self.pending else 0), self.completed)}

    def connect(self) -> FakeClient:
        client = self.store.client()
        self.clients.append(client)
        return client


@dataclass
class Job:
    """Four watches on one fake store, run by threads named after their rank."""

    folder: Path
    store: FakeStore = field(default_factory=FakeStore)
    ranks: list[Rank] = field(default_factory=list)
    watches: list[watching.Watch] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    reports: list[int] = field(default_factory=list)  # ranks that wrote a report

    def start(self) -> None:
        for r in range(WORLD):
            rank = Rank(r, self.store)
            self.ranks.append(rank)

            def dump(reason: str, detail: str, rank: Rank = rank) -> None:
                rank.dumps.append(detail)

            w = watching.Watch(
                dump_dir=self.folder,
                watch_s=WATCH_S,
                dump=dump,  # type: ignore[arg-type]
                interval_s=INTERVAL_S,
                dump_wait_s=1.0,
            )
            self.watches.append(w)
        for r, w in enumerate(self.watches):
            t = threading.Thread(target=w.run, name=f"rank{r}", daemon=True)
            self.threads.append(t)
            t.start()

    def stall(self) -> None:
        """Every rank but STUCK waits in the next op; STUCK is in host code (nothing pending)."""
        for rank in self.ranks:
            rank.pending = rank.rank != STUCK

    def stop(self) -> None:
        for w in self.watches:
            w.stop.set()
        for t in self.threads:
            t.join(timeout=5)

    def dumps(self) -> list[int]:
        return [len(rank.dumps) for rank in self.ranks]


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Job]:
    j = Job(tmp_path)
    by_thread: dict[str, Rank] = {}

    def rank_of_thread() -> Rank | None:
        return by_thread.get(threading.current_thread().name)

    def analyse_and_report(folder: Path, since_wall: float, context: object) -> object:
        rank = rank_of_thread()
        j.reports.append(-1 if rank is None else rank.rank)
        return types.SimpleNamespace(report=object(), html=folder / "frtrace-report.html")

    reporter = types.ModuleType(REPORTER)
    reporter.analyse_and_report = analyse_and_report  # type: ignore[attr-defined]
    reporter.hang_line = lambda written, context: "job hung (stand-in report)"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, REPORTER, reporter)
    monkeypatch.setattr(watching, "REPORTER", REPORTER)
    monkeypatch.setattr(watching, "default_group", rank_of_thread)
    monkeypatch.setattr(watching, "read_status", lambda dist: dist.status())
    monkeypatch.setattr(watching, "_connect", lambda dist: dist.connect())
    for name in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    original_start = j.start

    def start() -> None:
        original_start()
        by_thread.update({f"rank{rank.rank}": rank for rank in j.ranks})

    j.start = start  # type: ignore[method-assign]
    try:
        yield j
    finally:
        j.stop()


def _attack(job: Job, seconds: float, step: Callable[[Any, int], None]) -> int:
    """Run ``step`` on a hostile client of the job's store every few ms for ``seconds``
    (connecting again whenever the store drops it); the number of rounds."""
    client: FakeClient | None = None
    deadline = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < deadline:
        if client is None or client.closed:
            client = job.store.client()
        with contextlib.suppress(RuntimeError):  # (an add on text: the store dropped it)
            step(client, rounds)
        rounds += 1
        time.sleep(0.005)
    return rounds


def _wait_until(what: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)
    return what()


def _one_stall_one_report(job: Job) -> None:
    """What a real stall must give, whatever the store holds: every rank dumps exactly once
    (the stuck one included: it has nothing pending, only the alarm makes it dump), and one
    rank writes one report."""
    assert job.dumps() == [1] * WORLD, [rank.dumps for rank in job.ranks]
    assert len(job.reports) == 1, job.reports
    assert job.reports[0] != STUCK  # a rank that saw its own op stall leads
    assert "raised by another rank" in job.ranks[STUCK].dumps[0]
    assert all(t.is_alive() for t in job.threads)  # no value read killed a watch


def test_flooding_the_alarm_makes_no_rank_dump(job: Job) -> None:
    """Item 2: a client adding to the alarm (every name the watch used, or might use) every
    few ms, and writing every ``frtrace/`` key it lists, makes no healthy rank dump."""
    job.start()
    time.sleep(0.2)  # the ranks have the key
    rounds = _attack(job, 1.5, flood)
    assert rounds > 100
    assert job.dumps() == [0] * WORLD, [rank.dumps for rank in job.ranks]
    assert job.reports == []


def test_flooding_during_a_stall_dumps_each_rank_once(job: Job) -> None:
    """Item 2: the same flood while the job is stalled: one alarm, one dump per rank, one
    report (each dump used to overwrite the last incident's files, 19-21 times in 30 s)."""
    job.start()
    time.sleep(0.2)
    job.stall()
    _attack(job, 2.0, flood)
    _one_stall_one_report(job)


def test_pre_claimed_leadership_still_gets_a_leader(job: Job) -> None:
    """Item 3: with ``raise/1..200`` pre-claimed (under guessed run prefixes too) before the
    job starts, a real stall still has a leader, a report, and the stuck rank's dump."""
    pre_claim(job.store.client())
    job.start()
    time.sleep(0.2)
    job.stall()
    assert _wait_until(lambda: len(job.reports) == 1 and min(job.dumps()) == 1, 3.0)
    time.sleep(0.5)  # (nothing more comes)
    _one_stall_one_report(job)


def test_a_poisoned_alarm_is_no_alarm(job: Job) -> None:
    """Item 3: the alarm set to text or to a number past 64 bits (and rank 0's digest to
    100 kB of junk before it publishes its own) silences nothing and raises nothing."""
    hostile = job.store.client()
    poison(hostile)
    job.start()
    time.sleep(0.2)
    poison(hostile)
    time.sleep(0.3)
    assert job.dumps() == [0] * WORLD  # text is no alarm
    job.stall()
    _attack(job, 1.5, lambda store, _: poison(store))
    _one_stall_one_report(job)


def test_the_secret_is_in_the_dump_folder_never_in_the_store(job: Job) -> None:
    """Rank 0's key: a 0600 file in the dump folder named by its digest; the store holds the
    digest only, and no key of the watch a hostile client could name before it exists."""
    job.start()
    assert _wait_until(lambda: all(w._key is not None for w in job.watches), 2.0)
    files = [p for p in job.folder.iterdir() if p.name.startswith(".frtrace-watch-key-")]
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    secret = files[0].read_text()
    digest = files[0].name.removeprefix(".frtrace-watch-key-")
    assert hashlib.sha256(b"frtrace watch key\0" + secret.encode()).hexdigest()[:32] == digest
    assert job.store.data[POINTER] == digest.encode()
    everything = b"".join([*job.store.data.values(), *(k.encode() for k in job.store.data)])
    assert secret.encode() not in everything
    job.stall()
    assert _wait_until(lambda: len(job.reports) == 1, 3.0)
    names = sorted(job.store.data)
    assert not [n for n in names if n.startswith(OLD) and n.rsplit("/", 1)[-1].isdigit()]
    assert all(secret not in n for n in names)


def test_alarms_of_a_leaked_key_are_followed_at_a_bounded_rate(job: Job) -> None:
    """Should the key leak (or a rank go mad), alarms raised every few ms make a healthy
    rank dump at most once per ``watch`` seconds (0.3 s here), each alarm number once."""
    job.start()
    assert _wait_until(lambda: all(w._key is not None for w in job.watches), 2.0)
    key = job.watches[0]._key
    assert key is not None
    insider = job.store.client()
    t0 = time.monotonic()
    g = 0
    while time.monotonic() - t0 < 1.5:
        g += 1
        insider.set(watching._name(key, "alarm", g), "1")
        time.sleep(0.01)
    assert g > 50
    for w, rank in zip(job.watches, job.ranks, strict=True):
        assert 2 <= len(rank.dumps) <= 1.5 / WATCH_S + 2, rank.dumps
        assert w.fired == sorted(set(w.fired)), w.fired  # never the same alarm twice


def test_a_rank_without_the_key_watches_alone_and_says_so_once(
    job: Job, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No key from rank 0 (a folder the rank does not share): after KEY_WAIT_S the rank
    says so once and dumps its own stall itself; rank 0's alarms do not reach it, a
    hostile's neither."""
    monkeypatch.setattr(watching, "KEY_WAIT_S", 0.3)
    monkeypatch.setattr(watching, "_read_key", lambda folder, digest: None)
    job.start()
    time.sleep(0.6)
    _attack(job, 0.3, flood)
    job.stall()
    assert _wait_until(lambda: all(job.dumps()[r] == 1 for r in range(WORLD) if r != STUCK), 2.0)
    time.sleep(0.3)
    assert job.dumps()[STUCK] == 0  # nothing of its own pending, and no alarm reaches it
    assert "no watch key: this rank only" in job.ranks[1].dumps[0]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "no watch key from rank 0" in line]
    assert len(lines) == WORLD - 1, err  # once per rank, rank 0 aside (it made the key)


# A real 4-rank Gloo job (tests/job/watch_job.py, by tests/job/watch_store_job.py: every dump
# the watch makes is a line on stdout) while tests/job/hostile_store.py attacks its store.

JOB = ROOT / "tests" / "job" / "watch_store_job.py"
HOSTILE = ROOT / "tests" / "job" / "hostile_store.py"
DEADLINE_S = 90.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for name in list(env):
        if name.startswith(("TORCH_FR_", "TORCH_NCCL_", "FRTRACE_WATCH", "TORCHELASTIC_")):
            del env[name]
    return env


@SERIAL  # (a real job whose timing is under test: tests/conftest.py)
def test_a_hostile_store_client_neither_floods_nor_silences_a_real_job(tmp_path: Path) -> None:
    """Pre-claiming, poisoning and flooding the job's TCPStore from another process, under
    the old names, guessed ones and every ``frtrace/`` key it lists, for the whole run:
    rank 2 stuck in host code still gets one alarm, each rank dumps once, and the report
    names rank 2 in load_batch."""
    port = _free_port()
    env = _env()
    argv = [sys.executable, str(JOB)]
    procs = [
        subprocess.Popen(
            [*argv, str(r), str(WORLD), str(port), str(tmp_path), "hang", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for r in range(WORLD)
    ]
    hostile = subprocess.Popen(
        [sys.executable, str(HOSTILE), str(port), str(DEADLINE_S), str(tmp_path / "stop")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    html = tmp_path / "frtrace-report.html"
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not html.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "a rank ended before the report"
            time.sleep(0.1)
        assert html.exists(), "no report within the deadline"
        time.sleep(3.0)  # the attack goes on, the job still stalled: no rank dumps again
        text = (tmp_path / "frtrace-report.txt").read_text()  # (superseded once it ends)
    finally:
        (tmp_path / "stop").touch()  # the attack ends, then the stuck rank goes on
        outs = []
        for p in [hostile, *procs]:
            if p is procs[0]:
                (tmp_path / "release").touch()
            try:
                outs.append(p.communicate(timeout=DEADLINE_S))
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate())
    said, outs = outs[0], outs[1:]
    assert [p.returncode for p in procs] == [0] * WORLD, [err[-1500:] for _, err in outs]
    assert said[0].startswith("hostile: "), said
    assert int(said[0].split()[1]) > 50, said  # rounds of attack
    dumps = [
        [line for line in out.splitlines() if line.startswith("watch-dump:")] for out, _ in outs
    ]
    assert [len(d) for d in dumps] == [1] * WORLD, dumps
    assert text.startswith(f"HANG: culprit rank {STUCK};"), text[:300]
    assert "load_batch" in text
    hung = [line for _, err in outs for line in err.splitlines() if "job hung" in line]
    assert len(hung) == 1, hung
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".frtrace-watch")]
