"""Invariants of the frsim simulator, checked on its own output (no frtrace involved)."""

from __future__ import annotations

import importlib.util
import json
import pickle
import pickletools
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import frsim
from frsim import (
    VERSIONS,
    Capture,
    Fault,
    FaultKind,
    JobSpec,
    Moment,
    dump_object,
    simulate,
    write_dumps,
)
from frsim.serialize import dump_bytes

SMALL: dict[str, Any] = {"world_size": 16, "tp": 4, "pp": 2, "steps": 6, "buffer_size": 120}
P2P_NAMES = ("nccl:send", "nccl:recv", "nccl:coalesced")

# Entry keys per version, written out from the torch sources (see frsim/README.md).
KEYS_2_10 = set(
    "frames record_id pg_id process_group thread_name thread_id collective_seq_id p2p_seq_id "
    "op_id profiling_name time_created_ns input_sizes input_dtypes output_sizes output_dtypes "
    "state time_discovered_started_ns time_discovered_completed_ns retired timeout_ms "
    "is_p2p".split()
)
ENTRY_KEYS = {
    "2.2": set(
        "pg_id seq_id profiling_name time_created_us input_sizes output_sizes state retired "
        "frames".split()
    ),
    "1.4": set(
        "record_id pg_id seq_id op_id profiling_name time_created_ns input_sizes output_sizes "
        "state time_discovered_started_ns time_discovered_completed_ns retired frames".split()
    ),
    "2.1": KEYS_2_10 - {"thread_name", "thread_id", "timeout_ms"},
    "2.4": KEYS_2_10 - {"thread_name", "thread_id"},
    "2.9": KEYS_2_10,
    "2.10": KEYS_2_10,
}
TOP_KEYS = {
    "1.4": ["entries", "version", "pg_config"],
    "2.1": ["version", "pg_config", "entries"],
    "2.4": ["version", "pg_config", "pg_status", "entries"],
    "2.9": ["version", "pg_config", "nccl_version", "pg_status", "entries"],
    "2.10": ["version", "pg_config", "comm_lib_version", "pg_status", "entries"],
}


@pytest.fixture(scope="module")
def healthy() -> frsim.Job:
    return simulate(JobSpec(**SMALL))


@pytest.fixture(scope="module")
def stalled() -> frsim.Job:
    return simulate(JobSpec(**SMALL, fault=Fault(kind=FaultKind.HOST_STALL, rank=5, step=4)))


def entries(job: frsim.Job, rank: int, version: str = "2.10") -> list[dict[str, Any]]:
    dump = dump_object(job, rank, version)
    return dump if isinstance(dump, list) else list(dump["entries"])


def unfinished(dump: dict[str, Any]) -> list[str]:
    """pg_ids whose last enqueued work is not completed."""
    return [
        pg
        for pg, s in dump["pg_status"].items()
        if s["last_enqueued_collective"] != s["last_completed_collective"]
    ]


def test_public_api() -> None:
    """The package exports exactly the documented API."""
    assert sorted(frsim.__all__) == sorted(
        [
            "VERSIONS",
            "Capture",
            "Fault",
            "FaultKind",
            "Job",
            "JobSpec",
            "Moment",
            "Truth",
            "dump_object",
            "simulate",
            "write_dumps",
        ]
    )


def test_healthy_collective_seq_ids_are_contiguous(healthy: frsim.Job) -> None:
    """In a healthy job every group's collective_seq_ids in a buffer have no gaps."""
    for rank in range(16):
        seqs: dict[str, set[int]] = defaultdict(set)
        for e in entries(healthy, rank):
            if not e["profiling_name"].startswith(P2P_NAMES):
                seqs[e["process_group"][0]].add(e["collective_seq_id"])
        for group, values in seqs.items():
            assert values == set(range(min(values), max(values) + 1)), (rank, group)
    assert healthy.truth.hung is False and healthy.truth.culprit_ranks == ()


def test_healthy_job_completes_everything(healthy: frsim.Job) -> None:
    """Every work entry of a finished job is completed and retired; pg_status agrees."""
    for rank in range(16):
        dump = dump_object(healthy, rank)
        assert unfinished(dump) == []
        works = [e for e in dump["entries"] if e["state"] != "scheduled"]
        assert works and all(e["state"] == "completed" and e["retired"] for e in works)


def test_p2p_names_use_group_ranks(healthy: frsim.Job) -> None:
    """Pipeline sends/recvs name group-local ranks: stage s sends 's->s+1'."""
    for rank, want in (
        (5, {"nccl:send 0->1", "nccl:recv 0<-1"}),
        (13, {"nccl:send 1->0", "nccl:recv 1<-0"}),
    ):
        names = {e["profiling_name"] for e in entries(healthy, rank) if e["is_p2p"]}
        assert names == want


def test_batch_p2p_shares_p2p_seq_id_and_ends_with_coalesced(healthy: frsim.Job) -> None:
    """batch_isend_irecv: per-op entries share one p2p_seq_id, a 'coalesced' entry ends it."""
    es = [e for e in entries(healthy, 13) if e["process_group"][1] == "mesh_pp"]
    ends = [i for i, e in enumerate(es) if e["profiling_name"] == "nccl:coalesced"]
    assert ends
    for i in ends[1:]:
        end = es[i]
        assert end["input_sizes"] == [] and end["is_p2p"] is False
        parts = []
        j = i - 1
        while j >= 0 and es[j]["is_p2p"]:
            parts.append(es[j])
            j -= 1
        assert parts and {p["p2p_seq_id"] for p in parts} == {end["p2p_seq_id"]}
        assert all(p["state"] == "scheduled" and not p["retired"] for p in parts)
        assert [p["op_id"] for p in reversed(parts)][-1] == end["op_id"]
    p2p_seqs = [es[i]["p2p_seq_id"] for i in ends]
    assert p2p_seqs == list(range(p2p_seqs[0], p2p_seqs[0] + len(p2p_seqs)))


def test_slow_path_coalesced_group(healthy: frsim.Job) -> None:
    """Slow-path coalescing: _broadcast_oop per rank, one seq id, ALLGATHER_coalesced end."""
    es = entries(healthy, 4)
    end = max(i for i, e in enumerate(es) if e["profiling_name"] == "nccl:ALLGATHER_coalesced")
    parts = es[end - 4 : end]
    assert {p["profiling_name"] for p in parts} == {"nccl:_broadcast_oop"}
    assert {p["collective_seq_id"] for p in parts} == {es[end]["collective_seq_id"]}
    assert sorted({p["input_sizes"][0][0] for p in parts}) == [12564, 12565]


def test_wrapped_buffers_start_at_different_record_ids() -> None:
    """Middle pipeline stages record more p2p calls, so buffers wrap at other record_ids."""
    job = simulate(JobSpec(**{**SMALL, "tp": 2, "pp": 4}))
    firsts = {rank: entries(job, rank)[0]["record_id"] for rank in range(16)}
    assert all(first > 0 for first in firsts.values())
    assert firsts[0] == firsts[12] != firsts[4] == firsts[8]
    for rank in range(16):
        ids = [e["record_id"] for e in entries(job, rank)]
        assert len(ids) == 120 and ids == list(range(ids[0], ids[0] + 120))


def test_time_created_increases_per_rank(stalled: frsim.Job) -> None:
    """time_created_ns grows along each rank's buffer."""
    for rank in (0, 5, 13):
        times = [e["time_created_ns"] for e in entries(stalled, rank)]
        assert times == sorted(times)


def test_host_stall_truth(stalled: frsim.Job) -> None:
    """HOST_STALL: the culprit has nothing unfinished; everyone else waits in something."""
    truth = stalled.truth
    assert truth.hung and truth.culprit_ranks == (5,) and 5 not in truth.waiting_ranks
    culprit = dump_object(stalled, 5)
    assert unfinished(culprit) == []
    assert not [e for e in culprit["entries"] if e["state"] == "started"]
    for rank in truth.waiting_ranks:
        assert unfinished(dump_object(stalled, rank)), rank
    group_member = next(r for r in truth.group_ranks if r != 5)
    hit = [
        e
        for e in entries(stalled, group_member)
        if e["process_group"][0] == truth.group_name
        and e["collective_seq_id"] == truth.seq
        and e["profiling_name"] == f"nccl:{truth.op}"
    ]
    assert len(hit) == 1 and hit[0]["state"] == "started"
    assert not [
        e
        for e in entries(stalled, 5)
        if e["process_group"][0] == truth.group_name and e["collective_seq_id"] == truth.seq
    ]


def test_dump_time_is_a_timeout_after_the_hang(stalled: frsim.Job) -> None:
    """Dumps are taken about timeout_ms after the oldest stuck call was enqueued."""
    last = max(e["time_created_ns"] for r in range(16) for e in entries(stalled, r))
    started = [
        e["time_discovered_started_ns"] for e in entries(stalled, 4) if e["state"] == "started"
    ]
    assert started and 595e9 < started[0] - last < 605e9


@pytest.mark.parametrize("kind", [FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE])
def test_mismatch_truth(kind: FaultKind) -> None:
    """WRONG_*: the culprit's entry differs from its peers' at the truth's (group, seq)."""
    job = simulate(JobSpec(**SMALL, fault=Fault(kind=kind, rank=6, step=3, op_index=1)))
    truth = job.truth
    assert truth.hung and truth.culprit_ranks == (6,)

    def at_seq(rank: int) -> dict[str, Any]:
        (e,) = [
            e
            for e in entries(job, rank)
            if e["process_group"][0] == truth.group_name
            and e["collective_seq_id"] == truth.seq
            and not e["is_p2p"]
        ]
        return e

    mine, peer = at_seq(6), at_seq(next(r for r in truth.group_ranks if r != 6))
    field = {
        FaultKind.WRONG_OP: "profiling_name",
        FaultKind.WRONG_SIZE: "input_sizes",
        FaultKind.WRONG_DTYPE: "input_dtypes",
    }[kind]
    assert mine[field] != peer[field]
    assert peer["profiling_name"] == f"nccl:{truth.op}"
    assert mine["state"] == peer["state"] == "started"


def test_opposite_order_is_a_cycle() -> None:
    """OPPOSITE_ORDER: the rank that swapped is the culprit; each is stuck where the other isn't."""
    job = simulate(JobSpec(**SMALL, fault=Fault(kind=FaultKind.OPPOSITE_ORDER, rank=5, step=3)))
    truth = job.truth
    assert truth.culprit_ranks == (6,)
    (a, g1, b), (b2, g2, a2) = truth.cycle
    assert (a, b, b2, a2) == (5, 6, 6, 5) and g2 == "0"
    head = {r: next(e for e in entries(job, r) if e["state"] == "started") for r in (5, 6)}
    assert head[5]["process_group"][0] == g1 and head[6]["process_group"][0] == g2


def test_p2p_no_peer_truth() -> None:
    """P2P_NO_PEER: the sender is stuck in a send its receiver never matched."""
    job = simulate(JobSpec(**SMALL, fault=Fault(kind=FaultKind.P2P_NO_PEER, rank=9, step=3)))
    truth = job.truth
    assert truth.culprit_ranks == (9,) and truth.seq_kind == "p2p" and truth.op == "send"
    sender = [
        e
        for e in entries(job, 1)
        if e["process_group"][0] == truth.group_name and e["p2p_seq_id"] == truth.seq
    ]
    assert [e["profiling_name"] for e in sender] == ["nccl:send 0->1", "nccl:coalesced"]
    assert sender[-1]["state"] == "started"


def test_straggler_arrives_late_but_job_completes() -> None:
    """STRAGGLER: no hang; the straggler enqueues the first collective of a step late."""
    job = simulate(JobSpec(**SMALL, fault=Fault(kind=FaultKind.STRAGGLER, rank=2, delay_ms=300)))
    assert not job.truth.hung and job.truth.straggler_ranks == (2,)

    def first_broadcasts(rank: int) -> dict[int, int]:
        return {
            e["collective_seq_id"]: e["time_created_ns"]
            for e in entries(job, rank)
            if e["profiling_name"] == "nccl:broadcast"
        }

    late, peer = first_broadcasts(2), first_broadcasts(1)
    lags = [late[s] - peer[s] for s in late.keys() & peer.keys()]
    assert lags and all(lag > 250e6 for lag in lags)


def test_timing_off_has_no_started_state_or_durations() -> None:
    """Without TORCH_NCCL_ENABLE_TIMING: no 'started', no duration_ms, last_started -1."""
    job = simulate(JobSpec(**SMALL, timing=False, fault=Fault(kind=FaultKind.HOST_STALL, rank=5)))
    for rank in (4, 5):
        dump = dump_object(job, rank)
        assert {e["state"] for e in dump["entries"]} <= {"scheduled", "completed"}
        assert not [e for e in dump["entries"] if "duration_ms" in e]
        assert {s["last_started_collective"] for s in dump["pg_status"].values()} == {-1}


@pytest.mark.parametrize("version", VERSIONS)
def test_version_field_sets(stalled: frsim.Job, version: str) -> None:
    """Each version writes exactly the keys its torch release wrote."""
    dump = dump_object(stalled, 4, version)
    es = dump if version == "2.2" else dump["entries"]
    if version != "2.2":
        assert list(dump) == TOP_KEYS[version]
        assert dump["version"] == version
    for e in es:
        assert set(e) - {"duration_ms"} == ENTRY_KEYS[version]
    assert any("duration_ms" in e for e in es) == (version != "2.2")


def test_version_recording_differences(stalled: frsim.Job) -> None:
    """Old versions lack per-op coalesced entries and ranks in p2p names."""
    new = [e["profiling_name"] for e in entries(stalled, 13, "2.10")]
    v14 = [e["profiling_name"] for e in entries(stalled, 13, "1.4")]
    v22 = [e["profiling_name"] for e in entries(stalled, 13, "2.2")]
    assert "nccl:_broadcast_oop" in new and "nccl:_broadcast_oop" not in v14
    assert "nccl:recv 1<-0" in v14 and "nccl:recv 1<-0" not in v22
    config = dump_object(stalled, 13, "1.4")["pg_config"]
    assert config[0] == list(range(16)) and all(isinstance(k, int) for k in config)


def test_json_differs_from_pickle_as_torch_does(stalled: frsim.Job) -> None:
    """JSON: no frames, 0 for unset times, lists for tuples, string pg_status, sorted keys."""
    raw = dump_bytes(stalled, 4, "2.10", "json")
    doc = json.loads(raw)
    obj = dump_object(stalled, 4)
    assert list(doc) == sorted(doc) and "nccl_comm_state" in doc
    assert "nccl_comm_state" not in obj
    assert len(doc["entries"]) == len(obj["entries"])
    for j, p in zip(doc["entries"], obj["entries"], strict=True):
        assert list(j) == sorted(j) and "frames" not in j
        assert j["process_group"] == list(p["process_group"])
        assert j["time_discovered_started_ns"] == (p["time_discovered_started_ns"] or 0)
    assert all(isinstance(v, str) for s in doc["pg_status"].values() for v in s.values())
    assert raw == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(ValueError, match="JSON"):
        dump_bytes(stalled, 4, "2.1", "json")


def test_json_omits_empty_entries() -> None:
    """A rank with the recorder off (buffer_size 0) writes no 'entries' key in JSON."""
    sizes = (0,) + (50,) * 15
    job = simulate(JobSpec(**{**SMALL, "buffer_size": sizes}))
    doc = json.loads(dump_bytes(job, 0, "2.10", "json"))
    assert "entries" not in doc and doc["pg_config"] == {}
    assert dump_object(job, 0)["entries"] == []


def test_pickle_is_protocol_2_plain_and_shares_frames(stalled: frsim.Job) -> None:
    """Protocol 2, no GLOBAL/REDUCE; equal frames unpickle to one dict as in torch's dumps."""
    raw = dump_bytes(stalled, 4, "2.10", "pickle")
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    assert raw[:2] == b"\x80\x02" and not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE"}
    es = pickle.loads(raw)["entries"]
    assert es[0]["frames"] is not es[1]["frames"]
    assert es[-1]["frames"][-1] is es[-2]["frames"][-1]
    unshared = pickle.loads(dump_bytes(stalled, 4, "2.10", "pickle", share_frames=False))
    assert unshared["entries"][-1]["frames"][-1] is not unshared["entries"][-2]["frames"][-1]
    assert len(es[0]["frames"]) == 9


def test_deterministic_for_a_seed() -> None:
    """Same spec, same bytes; another seed, other times."""
    spec = JobSpec(**SMALL, fault=Fault(kind=FaultKind.WRONG_OP, rank=3))
    a, b = simulate(spec), simulate(spec)
    other = simulate(JobSpec(**{**SMALL, "seed": 1}, fault=Fault(kind=FaultKind.WRONG_OP, rank=3)))
    for rank in (0, 3, 15):
        assert dump_bytes(a, rank, "2.10", "pickle") == dump_bytes(b, rank, "2.10", "pickle")
        assert dump_bytes(a, rank, "2.10", "pickle") != dump_bytes(other, rank, "2.10", "pickle")
    assert a.truth == b.truth


def test_group_naming_and_pg_ids(healthy: frsim.Job) -> None:
    """pg_config lists only member groups; names are a global counter; pg_id per process."""
    config = dump_object(healthy, 5)["pg_config"]
    assert config["0"] == {"name": "0", "desc": "default_pg", "ranks": str(list(range(16)))}
    assert {v["desc"] for v in config.values()} == {"default_pg", "mesh_pp", "mesh_dp", "mesh_tp"}
    assert {v["ranks"] for v in config.values() if v["desc"] == "mesh_tp"} == {"[4, 5, 6, 7]"}
    pg_ids = {e["process_group"][1]: e["pg_id"] for e in entries(healthy, 5)}
    assert pg_ids == {"default_pg": 0, "mesh_pp": 1, "mesh_dp": 2, "mesh_tp": 3}
    hashed = simulate(JobSpec(**{**SMALL, "group_naming": "hashed"}))
    names = [n for n in dump_object(hashed, 5)["pg_config"] if n != "0"]
    assert all(len(n) == 40 for n in names)


def test_write_dumps_and_missing_ranks(tmp_path: Path) -> None:
    """One file per rank named <prefix><rank>; MISSING_DUMP ranks are left out."""
    job = simulate(
        JobSpec(
            **{**SMALL, "steps": 3}, fault=Fault(kind=FaultKind.MISSING_DUMP, rank=3, missing=(7,))
        )
    )
    assert job.truth.missing_ranks == (3, 7) and not job.truth.hung
    paths = write_dumps(job, tmp_path / "d", fmt="json", prefix="rank_")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(p.name for p in paths)
    assert "rank_3" not in {p.name for p in paths} and len(paths) == 14
    write_dumps(job, tmp_path / "all", missing_ranks=())
    assert len(list((tmp_path / "all").iterdir())) == 16


def test_detectable_false_when_evidence_is_missing() -> None:
    """A mismatch whose only evidence is in a missing dump is not detectable."""
    fault = Fault(kind=FaultKind.WRONG_DTYPE, rank=6, missing=(6,))
    truth = simulate(JobSpec(**SMALL, fault=fault)).truth
    assert truth.hung and not truth.detectable and "6" in truth.reason


def test_cli_writes_truth_next_to_dumps(tmp_path: Path) -> None:
    """`python -m frsim` fills every buffer and puts <dir>.truth.json beside the directory."""
    out = tmp_path / "job"
    cmd = [
        sys.executable,
        "-m",
        "frsim",
        "--world",
        "16",
        "--tp",
        "4",
        "--pp",
        "2",
        "--entries",
        "100",
        "--fault",
        "host_stall",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    truth = json.loads((tmp_path / "job.truth.json").read_text())
    assert truth["kind"] == "host_stall" and truth["hung"] is True
    assert not list(out.glob("*.json")) and len(list(out.iterdir())) == 16
    for path in out.iterdir():
        dump = pickle.loads(path.read_bytes())
        assert len(dump["entries"]) == 100 and dump["entries"][0]["record_id"] > 0


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch's analyzer is not installed"
)
def test_torch_analyzer_reads_the_dumps(tmp_path: Path) -> None:
    """torch's own fr_trace analyzer loads frsim's 2.10 dumps without crashing."""
    job = simulate(
        JobSpec(
            world_size=8,
            tp=2,
            steps=3,
            buffer_size=80,
            fault=Fault(kind=FaultKind.WRONG_SIZE, rank=3),
        )
    )
    write_dumps(job, tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.flight_recorder.fr_trace",
        str(tmp_path),
        "-p",
        "nccl_trace_rank_",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.stderr + run.stdout


def test_spec_validation_names_the_field() -> None:
    """Bad specs fail with a ValueError that names the offending field."""
    with pytest.raises(ValueError, match="world_size"):
        JobSpec(world_size=10, tp=4)
    with pytest.raises(ValueError, match="P2P_NO_PEER"):
        JobSpec(world_size=8, tp=2, pp=2, fault=Fault(kind=FaultKind.P2P_NO_PEER, rank=1))
    with pytest.raises(ValueError, match="buffer_size"):
        JobSpec(world_size=4, buffer_size=(10, 10))


HANGS = [
    FaultKind.HOST_STALL,
    FaultKind.WRONG_OP,
    FaultKind.WRONG_SIZE,
    FaultKind.WRONG_DTYPE,
    FaultKind.OPPOSITE_ORDER,
    FaultKind.P2P_NO_PEER,
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mesh=st.sampled_from([(8, 2, 2), (8, 1, 2), (12, 2, 3), (16, 4, 1), (8, 2, 4)]),
    kind=st.sampled_from(HANGS),
    rank_pick=st.integers(0, 10_000),
    step=st.integers(0, 3),
    batched=st.booleans(),
    coalesced=st.booleans(),
    micro=st.integers(1, 3),
    lookahead=st.integers(0, 3),
)
def test_hang_truth_matches_dumps(
    mesh: tuple[int, int, int],
    kind: FaultKind,
    rank_pick: int,
    step: int,
    batched: bool,
    coalesced: bool,
    micro: int,
    lookahead: int,
) -> None:
    """For any hang: culprits are not waiting, every waiting rank's dump shows an unfinished
    call, and a HOST_STALL culprit shows none."""
    world, tp, pp = mesh
    first = world // pp if kind is FaultKind.P2P_NO_PEER else 0
    if kind is FaultKind.P2P_NO_PEER and pp < 2:
        return
    rank = first + rank_pick % (world - first)
    spec = JobSpec(
        world_size=world,
        tp=tp,
        pp=pp,
        steps=4,
        buffer_size=60,
        microbatches=micro,
        batched_p2p=batched,
        coalesced=coalesced,
        lookahead=lookahead,
        fault=Fault(kind=kind, rank=rank, step=step),
    )
    job = simulate(spec)
    truth = job.truth
    assert truth.hung and truth.detectable
    # OPPOSITE_ORDER blames the partner whose program was swapped, not Fault.rank
    assert rank in truth.culprit_ranks or kind is FaultKind.OPPOSITE_ORDER
    assert not set(truth.culprit_ranks) & set(truth.waiting_ranks)
    for r in truth.waiting_ranks:
        assert unfinished(dump_object(job, r)), r
    if kind is FaultKind.HOST_STALL:
        assert unfinished(dump_object(job, rank)) == []


# --- capture moments (issue 10) ------------------------------------------------------------

STALL = Fault(kind=FaultKind.HOST_STALL, rank=5, step=4)


def timed_out(retired: str, **extra: Any) -> frsim.Job:
    """SMALL with rank 5 stalled, lookahead 0 (nothing queued behind the hung call), dumped
    after every blocked rank's own timeout."""
    capture = Capture(moment=Moment.TIMEOUT, retired=retired)  # type: ignore[arg-type]
    return simulate(JobSpec(**{**SMALL, "lookahead": 0, **extra}, fault=STALL, capture=capture))


def hung_entry(job: frsim.Job, rank: int) -> dict[str, Any]:
    (e,) = [
        e
        for e in entries(job, rank)
        if e["process_group"][0] == job.truth.group_name
        and e["collective_seq_id"] == job.truth.seq
        and not e["is_p2p"]
    ]
    return e


@pytest.mark.parametrize("retired", ["before", "after"])
def test_post_timeout_hung_entry_and_pg_status(retired: str) -> None:
    """After the timeout: the hung call is pending (dump first) or retired without completing
    (retire first); pg_status: last enqueued = its seq, last completed = the one before."""
    job = timed_out(retired)
    truth = job.truth
    assert truth.moment is Moment.TIMEOUT and truth.culprit_ranks == (5,)
    assert truth.timed_out_ranks == truth.waiting_ranks
    assert truth.retired_ranks == (truth.waiting_ranks if retired == "after" else ())
    waiters = [r for r in truth.group_ranks if r != 5]
    for rank in waiters:
        e = hung_entry(job, rank)
        assert e["retired"] is (retired == "after")
        assert e["state"] == "started"  # timing on; "completed" never
        assert e["time_discovered_completed_ns"] is None and "duration_ms" not in e
        assert e["timeout_ms"] == 600_000
        # the dump (or the retirement just before it) came a timeout after the call
        assert e["time_discovered_started_ns"] - e["time_created_ns"] >= 600_000 * 10**6 - 10**8
        status = dump_object(job, rank)["pg_status"][str(e["pg_id"])]
        assert status["last_enqueued_collective"] == truth.seq
        assert status["last_completed_collective"] == truth.seq - 1
    # the culprit never entered the call: no entry for it
    assert not [
        e
        for e in entries(job, 5)
        if e["process_group"][0] == truth.group_name and e["collective_seq_id"] == truth.seq
    ]
    # dump times: at least a timeout after each blocked rank's hung call
    tail = job.tail
    assert tail is not None
    for rank in truth.waiting_ranks:
        assert job.dump_us[rank] >= tail.post[rank][tail.head[rank]] + 600_000_000


def test_post_timeout_without_timing_is_scheduled_and_json_has_zero_times() -> None:
    """Timing off: the timed-out call stays 'scheduled' (retired or not); JSON writes 0."""
    job = timed_out("after", timing=False)
    e = hung_entry(job, 4)
    assert (e["state"], e["retired"], e["time_discovered_completed_ns"]) == (
        "scheduled",
        True,
        None,
    )
    doc = json.loads(dump_bytes(job, 4, "2.10", "json"))
    (j,) = [
        j
        for j in doc["entries"]
        if j["collective_seq_id"] == job.truth.seq and j["process_group"][0] == job.truth.group_name
    ]
    assert j["retired"] is True and j["time_discovered_completed_ns"] == 0
    assert j["state"] == "scheduled"


def test_retire_race_either_flips_a_coin_per_rank() -> None:
    """retired='either': some ranks dumped first, others retired first, as the truth says."""
    job = timed_out("either", world_size=16)
    truth = job.truth
    assert set(truth.retired_ranks) < set(truth.timed_out_ranks) and truth.retired_ranks
    for rank in truth.group_ranks:
        if rank != 5:
            assert hung_entry(job, rank)["retired"] is (rank in truth.retired_ranks)


def test_mixed_moments_dump_early_or_after_the_timeout() -> None:
    """MIXED: early ranks dumped before any timeout (nothing retired, the hung call younger
    than the timeout); the others after their own; a missing rank wrote nothing."""
    fault = Fault(kind=FaultKind.HOST_STALL, rank=5, step=4, missing=(9,))
    capture = Capture(moment=Moment.MIXED, retired="after")
    job = simulate(JobSpec(**SMALL, fault=fault, capture=capture))
    truth = job.truth
    assert truth.culprit_ranks == (5,) and truth.missing_ranks == (9,)
    early = [r for r in truth.waiting_ranks if r not in truth.timed_out_ranks]
    assert early and truth.timed_out_ranks
    assert truth.retired_ranks == truth.timed_out_ranks
    tail = job.tail
    assert tail is not None
    first_timeout = min(tail.post[r][tail.head[r]] for r in truth.waiting_ranks) + 600e6
    for rank in early:
        assert job.dump_us[rank] < first_timeout
        pending = [e for e in entries(job, rank) if not e["retired"]]
        assert pending and all(e["state"] != "completed" or not e["retired"] for e in pending)
    for rank in truth.timed_out_ranks:
        assert job.dump_us[rank] >= tail.post[rank][tail.head[rank]] + 600e6


def test_snapshot_of_a_running_job() -> None:
    """SNAPSHOT: healthy truth; nothing recorded after a rank's dump; ranks at different
    places; recent completions not yet retired; pending calls created moments before."""
    capture = Capture(moment=Moment.SNAPSHOT, step=3, at=0.4, skew_us=300.0)
    # no coalescing: every pending non-p2p entry is a work (per-op entries never change)
    job = simulate(JobSpec(**SMALL, coalesced=False, capture=capture))
    truth = job.truth
    assert not truth.hung and truth.culprit_ranks == () and truth.detectable
    assert truth.moment is Moment.SNAPSHOT
    assert float(job.dump_us.max() - job.dump_us.min()) <= 300.0
    heads, unretired = set(), 0
    for rank in range(16):
        es = entries(job, rank)
        dump_ns = job.epoch_ns + int(job.clock_offset_ns[rank]) + int(job.dump_us[rank] * 1000)
        assert max(e["time_created_ns"] for e in es) <= dump_ns
        pending = [e for e in es if e["state"] != "completed"]
        assert all(dump_ns - e["time_created_ns"] < 10**9 for e in pending)  # far below 600 s
        work = [e for e in pending if not e["is_p2p"]]
        heads.add((work[0]["profiling_name"], work[0]["state"]))
        unretired += any(e["state"] == "completed" and not e["retired"] for e in es)
    assert len(heads) > 2  # ranks at different places: inside a call, or not started it yet
    assert unretired  # the watchdog (100 ms ticks) has not retired the latest completions


def test_snapshot_needs_a_healthy_job_and_timeout_a_hang() -> None:
    """SNAPSHOT with a hanging fault, or TIMEOUT/MIXED without one, is refused."""
    with pytest.raises(ValueError, match="snapshot"):
        JobSpec(**SMALL, fault=STALL, capture=Capture(moment=Moment.SNAPSHOT))
    with pytest.raises(ValueError, match="hangs"):
        JobSpec(**SMALL, capture=Capture(moment=Moment.TIMEOUT))
    with pytest.raises(ValueError, match="retired"):
        Capture(retired="never")  # type: ignore[arg-type]


def test_only_active_without_stacks() -> None:
    """onlyActive=True, no stacks: no completed entry, no 'frames'; the stalled rank has
    entries [] (JSON: no key) and only its pg_status shows where it stopped."""
    capture = Capture(moment=Moment.TIMEOUT, retired="after", only_active=True, stacks=False)
    job = simulate(
        JobSpec(**SMALL, coalesced=False, batched_p2p=False, fault=STALL, capture=capture)
    )
    for rank in range(16):
        for e in entries(job, rank):
            assert "frames" not in e and e["time_discovered_completed_ns"] is None
    culprit = dump_object(job, 5)
    assert culprit["entries"] == [] and unfinished(culprit) == []
    assert "entries" not in json.loads(dump_bytes(job, 5, "2.10", "json"))
    tp_pg = str(hung_entry(job, 4)["pg_id"])
    assert culprit["pg_status"][tp_pg]["last_completed_collective"] == job.truth.seq - 1
    assert next(e["retired"] for e in entries(job, 4)) is True


def test_only_active_keeps_per_op_entries_of_finished_batches() -> None:
    """torch never updates the per-op entries of a coalesced group, so onlyActive keeps
    them even after the group completed (the end entry is gone)."""
    capture = Capture(moment=Moment.TIMEOUT, only_active=True)
    job = simulate(JobSpec(**SMALL, fault=STALL, capture=capture))
    es = entries(job, 13)
    assert any(e["is_p2p"] and e["state"] == "scheduled" for e in es)
    assert not [e for e in es if e["state"] == "completed"]


def test_batched_p2p_post_timeout_end_entry_retired_parts_not() -> None:
    """A batch whose peer never posted its half, retired first: the 'coalesced' end entry is
    retired without completing; its per-op send entry stays scheduled, never retired."""
    fault = Fault(kind=FaultKind.P2P_NO_PEER, rank=9, step=3)
    capture = Capture(moment=Moment.TIMEOUT, retired="after")
    job = simulate(JobSpec(**{**SMALL, "lookahead": 0}, fault=fault, capture=capture))
    truth = job.truth
    sender = [
        e
        for e in entries(job, 1)
        if e["process_group"][0] == truth.group_name and e["p2p_seq_id"] == truth.seq
    ]
    assert [e["profiling_name"] for e in sender] == ["nccl:send 0->1", "nccl:coalesced"]
    part, end = sender
    assert (part["state"], part["retired"]) == ("scheduled", False)
    assert end["retired"] is True and end["state"] == "started"
    assert end["time_discovered_completed_ns"] is None
    assert 1 in truth.retired_ranks


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("moment", [Moment.TIMEOUT, Moment.MIXED, Moment.SNAPSHOT])
def test_capture_moments_in_every_format(version: str, moment: Moment) -> None:
    """Every moment is written in every format version (JSON where torch had it)."""
    fault = None if moment is Moment.SNAPSHOT else STALL
    capture = Capture(moment=moment, retired="either", stacks=version != "1.4")
    job = simulate(JobSpec(**SMALL, fault=fault, capture=capture))
    dump = dump_object(job, 4, version)
    es = dump if version == "2.2" else dump["entries"]
    assert es
    for e in es:
        assert set(e) - {"duration_ms"} == ENTRY_KEYS[version] - (
            {"frames"} if version == "1.4" else set()
        )
    pickle.loads(dump_bytes(job, 4, version, "pickle"))
    if version in ("2.4", "2.9", "2.10"):
        json.loads(dump_bytes(job, 4, version, "json"))
