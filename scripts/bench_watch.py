"""What the stall watch costs a healthy job: a 4-rank Gloo training loop with and without it.

Each run starts ``--ranks`` processes (Gloo on 127.0.0.1), each enabling ``frtrace.recorder``
(``watch=--watch`` seconds, or no watch), then a warm-up and ``--steps`` training steps: a
small MLP's forward and backward pass and an all_reduce of its gradients (one bucket), as DDP
does. A run's steps/s is the slowest rank's (the job goes at its pace).

Three measures, from the noisiest to the steadiest:

* **end to end**: runs with and without the watch interleaved in pairs, the pair's order
  alternating (AB BA AB ...: a drift of the machine's load hits both sides alike), each pair's
  ratio of steps/s; the median ratio and the spread of the pairs;
* **CPU time**: in every rank of the runs with the watch, the watch thread's own CPU time
  (``pthread_getcpuclockid``) over the timed loop against the whole process's (the loop's
  threads and Gloo's): the share of the job's CPU the watch takes, and its checks counted;
* **the estimate**: one check's CPU alone (a one-rank group; 2,000 checks in a row, and 50
  checks 0.1 s apart, caches cold as once a second in a job, which cost 3-4x more) times the
  checks a second the watch made.

::

    python3 scripts/bench_watch.py                      # 4 ranks, 7 pairs of 150-step runs
    python3 scripts/bench_watch.py --steps 20 --repeats 1 --json out.json   # the smoke test

The watch reads torch's recorder status once a second (``--watch`` >= 5 s) on each rank and
the job's store once; docs/performance.md quotes what the script says.
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
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


WATCH_THREAD = "frtrace-watch"  # the stall watch's thread (frtrace.job.watch.start)


def _thread_cpu_s(name: str) -> float | None:
    """The CPU time (s) of this process's thread of that name so far; None if there is none."""
    for t in threading.enumerate():
        if t.name == name and t.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return None


def rank_main(rank: int, world: int, port: int, out: str, watch: float, steps: int) -> None:
    """One rank of the loop; prints its steps/s, and the CPU time of the timed loop (the
    process's, the watch thread's, and the checks it made), as JSON."""
    import frtrace.recorder
    from frtrace.job.watch import Watch

    checks = [0]
    check = Watch.check

    def counted(self: Watch, dist: Any) -> None:
        checks[0] += 1
        check(self, dist)

    Watch.check = counted  # type: ignore[method-assign]  # (counts the checks; nothing else)
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
    watch0, checks0 = _thread_cpu_s(WATCH_THREAD), checks[0]
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    watch1 = _thread_cpu_s(WATCH_THREAD)
    watch_cpu = None if watch0 is None or watch1 is None else watch1 - watch0
    said = {"rank": rank, "steps_per_s": steps / elapsed, "wall_s": elapsed, "cpu_s": cpu}
    said |= {"watch_cpu_s": watch_cpu, "checks": checks[0] - checks0}
    print(json.dumps(said), flush=True)
    dist.destroy_process_group()


SPACED_CHECKS, SPACED_GAP_S = 50, 0.1  # checks apart, as the watch makes them (once a second)


def check_cost(port: int, checks: int) -> None:
    """CPU time of one watch check (the recorder status and one store request, the store's
    side included: it runs in this process), in a one-rank Gloo group with recorded ops: in a
    row (``checks`` of them: caches warm), and apart (``SPACED_CHECKS``, ``SPACED_GAP_S``
    between: caches cold, as once a second in a job, where a check costs ~3-4x more)."""
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
    apart = 0.0
    for _ in range(SPACED_CHECKS):
        time.sleep(SPACED_GAP_S)
        cpu0 = time.process_time()
        w.check(dist)
        apart += time.process_time() - cpu0
    said = {"cpu_us": cpu / checks * 1e6, "wall_us": wall / checks * 1e6}
    said["cpu_us_apart"] = apart / SPACED_CHECKS * 1e6
    print(json.dumps(said), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(ranks: int, watch: float, steps: int, workdir: Path) -> list[dict[str, Any]]:
    """What each rank of one run said (its steps/s, CPU times, checks), by rank."""
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
    said = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench_watch: a rank exited {p.returncode}")
        said.append(json.loads(stdout.strip().splitlines()[-1]))
    if any(Path(out).iterdir()):
        raise SystemExit(f"bench_watch: the watch fired on a healthy job: see {out}")
    return said


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=7, help="pairs of runs")
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
        f"one watch check: {cost['cpu_us']:.0f} us of CPU in a row ({cost['wall_us']:.0f} us "
        f"wall), {cost['cpu_us_apart']:.0f} us {SPACED_GAP_S:g} s apart (caches cold, as in a "
        f"job); once a second per rank: {cost['cpu_us_apart'] / 1e4:.3f}% of one core"
    )
    runs: dict[str, list[float]] = {"without": [], "with": []}
    ratios: list[float] = []  # each pair's with / without steps/s
    ranks_with: list[dict[str, Any]] = []  # every rank of every run with the watch
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        for i in range(args.repeats):
            pair: dict[str, float] = {}
            order = ("without", "with") if i % 2 == 0 else ("with", "without")
            for name in order:
                said = one_run(
                    args.ranks, args.watch if name == "with" else 0.0, args.steps, Path(tmp)
                )
                pair[name] = min(r["steps_per_s"] for r in said)
                runs[name].append(pair[name])
                if name == "with":
                    ranks_with.extend(said)
            ratios.append(pair["with"] / pair["without"])
            print(
                f"pair {i + 1} ({'AB' if i % 2 == 0 else 'BA'}): without {pair['without']:.1f}, "
                f"with {pair['with']:.1f} steps/s, ratio {ratios[-1]:.3f}",
                flush=True,
            )
    without, with_ = statistics.median(runs["without"]), statistics.median(runs["with"])
    change = (with_ - without) / without * 100
    ratio = statistics.median(ratios)
    for name, rates in runs.items():
        shown = ", ".join(f"{r:.1f}" for r in rates)
        print(f"{name:>7} watch: median {statistics.median(rates):.1f} steps/s ({shown})")
    print(
        f"end to end: median ratio with/without {ratio:.3f} ({(ratio - 1) * 100:+.2f}%), pairs "
        f"{_spread(ratios)}; medians {change:+.2f}% ({args.ranks} ranks, Gloo, {args.steps} "
        "steps per run)"
    )
    measured = [r for r in ranks_with if r.get("watch_cpu_s") is not None]
    doc: dict[str, Any] = {"ranks": args.ranks, "steps": args.steps, "watch_s": args.watch}
    doc |= {**runs, "check_cpu_us": cost["cpu_us"], "check_wall_us": cost["wall_us"]}
    doc |= {"check_cpu_us_apart": cost["cpu_us_apart"]}
    doc |= {"change_percent": change, "pair_ratios": ratios, "ratio_median": ratio}
    if measured:
        wall = sum(r["wall_s"] for r in measured)
        watch_cpu = sum(r["watch_cpu_s"] for r in measured)
        cpu = sum(r["cpu_s"] for r in measured)
        checks = sum(r["checks"] for r in measured)
        share = [r["watch_cpu_s"] / r["cpu_s"] * 100 for r in measured if r["cpu_s"] > 0]
        per_s = watch_cpu / wall * 1e6  # the watch thread's CPU, us a second per rank
        rate = checks / wall  # checks a second per rank
        bound = cost["cpu_us_apart"] * rate  # us of CPU a second per rank, one check's cost
        print(
            f"CPU time: the watch thread {per_s:.0f} us a second per rank, {per_s / 1e4:.3f}% "
            f"of one core ({checks} checks, "
            f"{rate:.2f} a second, {watch_cpu / max(checks, 1) * 1e6:.0f} us each), the "
            f"process {cpu / wall:.2f} s a second: {watch_cpu / cpu * 100:.4f}% of the job's "
            f"CPU (ranks {min(share):.4f}-{max(share):.4f}%)"
        )
        print(
            f"estimate: one check's {cost['cpu_us_apart']:.0f} us (apart) x {rate:.2f} checks a "
            f"second = {bound:.0f} us a second per rank, {bound / 1e4:.3f}% of one core, "
            f"{bound / (cpu / wall * 1e6) * 100:.4f}% of the job's CPU per rank"
        )
        doc |= {"watch_cpu_us_per_s": per_s, "checks_per_s": rate, "watch_checks": checks}
        doc |= {"process_cpu_s_per_s": cpu / wall, "watch_cpu_share_percent": watch_cpu / cpu * 100}
        doc |= {"watch_cpu_share_by_rank": share, "estimate_us_per_s": bound}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
