"""NCCL RAS's answers as files (``frtrace.evidence.ras``): NCCL's JSON layout read key by key
(the fixtures of ``scripts/make_ras_fixtures.py`` are written as NCCL's client writes them),
the names stage 0 knows them by, and damaged or hostile files: each one line, never an error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from frtrace.evidence.ras import RasFiles, read_ras
from frtrace.incident.budget import MAX_RAS_BYTES
from frtrace.incident.kinds import kind_by_name
from frtrace.incident.layout import SideFile, walk
from tests.conftest import FIXTURES

RAS = FIXTURES / "ras"
MANIFEST = json.loads((RAS / "MANIFEST.json").read_text())


def _side(relative: str, data: bytes) -> SideFile:
    return SideFile(
        path=Path(relative), relative=relative, kind="ras", size_bytes=len(data), data=data
    )


def _read(*texts: str | bytes) -> RasFiles:
    files = [
        _side(f"ncclras_{i}.json", t if isinstance(t, bytes) else t.encode())
        for i, t in enumerate(texts)
    ]
    return read_ras(files)


@pytest.mark.parametrize(
    "name",
    [
        "ncclras.json",
        "ncclras",
        "ncclras-node3.json",
        "ncclras_monitor.json",
        "nccl_ras.txt",
        "NCCL-RAS.log",
        "ncclras_rank3",
    ],
)
def test_its_names(name: str) -> None:
    """By name, before a dump's or a log's: ``ncclras_rank3`` is no rank's dump."""
    assert kind_by_name(name) == ("ras", None)


@pytest.mark.parametrize("name", ["ras.json", "rank_3", "nccl_trace_rank_3", "ncclrasx.json"])
def test_not_its_names(name: str) -> None:
    assert kind_by_name(name)[0] != "ras"


@pytest.mark.parametrize("scenario", sorted(MANIFEST))
def test_the_fixtures_read_as_nccl_writes_them(scenario: str, tmp_path: Path) -> None:
    """Every communicator, rank, host, pid and count of a fixture, found by the folder walk
    (and compressed: as ``ncclras.json.gz``)."""
    listed = walk(RAS / scenario)[1]
    assert {f.kind for f in listed} == {"ras"}
    read = read_ras(listed)
    assert not read.problems
    assert sorted(read.files) == sorted(p.name for p in (RAS / scenario).iterdir())
    doc = json.loads((RAS / scenario / "ncclras.json").read_text())
    (status,) = read.statuses
    assert status.nccl_version == doc["nccl_version"]
    assert [c.hash for c in status.comms] == [c["hash"] for c in doc["communicators"]]
    for comm, raw in zip(status.comms, doc["communicators"], strict=True):
        assert comm.size == raw["size"]
        assert [r.rank for r in comm.ranks] == [r["rank"] for r in raw["ranks"]]
        assert [(r.host, r.pid) for r in comm.ranks] == [
            (r["host"], r["pid"]) for r in raw["ranks"]
        ]
        assert [dict(r.counts) for r in comm.ranks] == [
            r["collective_counts"] for r in raw["ranks"]
        ]
        assert all(r.state == "RUNNING" and not r.error for r in comm.ranks)
        assert [m.dead for m in comm.missing] == [
            m["status"]["considered_dead"] for m in raw["missing_ranks"]
        ]
    dead = [e for e in read.events if e.event == "PEER_DEAD"]
    assert len(dead) == (scenario == "rank_dead")


def test_the_states_as_ras_names_them() -> None:
    """ABORT before FINALIZE before RUNNING (init_state 0) before INIT; an init or async error
    other than success (0) or in progress (7)."""

    def rank(status: dict[str, object]) -> dict[str, object]:
        return {"rank": 0, "host": "h", "pid": 1, "status": status, "collective_counts": {}}

    statuses = [
        ({"init_state": 0, "abort_flag": True, "finalize_called": True}, "ABORT", False),
        ({"init_state": 0, "destroy_flag": True}, "FINALIZE", False),
        ({"init_state": 0, "async_error": 7}, "RUNNING", False),
        ({"init_state": 7}, "INIT", False),
        ({"init_state": 3}, "INIT", True),
        ({"init_state": 0, "async_error": 6}, "RUNNING", True),
    ]
    comms = [
        {"hash": f"0x{i}", "size": 1, "ranks": [rank(s)], "missing_ranks": []}
        for i, (s, _, _) in enumerate(statuses)
    ]
    (status,) = _read(json.dumps({"communicators": comms})).statuses
    got = [(c.ranks[0].state, c.ranks[0].error) for c in status.comms]
    assert got == [(state, error) for _, state, error in statuses]


def test_unknown_processes_and_unknown_keys() -> None:
    """``"host": "unknown"`` and ``"pid": -1`` are RAS's "not known"; other keys are ignored."""
    doc = {
        "communicators": [
            {
                "hash": "0x1",
                "size": 2,
                "future_key": [1, 2],
                "ranks": [{"rank": 0, "host": "unknown", "pid": -1, "status": {"init_state": 0}}],
                "missing_ranks": [
                    {"rank": 1, "host": "10.0.0.2", "pid": 7, "status": {"unresponsive": True}}
                ],
            }
        ]
    }
    (comm,) = _read(json.dumps(doc)).statuses[0].comms
    assert (comm.ranks[0].host, comm.ranks[0].pid) == (None, None)
    assert comm.missing[0].unresponsive and not comm.missing[0].dead


def test_a_monitors_events_one_after_another() -> None:
    """Events as the monitor prints them, a terminal's line between, one of another kind."""
    event = {"timestamp": "t", "group": "LIFECYCLE", "event": "PEER_DEAD", "details": ""}
    events = [
        event | {"peer": {"host": "10.0.0.1", "pid": 5, "cuda_devs": [1], "nvml_devs": [1]}},
        event | {"event": "PEER_NEW", "peer": {"addr": "10.0.0.1<34567>"}},
    ]
    text = (
        "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n"
        + "\n".join(json.dumps(e, indent=2) for e in events)
        + "\n"
    )
    read = _read(text)
    assert [(e.event, e.host, e.pid) for e in read.events] == [
        ("PEER_DEAD", "10.0.0.1", 5),
        ("PEER_NEW", None, None),
    ]
    assert not read.problems


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"Job summary\n===========\n", "no NCCL RAS JSON"),
        (b'{"communicators": [', "no NCCL RAS JSON"),
        (b"\xff\xfe{}", "NCCL RAS's answer not used"),
        (b'{"communicators": []}' + b"[" * 100_000, None),
        (json.dumps({"x": 1}).encode(), "no NCCL RAS JSON"),
        (b'{"communicators": "no"}', "no NCCL RAS JSON"),
    ],
)
def test_damaged_or_not_ras(data: bytes, said: str | None) -> None:
    read = _read(data)
    if said is None:
        assert read.statuses and not read.problems
    else:
        assert any(said in p for p in read.problems), read.problems


def test_hostile_values_are_dropped() -> None:
    """A rank outside the communicator, a size past any job, numbers of thousands of digits,
    wrong types, deep nesting: each entry dropped, never an error."""
    big = "9" * 5000
    text = (
        '{"communicators": ['
        '{"hash": "0x1", "size": 4, "ranks": [{"rank": 9}, {"rank": -1}, {"rank": true},'
        ' {"rank": 1, "pid": 1e300, "collective_counts": {"AllReduce": -3, "Broadcast": "2"}}]},'
        f'{{"hash": "0x2", "size": {1 << 40}}}, {{"hash": 5, "size": 2}},'
        f'{{"hash": "0x3", "size": 2, "ranks": [{{"rank": {big}}}]}},'
        '{"hash": "0x4", "size": 2, "ranks": ' + "[" * 5000 + "]" * 5000 + "}]}"
    )
    read = _read(text)
    assert not read.statuses or [c.hash for c in read.statuses[0].comms] in (["0x1"], [])
    for status in read.statuses:
        (comm,) = status.comms
        assert [(r.rank, r.pid, r.counts) for r in comm.ranks] == [(1, None, ())]


def test_a_file_past_its_budget_is_one_line() -> None:
    big = _side("ncclras.json", b" " * (MAX_RAS_BYTES + 1))
    read = read_ras([big])
    assert not read and "not read" in read.problems[0]


def test_many_broken_objects_stay_within_the_time_budget() -> None:
    """Lines that each open an object that never closes: linear per line, bounded in all."""
    text = ('{"a": "' + "x" * 200 + "\n") * 20_000
    started = time.monotonic()
    read = _read(text)
    assert time.monotonic() - started < 5
    assert read.problems
