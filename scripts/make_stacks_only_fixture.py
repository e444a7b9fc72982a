#!/usr/bin/env python3
"""A real hung job that records but offers no dump, collected: ``tests/fixtures/stacks/env_only``.

The README's step 1 and nothing more: ``eval "$(frtrace env --dir DIR)"`` in the shell, then
``torchrun --nproc-per-node 4 tests/collect/env_only_job.py`` (Gloo on CPU, no
``frtrace.recorder.enable()``, no ``FRTRACE_WATCH``). Rank 2 calls ``load_batch``, which never
returns, at step 3; ranks 0, 1 and 3 wait in that step's first ``all_reduce`` (the gradient
average after ``backward``). Once every rank is where it will stay, ``frtrace collect OUT
--no-analyze --env MASTER_PORT=<port>`` takes what it can: py-spy's stack of every rank, no
dump (nothing in the job answers a request, and Gloo never dumps by itself before torch 2.15),
and its manifest (each rank's host and pid, the ranks' ``WORLD_SIZE``). The job is then
killed. The truth, from how the job was built, is ``tests/fixtures/stacks/MANIFEST.json``.

Usage::

    python3 scripts/make_stacks_only_fixture.py              # -> tests/fixtures/stacks/env_only
    python3 scripts/make_stacks_only_fixture.py --out /tmp/x
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (frtrace, from this checkout)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _free_port

from frtrace.collect.procs import find_rank_processes

REPO_ROOT = Path(__file__).resolve().parent.parent
JOB = REPO_ROOT / "tests" / "collect" / "env_only_job.py"
STACKS = REPO_ROOT / "tests" / "fixtures" / "stacks"
NAME = "env_only"
WORLD = 4
STUCK = 2
READY_S = 120.0
SETTLE_S = 3.0  # the waiting ranks have waited a while in the all_reduce


def _shell_job(dump_dir: Path, port: int, ready: Path) -> str:
    """The job as a user starts it: the recipe evaluated in the shell, then torchrun."""
    frtrace = shlex.join([sys.executable, "-m", "frtrace", "env", "--dir", str(dump_dir)])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD)]
    run = shlex.join([*torchrun, "--master-port", str(port), str(JOB)])
    return f'eval "$({frtrace})" && READY_DIR={shlex.quote(str(ready))} exec {run}'


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "FRTRACE_"))}
    env.pop("OMP_NUM_THREADS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(PYTHONUNBUFFERED="1", STUCK_RANK=str(STUCK))
    return env


def make(out: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="frtrace-env-only-") as tmp:
        base = Path(tmp)
        ready, collected = base / "ready", base / "collected"
        ready.mkdir()
        port = _free_port()
        job = subprocess.Popen(
            ["bash", "-c", _shell_job(base / "fr", port, ready)],
            env=_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + READY_S
            while len(list(ready.iterdir())) < WORLD:
                if time.monotonic() > deadline or job.poll() is not None:
                    raise SystemExit(f"the job never hung as built: {sorted(ready.iterdir())}")
                time.sleep(0.2)
            time.sleep(SETTLE_S)
            collect = [sys.executable, "-m", "frtrace", "collect", str(collected), "--no-analyze"]
            done = subprocess.run(
                [*collect, "--env", f"MASTER_PORT={port}"],
                env=_environment(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                raise SystemExit(f"collect failed ({done.returncode}): {done.stderr}")
            alive = job.poll() is None
        finally:  # (torchrun starts each rank in a session of its own: each is killed too)
            for rank in find_rank_processes({"MASTER_PORT": str(port)}):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rank.pid, signal.SIGKILL)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        if not alive:
            raise SystemExit("collect harmed the job")
        (host,) = [p for p in collected.iterdir() if p.is_dir()]
        if sum(1 for _ in host.glob("pyspy_rank_*.txt")) != WORLD or any(host.glob("comm_*")):
            raise SystemExit(f"not a stack per rank and no dump: {sorted(host.iterdir())}")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(collected, out)
    return {
        "description": 'torchrun, 4 Gloo ranks, started with only `eval "$(frtrace env '
        '--dir DIR)"` (no recorder, no watch); rank 2 never returns from load_batch at step 3, '
        "ranks 0, 1, 3 wait in that step's first all_reduce (the gradient average after "
        "backward). `frtrace collect OUT --no-analyze`: py-spy stacks and the manifest, no dump.",
        "verdict": "hang",
        "culprit_ranks": [STUCK],
        "culprit_function": "load_batch",
        "waiting_ranks": [r for r in range(WORLD) if r != STUCK],
        "waiting_in": "all_reduce",
        "dumps": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=STACKS, help="the folder of stacks fixtures")
    args = parser.parse_args()
    truth = make(args.out / NAME)
    manifest = args.out / "MANIFEST.json"
    known = json.loads(manifest.read_text()) if manifest.exists() else {}
    known[NAME] = truth
    manifest.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out / NAME} and {manifest}")


if __name__ == "__main__":
    main()
