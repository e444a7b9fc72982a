"""Benchmark frtrace against the unpickling floor and torchfrtrace, on the same files, one run.

For each size it makes (or reuses) a seeded frsim job in NCCL format (``--mesh 2d``: tp=8 x
dp, collectives only; ``--mesh 3d``: tp=8 x pp=2 x dp with batched p2p, coalesced ops and
uneven all_to_all), 9-frame stacks (frames shared as torch's pickler writes them, or
``--frames distinct``: a new dict per frame per entry), every ring buffer wrapped, one
injected fault, then measures in separate processes, one after another:

- floor:        plain ``pickle.load`` of every file, one after another, nothing else;
- frtrace:      ``python -m frtrace analyze -d DIR --format json`` (checks the verdict);
- torchfrtrace: torch's analyzer on the same files (skipped above --torchfrtrace-max).

Wall time is measured around the child; peak memory is the largest sum of the resident set
sizes of the child's whole process group (frtrace's workers included), sampled every 20 ms.

Usage::

    python3 scripts/bench.py --ranks 256 1024 --entries 2000
    python3 scripts/bench.py --ranks 4096 --entries 2000 --torchfrtrace-max 1024
    python3 scripts/bench.py --ranks 8 16 --entries 100 --json out.json   # the smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")
FLOOR = (
    "import pickle, sys, os\n"
    "d = sys.argv[1]\n"
    "for name in sorted(os.listdir(d)):\n"
    "    with open(os.path.join(d, name), 'rb') as f:\n"
    "        pickle.load(f)\n"
)


@dataclass
class Measure:
    """One child process: wall time, peak memory of its process group, exit code."""

    wall_s: float
    peak_mb: float
    returncode: int
    output: str


def _group_rss_bytes(pgid: int) -> int:
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: process group id
            total += int(fields[21]) * PAGE  # field 24: resident pages
    return total


def measure(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> Measure:
    """Run ``argv`` in its own process group; sample the group's memory until it exits."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        cwd=ROOT,
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _group_rss_bytes(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    return Measure(wall, peak / 2**20, proc.returncode, out.decode(errors="replace"))


def make_job(
    workdir: Path,
    ranks: int,
    entries: int,
    fault: str,
    seed: int,
    mesh: str = "2d",
    frames: str = "shared",
) -> Path:
    """A seeded dump set under workdir (reused when it already exists)."""
    tag = "" if frames == "shared" else "_distinct"
    out = workdir / f"{mesh}_r{ranks}_e{entries}_{fault}_s{seed}{tag}"
    truth = out.with_name(out.name + ".truth.json")
    if truth.exists() and out.is_dir():
        return out
    shutil.rmtree(out, ignore_errors=True)
    tp = min(8, ranks)
    if mesh == "2d":  # the setup: tp=8 x dp, collectives only
        extra = ["--pp", "1", "--no-coalesced", "--no-all-to-all"]
    else:  # tp=8 x pp=2 x dp, batched p2p, coalesced and uneven all_to_all
        extra = ["--pp", str(2 if ranks >= 2 * tp else 1)]
    argv = [sys.executable, "-m", "frsim", "--world", str(ranks), "--tp", str(tp), *extra]
    argv += ["--entries", str(entries), "--fault", fault, "--seed", str(seed)]
    if frames == "distinct":
        argv.append("--no-shared-frames")
    subprocess.run([*argv, "--out", str(out)], check=True, cwd=ROOT)
    return out


@dataclass
class Row:
    """One size's results."""

    ranks: int
    entries: int
    files_mb: float
    floor_s: float
    floor_mb: float
    frtrace_s: float
    frtrace_mb: float
    frtrace_correct: bool
    torchfrtrace_s: float | None
    torchfrtrace_mb: float | None
    torchfrtrace_note: str

    @property
    def vs_floor(self) -> float:
        return self.frtrace_s / self.floor_s

    @property
    def speedup(self) -> float | None:
        return None if self.torchfrtrace_s is None else self.torchfrtrace_s / self.frtrace_s


def bench_one(args: argparse.Namespace, ranks: int) -> Row:
    dumps = make_job(
        args.workdir, ranks, args.entries, args.fault, args.seed, args.mesh, args.frames
    )
    truth = json.loads(dumps.with_name(dumps.name + ".truth.json").read_text())
    files_mb = sum(p.stat().st_size for p in dumps.iterdir()) / 2**20
    floor = measure([sys.executable, "-c", FLOOR, str(dumps)], args.timeout)
    ours = measure(
        [sys.executable, "-m", "frtrace", "analyze", "-d", str(dumps), "--format", "json"],
        args.timeout,
    )
    try:
        report = json.loads(ours.output[ours.output.index("{") :])
        expected = truth["culprit_ranks"] if truth.get("hung") else []
        correct = report["culprit_ranks"] == expected
    except (ValueError, KeyError):
        correct = False
    theirs_s = theirs_mb = None
    note = "skipped"
    if ranks <= args.torchfrtrace_max:
        theirs = measure(
            [
                sys.executable,
                "-m",
                "torch.distributed.flight_recorder.fr_trace",
                str(dumps),
                "--prefix",
                "nccl_trace_rank_",
            ],
            args.timeout,
        )
        theirs_s, theirs_mb = theirs.wall_s, theirs.peak_mb
        tail = theirs.output.strip().splitlines()[-1:] if theirs.output.strip() else [""]
        note = "ok" if theirs.returncode == 0 else f"exit {theirs.returncode}: {tail[0][:80]}"
    return Row(
        ranks,
        args.entries,
        files_mb,
        floor.wall_s,
        floor.peak_mb,
        ours.wall_s,
        ours.peak_mb,
        correct,
        theirs_s,
        theirs_mb,
        note,
    )


def render(rows: list[Row]) -> str:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "ranks  entries   files MB   floor s   frtrace s  x floor  frtrace MB  correct"
        "  torchfrtrace s  torchfrtrace MB  frtrace faster",
    ]
    for r in rows:
        theirs = f"{r.torchfrtrace_s:14.1f}" if r.torchfrtrace_s is not None else f"{'-':>14}"
        theirs_mb = f"{r.torchfrtrace_mb:15.0f}" if r.torchfrtrace_mb is not None else f"{'-':>15}"
        speed = f"{r.speedup:13.1f}x" if r.speedup is not None else f"{'-':>14}"
        lines.append(
            f"{r.ranks:5d}  {r.entries:7d}  {r.files_mb:9.0f}  {r.floor_s:8.2f}  "
            f"{r.frtrace_s:10.2f}  {r.vs_floor:7.2f}  {r.frtrace_mb:10.0f}  "
            f"{'yes' if r.frtrace_correct else 'NO':>7}  {theirs}  {theirs_mb}  {speed}"
            + ("" if r.torchfrtrace_note in ("ok", "skipped") else f"  ({r.torchfrtrace_note})")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--fault", default="host_stall")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mesh",
        choices=["2d", "3d"],
        default="2d",
        help="2d: tp=8 x dp, collectives only (the setup torchfrtrace's numbers were taken "
        "on); 3d: adds pp=2 with batched p2p, coalesced ops, uneven all_to_all",
    )
    parser.add_argument(
        "--frames",
        choices=["shared", "distinct"],
        default="shared",
        help="shared: a frame recorded by many entries is one object, as torch's pickler "
        "writes it (memoized by pointer); distinct: a new dict per frame per entry (the worst "
        "case for a reader: 60%% more bytes and objects)",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/frtrace-bench"))
    parser.add_argument(
        "--torchfrtrace-max",
        type=int,
        default=1024,
        help="skip torchfrtrace above this many ranks (it is slow)",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for ranks in args.ranks:
        rows.append(bench_one(args, ranks))
        print(render(rows[-1:]).splitlines()[-1], flush=True)
    print(render(rows))
    if args.json:
        args.json.write_text(
            json.dumps(
                [asdict(r) | {"vs_floor": r.vs_floor, "speedup": r.speedup} for r in rows], indent=2
            )
        )
    return 0 if all(r.frtrace_correct for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
