"""What the stall watch costs a healthy job: a 4-rank Gloo training loop with and without it.

Each run starts ``--ranks`` processes (Gloo on 127.0.0.1), each enabling ``frtrace.recorder``
(``watch=--watch`` seconds, or no watch), then a warm-up and ``--steps`` training steps: a
small MLP's forward and backward pass and an all_reduce of its gradients (one bucket), as DDP
does. A run's steps/s is the slowest rank's (the job goes at its pace). The two settings
alternate, ``--repeats`` times each (so a change in the machine's load hits both), and the
median of each is compared::

    python3 scripts/bench_watch.py                      # 4 ranks, 3 x 2 runs of 300 steps
    python3 scripts/bench_watch.py --steps 20 --repeats 1 --json out.json   # the smoke test

The watch reads torch's recorder status once a second (``--watch`` >= 5 s) on each rank and
the job's store once: the difference is within the noise of such a loop; the script says the
number and the spread of the runs, which docs/performance.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_main(rank: int, world: int, port: int, out: str, watch: float, steps: int) -> None:
    """One rank of the loop; prints its steps/s as JSON."""
    import frtrace.recorder

    frtrace.recorder.enable(out, watch=watch if watch > 0 else None, verbose=False)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        dist.all_reduce(flat)
        opt.step()

    for _ in range(10):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    print(json.dumps({"rank": rank, "steps_per_s": steps / elapsed}), flush=True)
    dist.destroy_process_group()


def check_cost(port: int, checks: int) -> None:
    """CPU time of one watch check (the recorder status and one store request), in a one-rank
    Gloo group with recorded ops: the watch's whole cost is this once a second per rank."""
    import torch
    import torch.distributed as dist

    from frtrace.job.watch import StallClock, Watch

    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, timeout=timedelta(60))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    for _ in range(100):
        dist.all_reduce(torch.ones(4))
    w = Watch(dump_dir=Path("."), watch_s=15.0, dump=lambda reason, detail: None)
    w._clock = StallClock(15.0)  # run() is not started: check() is called directly
    w.check(dist)  # connects the watch's own store client
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(checks):
        w.check(dist)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"cpu_us": cpu / checks * 1e6, "wall_us": wall / checks * 1e6}), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(ranks: int, watch: float, steps: int, workdir: Path) -> float:
    """The job's steps/s (its slowest rank's) for one run."""
    port = _free_port()
    out = tempfile.mkdtemp(dir=workdir)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("FRTRACE_WATCH", None)
    argv = [sys.executable, __file__, "--rank-of", str(ranks), "--port", str(port)]
    argv += ["--out", out, "--watch", str(watch), "--steps", str(steps)]
    procs = [
        subprocess.Popen([*argv, "--rank", str(r)], stdout=subprocess.PIPE, text=True, env=env)
        for r in range(ranks)
    ]
    rates = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench_watch: a rank exited {p.returncode}")
        rates.append(json.loads(stdout.strip().splitlines()[-1])["steps_per_s"])
    if any(Path(out).iterdir()):
        raise SystemExit(f"bench_watch: the watch fired on a healthy job: see {out}")
    return min(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--watch", type=float, default=15.0, help="seconds (0: none)")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rank-of", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None and args.rank_of == 0:
        check_cost(args.port, args.steps)
        return
    if args.rank is not None:
        rank_main(args.rank, args.rank_of, args.port, args.out, args.watch, args.steps)
        return
    argv = [sys.executable, __file__, "--rank", "0", "--rank-of", "0", "--port"]
    argv += [str(_free_port()), "--steps", "2000"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=600)
    cost = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"one watch check: {cost['cpu_us']:.0f} us of CPU ({cost['wall_us']:.0f} us wall), once "
        f"a second per rank: {cost['cpu_us'] / 1e4:.3f}% of one core"
    )
    runs: dict[str, list[float]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        for _ in range(args.repeats):
            runs["without"].append(one_run(args.ranks, 0.0, args.steps, Path(tmp)))
            runs["with"].append(one_run(args.ranks, args.watch, args.steps, Path(tmp)))
    without, with_ = statistics.median(runs["without"]), statistics.median(runs["with"])
    change = (with_ - without) / without * 100
    for name, rates in runs.items():
        shown = ", ".join(f"{r:.1f}" for r in rates)
        print(f"{name:>7} watch: median {statistics.median(rates):.1f} steps/s ({shown})")
    print(f"difference: {change:+.2f}% ({args.ranks} ranks, Gloo, {args.steps} steps per run)")
    if args.json:
        doc = {"ranks": args.ranks, "steps": args.steps, "watch_s": args.watch, **runs}
        doc["check_cpu_us"] = cost["cpu_us"]
        args.json.write_text(json.dumps({**doc, "change_percent": change}, indent=1) + "\n")


if __name__ == "__main__":
    main()
