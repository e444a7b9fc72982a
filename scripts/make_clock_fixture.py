#!/usr/bin/env python3
"""A real job on two "hosts" whose clocks are 7 minutes apart (issue 50: time is per host).

``tests/fixtures/incidents/two_hosts_clock/``: a 4-rank Gloo job started as two real
``torchrun`` nodes on this machine (``--nnodes 2 --node-rank 0|1``, two ranks each, a static
rendezvous): host-a runs ranks 0-1 on this machine's clock, host-b runs ranks 2-3 under
libfaketime (``LD_PRELOAD=libfaketime.so.1 FAKETIME=+420``: its wall clock 420 s ahead, as a
node without NTP; monotonic time left alone). Every rank records with ``frtrace.recorder`` into
its host's folder (``host-a/``, ``host-b/``, each with its torchrun ``--log-dir`` logs). Rank 1
(host-a) stops in host code (``load_batch``) before the all_reduce of step 3; ranks 0, 2 and 3
time out of it after 30 s and dump (the recorder's exception hook); then the harness sends rank
1 SIGUSR1 (the recorder's signal dump, its stack in ``load_batch``) and ends the job. Truth:
hang, rank 1, in ``load_batch``; host-b's dumps and sidecars carry its clock, 420 s ahead.

Needs ``pip install libfaketime`` (its wheel carries ``libfaketime.so.1``). Usage::

    python3 scripts/make_clock_fixture.py            # -> tests/fixtures/incidents/two_hosts_clock
    python3 scripts/make_clock_fixture.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _free_port

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
NAME = "two_hosts_clock"
OUT = REPO_ROOT / "tests" / "fixtures" / "incidents" / NAME
WORLD = 4
BUFFER = 64
PG_TIMEOUT_S = 30
STEPS = 6
HUNG, AT = 1, 3  # rank 1 stops in load_batch before the all_reduce of step 3
SKEW = "+420"  # host-b's wall clock, ahead


def load_batch(step: int) -> None:
    """The data loader that never returns (a stuck read)."""
    while True:
        time.sleep(0.5)


def worker(folder: Path) -> None:
    import frtrace.recorder

    rank = int(os.environ["RANK"])
    frtrace.recorder.enable(folder, buffer_size=BUFFER)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=PG_TIMEOUT_S))
    state = folder.parent / ".state"
    state.mkdir(exist_ok=True)
    (state / f"pid{rank}").write_text(str(os.getpid()))
    t = torch.ones(16)
    for step in range(STEPS):
        if rank == HUNG and step == AT:
            (state / f"rank{rank}").write_text(f"load_batch at step {step}")
            load_batch(step)
        if step == AT:
            (state / f"rank{rank}").write_text(f"in the all_reduce of step {step}")
        dist.all_reduce(t)
        time.sleep(0.05)
    dist.destroy_process_group()


def _faketime_lib() -> str:
    import libfaketime  # type: ignore[import-not-found]

    lib = Path(libfaketime.__file__).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    if not lib.exists():
        raise SystemExit(f"{lib}: not found (pip install libfaketime)")
    return str(lib)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "TORCH_FR_BUFFER_SIZE", "PYTHONFAULTHANDLER"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env | extra


def _wait(pred: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return bool(pred())


def make(out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    hosts = {"host-a": {}, "host-b": {"LD_PRELOAD": _faketime_lib(), "FAKETIME": SKEW}}
    hosts["host-b"]["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    port = _free_port()
    procs = []
    for node, (host, extra) in enumerate(hosts.items()):
        folder = out / host
        folder.mkdir(parents=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
        cmd += ["--node-rank", str(node), "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        cmd += ["--master-port", str(port), "--monitor-interval", "60", "--rdzv-id", NAME]
        cmd += ["--log-dir", "logs", "--redirects", "3", "--tee", "3"]
        cmd += [str(SCRIPT), "--worker", "--folder", str(folder)]
        log = open(folder / "torchrun.log", "ab")  # noqa: SIM115
        procs.append(
            (
                subprocess.Popen(
                    cmd,
                    cwd=folder,
                    env=_env(extra),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                ),
                log,
            )
        )
    state = out / ".state"
    dumps = {
        r: out / ("host-a" if r < 2 else "host-b") / f"comm_lib_trace_rank_{r}" for r in range(4)
    }
    try:
        if not _wait(lambda: all(dumps[r].exists() for r in (0, 2, 3)), 150):
            raise SystemExit(f"the waiting ranks did not dump: {sorted(state.glob('*'))}")
        time.sleep(2.0)
        os.kill(int((state / f"pid{HUNG}").read_text()), signal.SIGUSR1)
        if not _wait(lambda: dumps[HUNG].exists(), 30):
            raise SystemExit("rank 1 did not dump on SIGUSR1")
        time.sleep(2.0)
        states = {r: (state / f"rank{r}").read_text() for r in range(WORLD)}
    finally:
        for proc, log in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    shutil.rmtree(state, ignore_errors=True)
    for junk in out.rglob("*.tmp"):
        junk.unlink()
    return {
        "description": "a 4-rank Gloo job as two torchrun nodes on one machine: host-a (ranks "
        "0-1) on the machine's clock, host-b (ranks 2-3) under libfaketime, its wall clock 420 s "
        "ahead (no NTP). Rank 1 stops in load_batch before the all_reduce of step 3; ranks 0, 2, "
        "3 time out (30 s) and dump through frtrace.recorder; rank 1 dumps on SIGUSR1.",
        "verdict": "hang",
        "culprit_ranks": [HUNG],
        "culprit_function": "load_batch",
        "innocent_ranks": [0, 2, 3],
        "clock_offset_s": {"host-b": 420},
        "states": {str(r): s for r, s in states.items()},
        "world_size": WORLD,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.worker:
        from torch.distributed.elastic.multiprocessing.errors import record

        record(worker)(args.folder)
        return
    started = time.monotonic()
    truth = make(args.out)
    (args.out.parent / f"{NAME}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{args.out}: {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
