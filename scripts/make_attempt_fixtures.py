#!/usr/bin/env python3
"""Real folders of restarted jobs whose attempts differ: one dies in init, one shrinks the world.

Each fixture in ``tests/fixtures/incidents/<name>/`` is what real ``torchrun`` runs of a CPU
Gloo job left in one folder: every rank a separate process, dumps written by
``frtrace.recorder`` (on the exception a timed-out or failed collective raises, or that
``init_process_group`` raises), the launchers' consoles and ``--log-dir`` folders beside. The
truth in ``MANIFEST_attempts.json`` is how each fault was built, never an analyzer's answer:

* ``restart_dies_in_init``  ``torchrun --max-restarts 1``: attempt 0 hangs (rank 2 never joins
                            the all_reduce of step 3; ranks 0, 1 and 3 time out and dump),
                            torchrun restarts, and attempt 1 dies in ``init_process_group``:
                            the job keeps its process-group keys under one prefix of the
                            agent's store for every attempt, so attempt 1's rank 2 (the first
                            to start: the others load a checkpoint first) reads attempt 0's
                            addresses and fails with Gloo's ``connectFullMesh ... Connection
                            refused``, dumping a file with no entries; torchrun stops the
                            others (still loading: no dump). ``comm_lib_trace_rank_{0,1,3}``
                            are attempt 0's, ``comm_lib_trace_rank_2`` attempt 1's.
* ``shrinking_world``       an elastic job, ``torchrun --nnodes 1:2`` on two agents (node a: 3
                            ranks, node b: 1) with a c10d rendezvous on localhost: attempt 0
                            runs 4 ranks; rank 3 (node b) raises a ValueError at step 3 and
                            node b is lost (its agent killed, SIGKILL, once rank 3 dumped:
                            arranged, as a preempted node); node a's ranks fail on the closed
                            connections, its agent restarts without node b: attempt 1 runs 3
                            ranks, rank 1 never joins the all_reduce of step 3, ranks 0 and 2
                            time out and dump. ``comm_lib_trace_rank_3`` (world 4) is attempt
                            0's, ``comm_lib_trace_rank_{0,2}`` (world 3) attempt 1's; each
                            node's console is ``node-<a|b>.log``.

Usage::

    python3 scripts/make_attempt_fixtures.py                          # both -> tests/fixtures
    python3 scripts/make_attempt_fixtures.py --only shrinking_world   # one (repeatable)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _free_port
from make_incident_fixtures import _env, _wait, file_times

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
TREE = "incidents"
MANIFEST = "MANIFEST_attempts.json"
WORLD = 4
BUFFER = 64  # TORCH_FR_BUFFER_SIZE: every entry of these short jobs kept
PG_TIMEOUT_S = 30  # a hung all_reduce raises after this (a loaded machine is slow, not hung)
INIT_TIMEOUT_S = 90  # init waits for every rank's process, slow to start on a loaded machine
STEPS = 6
AT = 3  # the step the faulty rank never joins (or fails at)
# attempt 1's rank 2 gives up connecting after this: Gloo connects each pair from one side
# (the lower address waits), so a dead peer refuses it at once or never connects to it
INIT_RETRY_S = 15
# attempt 1's ranks but rank 2 "load a checkpoint" before init, longer than rank 2 may wait
CHECKPOINT_S = 150
RETRIES = 2


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def worker_main(name: str, folder: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import record

    record(_worker)(name, folder)


def _worker(name: str, folder: Path) -> None:
    import frtrace.recorder

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    frtrace.recorder.enable(folder, buffer_size=BUFFER)
    import torch
    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    init_timeout = INIT_TIMEOUT_S
    if name == "restart_dies_in_init" and attempt >= 1 and rank == 2:
        init_timeout = INIT_RETRY_S
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=not agent and rank == 0,
        timeout=timedelta(seconds=init_timeout),
    )
    state = folder / ".state"
    state.mkdir(exist_ok=True)
    (state / f"pid{attempt}_{rank}").write_text(str(os.getpid()))
    if name == "restart_dies_in_init":
        # The job's keys under one prefix for every attempt (the fault: attempt 1 finds
        # attempt 0's addresses); attempt 1's rank 2 starts first, the others restore a
        # checkpoint (and are stopped by torchrun while they do).
        prefix = "job"
        if attempt >= 1 and rank != 2:
            (state / f"rank{rank}").write_text("loading the checkpoint (attempt 1)")
            time.sleep(CHECKPOINT_S)
    else:
        prefix = f"attempt_{attempt}"  # (each attempt's own keys in the agent's store)
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(prefix, store),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=init_timeout),
    )
    group = dist.new_group(list(range(world)), timeout=timedelta(seconds=PG_TIMEOUT_S))
    bad, how = _plan(name, attempt, world)
    t = torch.ones(8)
    for step in range(STEPS):
        if rank == bad and step == AT:
            (state / f"rank{rank}").write_text(f"{how} at step {step} (attempt {attempt})")
            if how == "raise":
                raise ValueError(f"bad record in shard {step}: cannot decode sample 1187")
            while True:  # hang in Python: never joins the all_reduce of this step
                time.sleep(1.0)
        if step == AT:
            (state / f"rank{rank}").write_text(f"in the all_reduce of step {step} ({attempt})")
        dist.all_reduce(t, group=group)
        print(f"step {step} done", flush=True)
    dist.destroy_process_group()


def _plan(name: str, attempt: int, world: int) -> tuple[int | None, str]:
    """(the rank that misbehaves at step ``AT``, how: 'hang' / 'raise'), per attempt."""
    if name == "restart_dies_in_init":
        return (2, "hang") if attempt == 0 else (None, "")
    if name == "shrinking_world":
        return (3, "raise") if world == WORLD else (1, "hang")
    raise SystemExit(f"unknown fixture {name}")


# --------------------------------------------------------------------------------------------
# Harness.
# --------------------------------------------------------------------------------------------


def _torchrun(name: str, folder: Path, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", *extra]
    cmd += ["--log-dir", "logs", "--redirects", "3", "--tee", "3"]
    return [*cmd, str(SCRIPT), "--worker", name, "--folder", str(folder)]


def _start(cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd, cwd=cwd, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _finish(proc: subprocess.Popen[bytes], timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def _dump(folder: Path, rank: int) -> dict[str, Any]:
    path = folder / f"comm_lib_trace_rank_{rank}"
    doc = pickle.loads(path.read_bytes())  # (the job's own file, just written)
    side = json.loads((folder / f"stacks_rank_{rank}.json").read_text())
    return {"entries": len(doc["entries"]), "groups": len(doc["pg_config"]), "side": side}


def _dumps(folder: Path) -> dict[int, dict[str, Any]]:
    have = [r for r in range(WORLD) if (folder / f"stacks_rank_{r}.json").exists()]
    return {r: _dump(folder, r) for r in have}


def _pids(folder: Path) -> dict[str, dict[str, int]]:
    """Each attempt's ranks' pids, as the workers wrote them."""
    out: dict[str, dict[str, int]] = {}
    for p in sorted((folder / ".state").glob("pid*_*")):
        attempt, rank = p.name.removeprefix("pid").split("_")
        out.setdefault(attempt, {})[rank] = int(p.read_text())
    return out


def _attempt_of(pids: dict[str, dict[str, int]], pid: int) -> int | None:
    return next((int(a) for a, ranks in pids.items() if pid in ranks.values()), None)


def make_restart_dies_in_init(folder: Path) -> dict[str, Any]:
    port = _free_port()
    extra = ["--nproc-per-node", str(WORLD), "--rdzv-backend", "c10d"]
    extra += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "1"]
    extra += ["--rdzv-id", "restart_dies_in_init"]
    proc = _start(_torchrun("restart_dies_in_init", folder, extra), folder, folder / "torchrun.log")
    code = _finish(proc, 240)
    pids = _pids(folder)
    dumped = {
        r: _dump(folder, r) for r in range(WORLD) if (folder / f"stacks_rank_{r}.json").exists()
    }
    of = {r: _attempt_of(pids, d["side"]["pid"]) for r, d in dumped.items()}
    init = dumped.get(2)
    if (
        of != {0: 0, 1: 0, 3: 0, 2: 1}
        or init is None
        or init["entries"] != 0
        or "connectFullMesh" not in init["side"]["trigger"]["detail"]
    ):
        raise RuntimeError(f"restart_dies_in_init: not as built: {of}, rank 2: {init}")
    return {
        "description": "torchrun --max-restarts 1, dumps into one folder: attempt 0 hangs "
        "(rank 2 never joins the all_reduce of step 3; ranks 0, 1 and 3 time out and dump), "
        "torchrun restarts; attempt 1 dies in init_process_group: its rank 2 reads attempt 0's "
        "addresses from the job's store (one key prefix for every attempt) and fails with "
        "Gloo's connectFullMesh ... Connection refused, dumping no entries; the others were "
        "still loading a checkpoint (stopped by torchrun, no dump). comm_lib_trace_rank_2 is "
        "attempt 1's, the other dumps attempt 0's.",
        "torchrun_exit": code,
        "verdict": "hang",
        "judged_attempt": 0,
        "culprit_ranks": [2],
        "innocent_ranks": [0, 1, 3],
        "world_size": WORLD,
        "attempts": {
            "0": {"culprit_ranks": [2], "dumped": [0, 1, 3], "world_size": WORLD},
            "1": {"died_in_init": True, "culprit_ranks": [], "dumped": [2], "world_size": WORLD},
        },
        "pids": pids,
    }


def make_shrinking_world(folder: Path) -> dict[str, Any]:
    port = _free_port()
    extra = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    extra += ["--rdzv-id", "shrinking_world", "--max-restarts", "1"]
    extra += ["--rdzv-conf", "last_call_timeout=10"]
    # node a first: the lower pid is the lower node rank (ranks 0-2); node b holds rank 3. Its
    # agent does not watch its worker before it is lost (--monitor-interval).
    node_a = _start(
        _torchrun("shrinking_world", folder, [*extra, "--nproc-per-node", "3"]),
        folder,
        folder / "node-a.log",
    )
    time.sleep(1.0)
    slow = ["--nproc-per-node", "1", "--monitor-interval", "120"]
    node_b = _start(
        _torchrun("shrinking_world", folder, [*extra, *slow]), folder, folder / "node-b.log"
    )
    try:
        if not _wait(lambda: (folder / "stacks_rank_3.json").exists(), 180):
            raise RuntimeError("shrinking_world: rank 3 never failed")
        time.sleep(0.5)
    finally:
        os.killpg(node_b.pid, signal.SIGKILL)  # node b is lost
        node_b.wait()
    code = _finish(node_a, 300)
    pids = _pids(folder)
    dumped = {
        r: _dump(folder, r) for r in range(WORLD) if (folder / f"stacks_rank_{r}.json").exists()
    }
    of = {r: _attempt_of(pids, d["side"]["pid"]) for r, d in dumped.items()}
    if of.get(3) != 0 or of.get(0) != 1 or of.get(2) != 1 or of.get(1) == 1:
        raise RuntimeError(f"shrinking_world: not as built: {of}")
    if set(pids.get("1", {})) != {"0", "1", "2"}:
        raise RuntimeError(f"shrinking_world: attempt 1 is not 3 ranks: {pids}")
    return {
        "description": "torchrun --nnodes 1:2 on two agents (node a: ranks 0-2, node b: rank "
        "3), c10d rendezvous on localhost, --max-restarts 1: attempt 0 runs 4 ranks; rank 3 "
        "raises a ValueError at step 3 and node b is lost (its agent killed once rank 3 "
        "dumped); node a's agent restarts alone: attempt 1 runs 3 ranks, rank 1 never joins "
        "the all_reduce of step 3, ranks 0 and 2 time out and dump. comm_lib_trace_rank_3 "
        "(world 4) is attempt 0's"
        + (", comm_lib_trace_rank_1 too" if 1 in of else "")
        + "; node-a.log and node-b.log are the agents' consoles.",
        "torchrun_exit": code,
        "verdict": "hang",
        "judged_attempt": 1,
        "culprit_ranks": [1],
        "innocent_ranks": [0, 2],
        "not_of_the_judged_attempt": [3],
        "world_size": 3,
        "attempts": {
            "0": {
                "world_size": WORLD,
                "left": [3],
                "culprit_ranks": [3],  # (its ValueError: the first failure of attempt 0)
                "dumped": sorted(r for r, a in of.items() if a == 0),
            },
            "1": {"world_size": 3, "culprit_ranks": [1], "dumped": [0, 2]},
        },
        "pids": pids,
    }


FIXTURES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "restart_dies_in_init": make_restart_dies_in_init,
    "shrinking_world": make_shrinking_world,
}


def _states(folder: Path) -> dict[str, str]:
    return {
        p.name.removeprefix("rank"): p.read_text()
        for p in sorted((folder / ".state").glob("rank*"))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--only", action="append", choices=sorted(FIXTURES))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "fixtures")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.folder)
        return
    tree = args.out / TREE
    tree.mkdir(parents=True, exist_ok=True)
    manifest_path = tree / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in args.only or list(FIXTURES):
        folder = tree / name
        for attempt in range(RETRIES):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            started = time.monotonic()
            try:
                truth = FIXTURES[name](folder)
                break
            except RuntimeError as exc:
                print(f"{name}: {exc}" + ("; again" if attempt + 1 < RETRIES else ""), flush=True)
        else:
            raise SystemExit(f"{name}: did not run as built")
        truth["states"] = _states(folder)
        shutil.rmtree(folder / ".state", ignore_errors=True)
        for junk in folder.rglob("*.tmp"):
            junk.unlink()
        truth["mtimes"] = file_times(folder)
        manifest[name] = truth
        print(f"{name}: {time.monotonic() - started:.0f} s", flush=True)
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
