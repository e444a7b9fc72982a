#!/usr/bin/env python3
"""Real dump sets for the recorder's blind spots and for one rank's several dumps.

Every rank is its own OS process (this file with ``--worker``), torch 2.13 CPU, Gloo,
``init_process_group("gloo", timeout=60 s)``, a small ``TORCH_FR_BUFFER_SIZE``. At its fault
point each rank arms a timer thread that writes its dumps ``DUMP_DELAY_S`` later, while the
main thread is still where the fault put it; a rank that has dumped waits until the harness
releases every rank at once. The truth in ``tests/fixtures/recorders/MANIFEST.json`` is how
each job was built, never an analyzer's answer.

* ``pickle_and_json``  rank 2 stops in host code at step 3, the others wait in its all_reduce;
                       each rank writes the two dumps torch 2.13 can write of its one recorder
                       into one folder: ``rank_<r>`` (``_dump_fr_trace()``, with stacks) and
                       ``rank_<r>.json`` (``_dump_fr_trace_json()``), milliseconds apart.
* ``monitored_barrier`` 2 ranks; every step is an all_reduce then a
                       ``dist.monitored_barrier()`` (a health check); rank 1 stops in host code
                       before step 3's barrier, rank 0 waits in it. Gloo counts a monitored
                       barrier in the group's ``collective_seq_id`` (two ids) and records
                       nothing: the buffers are clean but skip two ids a step (with two ranks
                       its send/recv count as many op_ids as the two skipped ids: nothing else
                       shows them). Dumps by ``frtrace.recorder`` (with its stack sidecars).
* ``graph_replay``     three steps of all_reduce, then every rank replays a "CUDA graph": a
                       CPU cannot run one, so the main thread is held inside torch's own
                       ``CUDAGraph.replay`` (``torch/cuda/graphs.py``; the graph's liveness
                       check, the first line that method runs, waits), the frame a GPU replay
                       shows. The buffers are clean (every entry retired). Dumps by
                       ``frtrace.recorder`` (with its stack sidecars).
* ``gloo_nccl``        a ``cpu:gloo,cuda:nccl`` job as it would leave its folder: each rank's
                       Gloo recorder (real: 8 ranks, two steps of a CPU metrics all_reduce on the
                       default group, all finished; ``comm_lib_trace_gloo_rank_<r>``, the job's
                       own ``_dump_fr_trace()``) beside its NCCL recorder's dump
                       (``comm_lib_trace_rank_<r>``, the name NCCL's watchdog writes). No CPU
                       writes an NCCL dump: that part is ``tests/fixtures/nccl/host_stall/
                       2.10-pickle`` (rank 5 stops in host code at step 3) with every time moved
                       by one constant onto the Gloo job's clock (its first entry 1 s after the
                       Gloo job's first), as one process's two recorders share one clock.

Usage::

    python3 scripts/make_recorder_fixtures.py                     # all -> tests/fixtures
    python3 scripts/make_recorder_fixtures.py --only graph_replay # one (repeatable)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
TREE = "recorders"
BUFFER = 64
PG_TIMEOUT_S = 60
DUMP_DELAY_S = 3.0
STEPS = 4
FAULT_STEP = 3
JOB_TIMEOUT_S = 150.0
NCCL_SOURCE = REPO_ROOT / "tests/fixtures/nccl/host_stall/2.10-pickle"
SHIFT_AFTER_NS = 1_000_000_000  # the NCCL part's first entry, after the Gloo job's first

JOBS: dict[str, dict[str, Any]] = {
    "pickle_and_json": {
        "world_size": 4,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault": "rank 2 stops in host code (time.sleep) at step 3; the others wait in its "
        "all_reduce",
        "fault_op": "all_reduce",
    },
    "monitored_barrier": {
        "world_size": 2,
        "culprit_ranks": [1],
        "waiting_ranks": [0],
        "fault": "rank 1 stops in host code before step 3's monitored_barrier; rank 0 waits in "
        "it (recorded by nobody)",
        "fault_op": "monitored_barrier",
    },
    "graph_replay": {
        "world_size": 4,
        "culprit_ranks": [],
        "waiting_ranks": [],
        "fault": "every rank's main thread is in CUDAGraph.replay after 3 finished steps: "
        "whatever the graph runs, no entry records it",
        "fault_op": None,
    },
    "gloo_nccl": {
        "world_size": 8,
        "culprit_ranks": [5],
        "waiting_ranks": [0, 1, 2, 3, 4, 6, 7],
        "fault": "NCCL part (nccl/host_stall): rank 5 stops in host code at step 3; Gloo part: "
        "every rank finished its two CPU all_reduces",
        "fault_op": "NCCL part: see tests/fixtures/nccl/host_stall/truth.json",
    },
}


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def worker(name: str, rank: int, world: int, port: int, out: Path, scratch: Path) -> None:
    import torch
    import torch.distributed as dist

    from frtrace import recorder

    sidecars = name in ("monitored_barrier", "graph_replay")
    if sidecars:
        recorder.enable(out, buffer_size=BUFFER, signals=(), on_exception=False, verbose=False)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
    )
    c10d = torch._C._distributed_c10d
    c10d._dump_fr_trace()  # (the first dump of a process is slow: made before the job)
    t = torch.full((16,), float(rank + 1))

    def dumps() -> None:
        if sidecars:
            recorder.dump("make_recorder_fixtures", rank=rank)
        elif name == "gloo_nccl":
            _write(out / f"comm_lib_trace_gloo_rank_{rank}", c10d._dump_fr_trace())
        else:
            _write(out / f"rank_{rank}", c10d._dump_fr_trace())
            _write(out / f"rank_{rank}.json", c10d._dump_fr_trace_json())
        (scratch / f"dumped_{rank}").touch()
        _released(scratch)
        os._exit(0)

    def arm() -> None:
        threading.Timer(DUMP_DELAY_S, dumps).start()

    if name == "gloo_nccl":
        for _ in range(2):
            dist.all_reduce(t)
        arm()
        time.sleep(JOB_TIMEOUT_S)
    for step in range(1, STEPS + 1):
        if name == "graph_replay" and step == FAULT_STEP + 1:
            arm()
            _replay_held(scratch)
        if name == "pickle_and_json" and step == FAULT_STEP:
            arm()
            if rank == 2:
                time.sleep(JOB_TIMEOUT_S)  # host code: a data shard that never comes
        dist.all_reduce(t)
        if name == "monitored_barrier":
            if step == FAULT_STEP:
                arm()
                if rank == 1:
                    time.sleep(JOB_TIMEOUT_S)
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    time.sleep(JOB_TIMEOUT_S)


def _replay_held(scratch: Path) -> None:
    """Enter torch's ``CUDAGraph.replay`` and stay there: on a CPU build the graph object is
    made without its (dummy) C++ base, and its liveness tracker, which ``replay`` asks first,
    waits for the release."""
    from torch.cuda.graphs import CUDAGraph

    class Held:
        def check_alive(self, pool: object) -> None:
            _released(scratch)
            time.sleep(JOB_TIMEOUT_S)  # (the dump's thread ends the process)

    graph = object.__new__(CUDAGraph)
    graph._tracker = Held()  # type: ignore[assignment]
    graph.pool = lambda: None  # type: ignore[method-assign]
    graph.replay()


def _released(scratch: Path) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (scratch / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _write(path: Path, data: bytes | str) -> None:
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(raw)
    tmp.rename(path)


# --------------------------------------------------------------------------------------------
# Harness side.
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(name: str, out: Path) -> None:
    world = JOBS[name]["world_size"]
    scratch = out.parent / f".scratch_{name}"
    for folder in (out, scratch):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    port = _free_port()
    env = os.environ | {"TORCH_FR_BUFFER_SIZE": str(BUFFER), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--worker",
                name,
                "--rank",
                str(r),
                "--world",
                str(world),
                "--port",
                str(port),
                "--out",
                str(out),
                "--scratch",
                str(scratch),
            ],
            env=env,
        )
        for r in range(world)
    ]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        if all((scratch / f"dumped_{r}").exists() for r in range(world)):
            break
        if any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.1)
    (scratch / "release").touch()
    codes = [p.wait(timeout=60) for p in procs]
    shutil.rmtree(scratch, ignore_errors=True)
    if any(codes) or not all(_dumped(out, name, r) for r in range(world)):
        raise SystemExit(f"{name}: the job did not run as built (exit codes {codes})")
    for leftover in out.glob("*.part"):
        leftover.unlink()
    if name == "gloo_nccl":
        _nccl_part(out, world)


def _dumped(out: Path, name: str, rank: int) -> bool:
    names = {
        "pickle_and_json": [f"rank_{rank}", f"rank_{rank}.json"],
        "gloo_nccl": [f"comm_lib_trace_gloo_rank_{rank}"],
    }.get(name, [f"comm_lib_trace_rank_{rank}", f"stacks_rank_{rank}.json"])
    return all((out / n).is_file() for n in names)


def _nccl_part(out: Path, world: int) -> None:
    """Each rank's NCCL recorder's dump: the NCCL-format fixture's, every time moved by one
    constant so that its first entry comes ``SHIFT_AFTER_NS`` after the Gloo job's first."""
    gloo_first = min(
        e["time_created_ns"]
        for r in range(world)
        for e in pickle.loads((out / f"comm_lib_trace_gloo_rank_{r}").read_bytes())["entries"]
    )
    docs = {
        r: pickle.loads((NCCL_SOURCE / f"nccl_trace_rank_{r}").read_bytes()) for r in range(world)
    }
    nccl_first = min(e["time_created_ns"] for d in docs.values() for e in d["entries"])
    shift = gloo_first + SHIFT_AFTER_NS - nccl_first
    for r, doc in docs.items():
        for e in doc["entries"]:
            for key in (
                "time_created_ns",
                "time_discovered_started_ns",
                "time_discovered_completed_ns",
            ):
                if e.get(key):
                    e[key] += shift
        (out / f"comm_lib_trace_rank_{r}").write_bytes(pickle.dumps(doc, protocol=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(JOBS))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests/fixtures")
    parser.add_argument("--worker")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--scratch", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rank, args.world, args.port, args.out, args.scratch)
        return
    import torch

    manifest_path = args.out / TREE / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in args.only or sorted(JOBS):
        started = time.monotonic()
        run_job(name, args.out / TREE / name)
        manifest[name] = JOBS[name] | {
            "torch_version": torch.__version__,
            "buffer_size": BUFFER,
            "files": sorted(p.name for p in (args.out / TREE / name).iterdir()),
        }
        print(f"{name}: {time.monotonic() - started:.1f} s", flush=True)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")


if __name__ == "__main__":
    main()
