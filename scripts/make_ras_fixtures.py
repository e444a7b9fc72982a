"""Write the NCCL RAS fixtures: what ``ncclras -f json`` (and its monitor, ``-m -f json``)
would have printed beside three committed NCCL dump sets, in NCCL's own JSON layout.

No GPU is needed, and none was used: RAS's output is written byte for byte the way NCCL's
client writes it (NVIDIA/nccl ``src/ras/client_support.cc``: ``jsonWriteHeader``,
``jsonStartCommunicator``, ``jsonWriteRankData``, ``jsonWriteMissingRank``,
``jsonWriteFooter``; the monitor's events: ``rasClientsNotifyEvent``; the fields:
``docs/userguide/source/troubleshooting/ras.rst``), from the truth of each job:

- each communicator is one of the job's groups (its ``pg_config``), with that group's ranks;
- ``collective_counts``: each NCCL function's operations a rank launched on that communicator
  (NCCL's ``comm->seqNumber``, counted per collective task: ``src/plugin/profiler.cc``). For the
  simulated jobs, counted from the simulator's full history of the same job (``frsim`` run again
  with an unbounded ring buffer: its last entries are the committed dumps', checked here);
  for the real one, from its dump (its ring buffer never wrapped). A torch op is one launch of
  its function (``all_reduce``, ``barrier``: AllReduce; ``broadcast``; ``reduce``;
  ``all_gather*``: AllGather; ``reduce_scatter*``: ReduceScatter), a fast-path coalesced op one
  per tensor; send/recv and all_to_all are counted by no function (NCCL counts five);
- hosts and pids: the simulated jobs' invented (two hosts, four ranks each; RAS prints an
  address), the real job's pid from its stacks sidecar;
- who RAS cannot reach: the job's truth (a rank that hung hard and wrote no dump is unreachable
  and, after RAS's 60 s, considered dead).

    python3 scripts/make_ras_fixtures.py           # rewrites tests/fixtures/ras/

Deterministic. Layout: ``tests/fixtures/ras/<scenario>/ncclras*.json`` and
``tests/fixtures/ras/MANIFEST.json`` (for each: the dump set it goes with, how it was made, and
what an analysis must find: the truth from construction).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_nccl_fixtures import MESH, SCENARIOS  # noqa: E402

from frsim import JobSpec, simulate, write_dumps  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")  # ncclFunc_t order
STAMP = "2026-11-20 14:03:11"  # the answering host's local time ("%F %T"): display only


def function_of(op: str) -> str | None:
    """The NCCL function a torch op launches (None: none of the five RAS counts)."""
    op = op.split(":", 1)[-1].lower()
    if "reduce_scatter" in op:
        return "ReduceScatter"
    if "all_gather" in op or "allgather" in op:
        return "AllGather"
    if "all_reduce" in op or "allreduce" in op or op == "barrier":
        return "AllReduce"
    if "broadcast" in op:
        return "Broadcast"
    if op == "reduce":
        return "Reduce"
    return None


def launches(entries: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Per group name, each function's launches (a fast-path coalesced op: one per tensor)."""
    out: dict[str, Counter[str]] = {}
    for e in entries:
        name = str(e["profiling_name"])
        func = function_of(name)
        if func is None:
            continue
        n = len(e["input_sizes"]) if name.endswith("_coalesced") else 1
        out.setdefault(str(e["process_group"][0]), Counter())[func] += n
    return out


def _hex(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16].lstrip("0") or "0"


def status_json(
    comms: list[dict[str, Any]], version: str, runtime: int = 12080, driver: int = 12080
) -> str:
    """One ``ncclras -f json`` answer, as ``rasDumpCommsToJSON`` appends it."""
    out = ["{\n"]
    out.append(f'  "nccl_version": "{version}",\n')
    out.append(f'  "cuda_runtime_version": {runtime},\n')
    out.append(f'  "cuda_driver_version": {driver},\n')
    out.append(f'  "timestamp": "{STAMP}",\n')
    out.append(f'  "communicators_count": {len(comms)},\n')
    out.append('  "communicators": [\n')
    for i, c in enumerate(comms):
        if i:
            out.append(",\n")
        out.append("    {\n")
        out.append(f'      "hash": "0x{c["hash"]}",\n')
        out.append(f'      "secondary_hash": "0x{c["host_hash"]}:0x{c["pid_hash"]}",\n')
        out.append(f'      "size": {c["size"]},\n')
        out.append(f'      "ranks_count": {len(c["ranks"])},\n')
        out.append(f'      "missing_ranks_count": {len(c["missing"])},\n')
        out.append('      "ranks": [\n')
        for j, r in enumerate(c["ranks"]):
            if j:
                out.append(",\n")
            out.append(_rank(r))
        out.append('\n      ],\n      "missing_ranks": [\n')
        for j, m in enumerate(c["missing"]):
            if j:
                out.append(",\n")
            out.append(_missing(m))
        out.append("\n      ]\n    }")
    out.append('\n  ],\n  "ras": {\n')
    out.append('    "collection_time_sec": 0.004,\n')
    timeouts = 2 if any(c["missing"] for c in comms) else 0  # (RAS's legs to the unreachable)
    out.append(f'    "timeouts_count": {timeouts}\n')
    out.append("  }\n}\n")
    return "".join(out)


def _head(r: dict[str, Any]) -> str:
    return (
        "        {\n"
        f'          "rank": {r["rank"]},\n'
        f'          "host": "{r["host"]}",\n'
        f'          "pid": {r["pid"]},\n'
        f'          "cuda_dev": {r["dev"]},\n'
        f'          "nvml_dev": {r["dev"]},\n'
        '          "status": {\n'
    )


def _rank(r: dict[str, Any]) -> str:
    counts = ",\n".join(f'            "{f}": {r["counts"].get(f, 0)}' for f in FUNCTIONS)
    return (
        _head(r)
        + '            "init_state": 0,\n'
        + '            "async_error": 0,\n'
        + '            "finalize_called": false,\n'
        + '            "destroy_flag": false,\n'
        + '            "abort_flag": false\n'
        + "          },\n"
        + '          "collective_counts": {\n'
        + counts
        + "\n          }\n        }"
    )


def _missing(m: dict[str, Any]) -> str:
    return (
        _head(m)
        + f'            "unresponsive": {str(m["unresponsive"]).lower()},\n'
        + f'            "considered_dead": {str(m["dead"]).lower()}\n'
        + "          }\n        }"
    )


def event_json(host: str, pid: int, dev: int, event: str, stamp: str) -> str:
    """One monitor event about a known process, as ``rasClientsNotifyEvent`` formats it."""
    return (
        "{\n"
        f'  "timestamp": "{stamp}",\n'
        '  "group": "LIFECYCLE",\n'
        f'  "event": "{event}",\n'
        '  "peer": {\n'
        f'    "host": "{host}",\n'
        f'    "pid": {pid},\n'
        f'    "cuda_devs": [{dev}],\n'
        f'    "nvml_devs": [{dev}]\n'
        "  },\n"
        '  "details": ""\n'
        "}\n"
    )


def _groups(dumps: Path) -> list[tuple[str, str, tuple[int, ...]]]:
    """Every (name, desc, ranks) the dumps' ``pg_config`` lists, in name order."""
    seen: set[tuple[str, str, tuple[int, ...]]] = set()
    for f in sorted(dumps.iterdir()):
        doc = pickle.loads(f.read_bytes())
        for g in doc["pg_config"].values():
            seen.add((g["name"], g["desc"], tuple(json.loads(g["ranks"]))))
    return sorted(seen, key=lambda g: (int(g[0]), g[2]))


def _process(rank: int) -> dict[str, Any]:
    return {"host": f"10.0.0.{1 + rank // 4}", "pid": 4100 + rank, "dev": rank % 4}


def simulated(name: str, gone: set[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The communicators of a simulated job (``nccl/<name>``), ``gone`` unreachable and
    dead; and what an analysis must find."""
    mesh: dict[str, Any] = MESH | {"buffer_size": 100_000}  # (every entry: nothing wraps)
    spec = JobSpec(**mesh, fault=SCENARIOS[name])
    job = simulate(spec)
    committed = FIXTURES / "nccl" / name / "2.10-pickle"
    counts: dict[int, dict[str, Counter[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_dumps(job, Path(tmp), version="2.10", fmt="pickle", processes=1)
        for f in sorted(Path(tmp).iterdir()):
            rank = int(f.name.rsplit("_", 1)[1])
            entries = pickle.loads(f.read_bytes())["entries"]
            small = committed / f.name
            if small.exists():  # (the same job: the committed ring buffer is its last entries)
                tail = pickle.loads(small.read_bytes())["entries"]
                assert entries[-len(tail) :] == tail, f"{name} rank {rank}: not the same job"
            counts[rank] = launches(entries)
    comms = []
    behind: dict[str, dict[str, list[int]]] = {}
    for gname, desc, ranks in _groups(committed):
        members = []
        for i, r in enumerate(ranks):
            who = {"rank": i, **_process(r)}
            if r in gone:
                members.append(("missing", who | {"unresponsive": True, "dead": True}))
            else:
                members.append(("rank", who | {"counts": counts[r].get(gname, Counter())}))
        present = [m for k, m in members if k == "rank"]
        comms.append(
            {
                "hash": _hex(name, gname, ranks),
                "host_hash": _hex("host", ranks[0]),
                "pid_hash": _hex("pid", ranks[0]),
                "size": len(ranks),
                "ranks": present,
                "missing": [m for k, m in members if k == "missing"],
            }
        )
        for func in FUNCTIONS:
            top = max((m["counts"].get(func, 0) for m in present), default=0)
            late = [ranks[m["rank"]] for m in present if m["counts"].get(func, 0) < top]
            if late:
                behind.setdefault(f"{desc} {list(ranks)}", {})[func] = late
    truth = {
        "culprit_ranks": list(job.truth.culprit_ranks),
        "hosts": {str(r): [_process(r)["host"], _process(r)["pid"]] for r in range(8)},
        "dead": sorted(gone),
        "behind": behind,
    }
    return comms, truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURES / "ras")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    manifest: dict[str, Any] = {}

    # 1. rank 5 stops in host code: every process answers RAS, every communicator RUNNING,
    # while rank 4's broadcast #67 of mesh_tp waits on rank 5 (nccl#1730: RAS says healthy)
    comms, truth = simulated("host_stall", set())
    (args.out / "host_stall").mkdir(parents=True)
    (args.out / "host_stall" / "ncclras.json").write_text(status_json(comms, "2.29.1"))
    manifest["host_stall"] = {
        "dumps": "nccl/host_stall/2.10-pickle",
        "made": "frsim's host_stall job (unbounded buffer) in ncclras -f json's layout",
        "truth": truth | {"healthy": len(comms), "running_while_pending": ["11", 4, 67]},
    }

    # 2. rank 3 hangs hard and writes no dump: RAS cannot reach it, then considers it dead;
    # the monitor (-m -f json) printed its PEER_DEAD
    comms, truth = simulated("missing_dump", {3})
    (args.out / "rank_dead").mkdir(parents=True)
    (args.out / "rank_dead" / "ncclras.json").write_text(status_json(comms, "2.29.1"))
    p = _process(3)
    events = event_json(p["host"], p["pid"], p["dev"], "PEER_DEAD", "2026-11-20 14:02:40")
    (args.out / "rank_dead" / "ncclras_monitor.json").write_text(events)
    manifest["rank_dead"] = {
        "dumps": "nccl/missing_dump/2.10-pickle",
        "made": "frsim's missing_dump job (unbounded buffer); rank 3 missing and considered "
        "dead in each of its communicators; one PEER_DEAD event",
        "truth": truth
        | {"healthy": sum(not c["missing"] for c in comms), "running_while_pending": None},
    }

    # 3. the real one-rank NCCL job (NCCL 2.28.9, an H200) whose all_reduce #6 waits behind a
    # kernel: RAS's process answers, RUNNING, six AllReduce launched
    real = FIXTURES / "nccl_real" / "stream_busy"
    dump = pickle.loads((real / "comm_lib_trace_rank_0").read_bytes())
    pid = json.loads((real / "stacks_rank_0.json").read_text())["pid"]
    one = {"rank": 0, "host": "10.0.0.9", "pid": pid, "dev": 0}
    used = launches(dump["entries"]).get("0", Counter())
    comm = {
        "hash": _hex("stream_busy", 0),
        "host_hash": _hex("host", 0),
        "pid_hash": _hex("pid", 0),
        "size": 1,
        "ranks": [one | {"counts": used}],
        "missing": [],
    }
    (args.out / "stream_busy").mkdir(parents=True)
    (args.out / "stream_busy" / "ncclras.json").write_text(
        status_json([comm], dump["comm_lib_version"])
    )
    manifest["stream_busy"] = {
        "dumps": "nccl_real/stream_busy",
        "made": "the real dump's own launches and its sidecar's pid in ncclras -f json's "
        "layout (the host address is invented: RAS was not asked during that run)",
        "truth": {
            "culprit_ranks": [],
            "hosts": {},
            "dead": [],
            "behind": {},
            "healthy": 1,
            "running_while_pending": ["0", 0, 6],
        },
    }
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, m in manifest.items():
        print(f"{name}: beside {m['dumps']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
