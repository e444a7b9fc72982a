"""Benchmark frtrace against the unpickling floor and torchfrtrace, on the same files, one run.

For each size it makes (or reuses) a seeded frsim job in NCCL format (``--mesh 2d``: tp=8 x
dp, collectives only; ``--mesh 3d``: tp=8 x pp=2 x dp with batched p2p, coalesced ops and
uneven all_to_all), 9-frame stacks (frames shared as torch's pickler writes them, or
``--frames distinct``: a new dict per frame per entry), every ring buffer wrapped, one
injected fault, then measures in separate processes, one after another:

- floor:        plain ``pickle.load`` of every file, one after another, nothing else;
- frtrace:      ``python -m frtrace analyze -d DIR --format json`` (checks the verdict);
- torchfrtrace: torch's analyzer on the same files (skipped above --torchfrtrace-max);
- with ``--cache``: ``frtrace analyze`` twice with the cache on (a private ``XDG_CACHE_HOME``
  under the workdir): the first run reads the dumps and stores the tables and the diagnosis,
  the second reads only the stored diagnosis (``frtrace.diagnosis_cache``: no dump, no table)
  and must print exactly what the first printed; plus the cached tables alone
  (``load_dumps(cache=True)`` in a fresh process: what ``show``/``summary``/``export`` read);
- with ``--scheduler``: a Dask cluster on 127.0.0.1 (``dask scheduler`` and 2 ``dask worker``
  processes, 1 thread each), ``frtrace analyze --scheduler``; its peak memory leaves out the
  workers, which are not in the child's process group;
- with ``--estimate-ranks N``: per-file costs measured in this process (parsing one file,
  merging its result, the result's size) and what they predict for N ranks on 8-512 workers.

frtrace's modules are compiled to bytecode first, as an installed frtrace has them. Wall time
is measured around the child; peak memory is the largest sum of the resident set
sizes of the child's whole process group (frtrace's workers included), sampled every 20 ms.

Usage::

    python3 scripts/bench.py --ranks 256 1024 --entries 2000
    python3 scripts/bench.py --ranks 4096 --entries 2000 --torchfrtrace-max 1024
    python3 scripts/bench.py --ranks 8 16 --entries 100 --json out.json   # the smoke test
    python3 scripts/bench.py --ranks 256 1024 --torchfrtrace-max 0 --cache --scheduler \
        --estimate-ranks 100000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
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
CACHED_LOAD = (
    "import sys\n"
    "from pathlib import Path\n"
    "from frtrace.load.tables import load_dumps\n"
    "load_dumps(Path(sys.argv[1]), cache=True)\n"
)


@dataclass
class Measure:
    """One child process: wall time, peak memory of its process group, exit code."""

    wall_s: float
    peak_mb: float
    returncode: int
    output: str
    peak_anon_mb: float = 0.0
    cpu_s: float = 0.0  # user + sys of the process and the children it waited for (workers)


def _group_rss_bytes(pgid: int) -> tuple[int, int]:
    """Resident bytes of the process group: all of it, and the anonymous part (what is not
    file-backed: memory-mapped files, such as the cache's tables, can be dropped and read
    again by the kernel)."""
    total = anon = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != pgid:  # field 5 of stat: process group id
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as f:
                _, resident, shared = (int(x) for x in f.read().split()[:3])
        except (OSError, ValueError):
            continue
        total += resident * PAGE
        anon += (resident - shared) * PAGE  # (statm's shared: file-backed and shmem pages)
    return total, anon


def compile_bytecode() -> None:
    """Compile frtrace's modules to bytecode where Python keeps it (``__pycache__``), as an
    install from a wheel does: a checkout run where ``PYTHONDONTWRITEBYTECODE`` is set (as on
    the machines these numbers were taken on) compiled its ~190 modules again on every run,
    ~0.3 s of each, which no installed frtrace pays."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "frtrace")],
        check=False,
        stdout=subprocess.DEVNULL,
    )


def measure(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> Measure:
    """Run ``argv`` in its own process group; sample the group's memory until it exits."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        cwd=ROOT,
    )
    peak = peak_anon = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_anon
        while not done.is_set():
            total, anon = _group_rss_bytes(proc.pid)
            peak, peak_anon = max(peak, total), max(peak_anon, anon)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done.set()
    sampler.join()
    return Measure(
        wall, peak / 2**20, proc.returncode, out.decode(errors="replace"), peak_anon / 2**20, cpu
    )


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
    load_avg: float = 0.0  # 1-minute load average when the size started
    frtrace_anon_mb: float = 0.0  # frtrace's peak, anonymous memory only
    cache_first_s: float | None = None  # analyze, cache on and empty: reads and stores
    cache_second_s: float | None = None  # analyze again: from the cached diagnosis
    cache_load_s: float | None = None  # load_dumps(cache=True) alone, warm, fresh process
    cache_correct: bool | None = None
    dask_s: float | None = None  # analyze --scheduler (2 local workers)
    dask_mb: float | None = None  # its peak: the coordinator's alone (the workers are not in it)
    dask_correct: bool | None = None
    dask_cpu_s: float | None = None  # the coordinator's CPU time (user + sys)
    dask_left_out: int | None = None  # entries the cluster's cut left out (its report's note)
    dask_worker_mb: float | None = None  # the largest worker's peak (the tree's root merges)
    # with --repeat: frtrace / floor of each pair measured back to back
    pair_ratios: list[float] = field(default_factory=list)
    # the same pairs in CPU time (user + sys, workers included): steadier on a busy machine
    cpu_pair_ratios: list[float] = field(default_factory=list)
    # with --repeat and --cache: a first run that writes the cache / the floor, per pair
    cache_pair_ratios: list[float] = field(default_factory=list)

    @property
    def vs_floor(self) -> float:
        """frtrace over the floor: the median of the back-to-back pairs where repeated."""
        if self.pair_ratios:
            return statistics.median(self.pair_ratios)
        return self.frtrace_s / self.floor_s

    def x_floor(self, seconds: float | None) -> float | None:
        return None if seconds is None else seconds / self.floor_s

    @property
    def speedup(self) -> float | None:
        return None if self.torchfrtrace_s is None else self.torchfrtrace_s / self.frtrace_s


def _verdict_ok(measured: Measure, truth: dict[str, object]) -> bool:
    try:
        report = json.loads(measured.output[measured.output.index("{") :])
        expected = truth["culprit_ranks"] if truth.get("hung") else []
        return bool(report["culprit_ranks"] == expected)
    except (ValueError, KeyError):
        return False


def _report(measured: Measure) -> str:
    """The JSON report a run printed (after any progress lines)."""
    at = measured.output.find("{")
    return measured.output[at:] if at >= 0 else measured.output


def _analyze(dumps: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "frtrace", "analyze", "-d", str(dumps), "-f", "json", *extra]


def _fresh_cache(cache_dir: Path) -> dict[str, str]:
    """The environment of a run whose cache is ``cache_dir``, emptied first."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    env = os.environ | {"XDG_CACHE_HOME": str(cache_dir)}
    env.pop("FRTRACE_NO_CACHE", None)
    return env


def _median_run(runs: list[Measure]) -> Measure:
    """The run of median wall time (the lower middle one of an even number)."""
    return sorted(runs, key=lambda m: m.wall_s)[(len(runs) - 1) // 2]


def bench_one(args: argparse.Namespace, ranks: int) -> Row:
    dumps = make_job(
        args.workdir, ranks, args.entries, args.fault, args.seed, args.mesh, args.frames
    )
    truth = json.loads(dumps.with_name(dumps.name + ".truth.json").read_text())
    files_mb = sum(p.stat().st_size for p in dumps.iterdir()) / 2**20
    load_avg = os.getloadavg()[0]
    # A shared machine's speed drifts by 20-30% from one minute to the next: with --repeat, the
    # floor and frtrace are measured in turn, and each pair's ratio is kept
    floors, runs, firsts = [], [], []
    for turn in range(max(1, args.repeat)):
        floors.append(measure([sys.executable, "-c", FLOOR, str(dumps)], args.timeout))
        runs.append(measure(_analyze(dumps, "--no-cache"), args.timeout))
        if args.cache and args.repeat > 1:  # a user's first run, in the same pair
            cache_env = _fresh_cache(args.workdir / f"xdg-cache-pair{turn}")
            firsts.append(measure(_analyze(dumps), args.timeout, cache_env))
            shutil.rmtree(args.workdir / f"xdg-cache-pair{turn}", ignore_errors=True)
    floor = _median_run(floors)
    ours = _median_run(runs)
    correct = all(_verdict_ok(run, truth) for run in runs)
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
    row = Row(
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
        load_avg,
        ours.peak_anon_mb,
    )
    if args.repeat > 1:
        row.pair_ratios = [o.wall_s / f.wall_s for f, o in zip(floors, runs, strict=True)]
        row.cpu_pair_ratios = [
            o.cpu_s / f.cpu_s for f, o in zip(floors, runs, strict=True) if f.cpu_s > 0
        ]
        row.cache_pair_ratios = [
            c.wall_s / f.wall_s for f, c in zip(floors[: len(firsts)], firsts, strict=True)
        ]
        row.frtrace_correct = correct and all(_verdict_ok(c, truth) for c in firsts)
    if args.cache:
        env = _fresh_cache(args.workdir / "xdg-cache")
        first = measure(_analyze(dumps), args.timeout, env)
        second = measure(_analyze(dumps), args.timeout, env)
        alone = measure([sys.executable, "-c", CACHED_LOAD, str(dumps)], args.timeout, env)
        row.cache_first_s, row.cache_second_s = first.wall_s, second.wall_s
        row.cache_load_s = alone.wall_s
        # the cached diagnosis prints the same report (the progress lines on stderr, shown
        # where a phase passes a second, as on a busy machine, are not the report's)
        same = _report(second) == _report(first)
        row.cache_correct = _verdict_ok(first, truth) and _verdict_ok(second, truth) and same
    if args.scheduler_address:
        remote = measure(
            _analyze(dumps, "--no-cache", "--scheduler", args.scheduler_address), args.timeout
        )
        row.dask_s, row.dask_correct = remote.wall_s, _verdict_ok(remote, truth)
        row.dask_mb, row.dask_cpu_s = remote.peak_mb, remote.cpu_s
        said = re.search(r"\(([\d,]+) entries of settled ops left out\)", _report(remote))
        row.dask_left_out = int(said.group(1).replace(",", "")) if said else 0
        row.dask_worker_mb = _workers_peak_mb(args.scheduler_address)
    return row


def _workers_peak_mb(address: str) -> float:
    """The largest peak resident size among the cluster's workers, over their lives (a local
    cluster is started for this run)."""
    from distributed import Client

    def peak_kb() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    with Client(address, timeout=60) as client:
        return max(client.run(peak_kb).values()) / 1024


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
    lines.append(
        "ranks  entries in all  floor us/entry  frtrace us/entry  frtrace peak bytes/entry"
        "  of it anonymous"
    )
    for r in rows:  # growth: flat per-entry columns mean time and memory linear in entries
        n = r.ranks * r.entries
        lines.append(
            f"{r.ranks:5d}  {n:14,d}  {r.floor_s / n * 1e6:14.2f}  {r.frtrace_s / n * 1e6:16.2f}"
            f"  {r.frtrace_mb * 2**20 / n:24.0f}  {r.frtrace_anon_mb * 2**20 / n:16.0f}"
        )
    paired = [r for r in rows if r.pair_ratios]
    if paired:  # the medians of the pairs, and each pair's ratio
        lines.append(
            "ranks  x floor (wall)  x floor (CPU)  cache 1st x floor (wall)  pairs, wall"
            "  pairs, CPU  pairs, cache 1st"
        )

    def pairs(ratios: list[float]) -> str:
        return ",".join(f"{x:.2f}" for x in ratios) or "-"

    def median(ratios: list[float], width: int) -> str:
        return f"{statistics.median(ratios):{width}.2f}" if ratios else f"{'-':>{width}}"

    for r in paired:
        lines.append(
            f"{r.ranks:5d}  {median(r.pair_ratios, 14)}  {median(r.cpu_pair_ratios, 13)}  "
            f"{median(r.cache_pair_ratios, 24)}  {pairs(r.pair_ratios)}  "
            f"{pairs(r.cpu_pair_ratios)}  {pairs(r.cache_pair_ratios)}"
        )
    extra = [r for r in rows if r.cache_second_s is not None or r.dask_s is not None]
    if extra:
        lines.append(
            "ranks  load avg  no cache x floor  cache 1st x floor  cache 2nd x floor"
            "  cached load x floor  dask 2 workers x floor  dask overhead s"
            "  dask coordinator MB  dask worker MB  entries left out  correct"
        )

    def ratio(x: float | None, width: int) -> str:
        return f"{x:{width}.2f}" if x is not None else f"{'-':>{width}}"

    for r in extra:
        overhead = None if r.dask_s is None else r.dask_s - r.frtrace_s
        ok = r.frtrace_correct and r.cache_correct is not False and r.dask_correct is not False
        lines.append(
            f"{r.ranks:5d}  {r.load_avg:8.1f}  {r.vs_floor:16.2f}  "
            f"{ratio(r.x_floor(r.cache_first_s), 17)}  {ratio(r.x_floor(r.cache_second_s), 17)}"
            f"  {ratio(r.x_floor(r.cache_load_s), 19)}  {ratio(r.x_floor(r.dask_s), 22)}"
            f"  {ratio(overhead, 15)}  {ratio(r.dask_mb, 19)}  {ratio(r.dask_worker_mb, 14)}"
            f"  {r.dask_left_out if r.dask_left_out is not None else '-':>16}"
            f"  {'yes' if ok else 'NO':>7}"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def local_cluster(workdir: Path, workers: int = 2) -> Iterator[str]:
    """A Dask scheduler and ``workers`` single-threaded workers on 127.0.0.1; the address."""
    info = workdir / "scheduler.json"
    info.unlink(missing_ok=True)
    dask = [sys.executable, "-m", "dask"]
    opts = "--host 127.0.0.1 --port 0 --no-dashboard --scheduler-file".split()
    log = (workdir / "cluster.log").open("wb")
    out = {"stdout": log, "stderr": subprocess.STDOUT, "start_new_session": True}
    procs = [subprocess.Popen([*dask, "scheduler", *opts, str(info)], **out)]
    try:
        deadline = time.monotonic() + 120
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        for _ in range(workers):
            opts = ["--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard"]
            procs.append(subprocess.Popen([*dask, "worker", address, *opts], **out))
        from distributed import Client

        with Client(address, timeout=120) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def estimate(dumps: Path, ranks: int, sample: int = 48) -> str:
    """Per-file costs measured here, and the loading time they predict for ``ranks`` files."""
    import pickle

    from frtrace.incident.discover import discover
    from frtrace.load.read.parse import try_parse
    from frtrace.load.tables import build_dump_set

    candidates = discover(dumps).candidates[:sample]
    try_parse(candidates[-1])  # (warm: the first file pays for imports and first calls)
    start = time.perf_counter()
    results = [try_parse(c) for c in candidates]
    parse_s = (time.perf_counter() - start) / len(candidates)
    result_mb = sum(len(pickle.dumps(r, protocol=5)) for r in results) / len(results) / 2**20
    start = time.perf_counter()
    build_dump_set(dumps, candidates, results)
    merge_s = (time.perf_counter() - start) / len(candidates)
    file_mb = sum(c.size_bytes for c in candidates) / len(candidates) / 2**20
    lines = [
        f"per file (mean of {len(candidates)} of {dumps.name}): {file_mb:.2f} MB read, "
        f"parse {parse_s * 1e3:.1f} ms on one core, result {result_mb:.2f} MB pickled, "
        f"merge into the tables {merge_s * 1e3:.2f} ms in the client",
        f"loading {ranks:,} ranks: reading {ranks * file_mb / 1024:.0f} GB from shared storage; "
        f"merging in the client {ranks * merge_s:.0f} s (serial, does not shrink with workers); "
        f"results {ranks * result_mb / 1024:.1f} GB to the client "
        f"({ranks * result_mb / 1024 / 1.25:.0f} s at 10 Gbit/s)",
        "workers (1 core each)  parse s  load s (max of parse, merge, transfer)",
    ]
    transfer_s = ranks * result_mb / 1024 / 1.25
    for n in (8, 32, 128, 512):
        parse = ranks * parse_s / n
        lines.append(f"{n:21d}  {parse:7.0f}  {max(parse, ranks * merge_s, transfer_s):6.0f}")
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
    parser.add_argument(
        "--cache", action="store_true", help="also time a first and a second run with the cache"
    )
    parser.add_argument(
        "--scheduler",
        action="store_true",
        help="also time frtrace on a local Dask cluster of 2 workers (needs frtrace[dask])",
    )
    parser.add_argument(
        "--estimate-ranks",
        type=int,
        default=0,
        help="print what the measured per-file costs predict for this many ranks on a cluster",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure the floor and frtrace this many times, in turn: times are the medians, "
        "'x floor' the median ratio of the back-to-back pairs",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    rows = []
    with local_cluster(args.workdir) if args.scheduler else contextlib.nullcontext() as address:
        args.scheduler_address = address
        for ranks in args.ranks:
            rows.append(bench_one(args, ranks))
            print(render(rows[-1:]).splitlines()[2], flush=True)
    print(render(rows))
    if args.estimate_ranks:
        dumps = make_job(
            args.workdir,
            args.ranks[-1],
            args.entries,
            args.fault,
            args.seed,
            args.mesh,
            args.frames,
        )
        print(estimate(dumps, args.estimate_ranks))
    if args.json:
        args.json.write_text(
            json.dumps(
                [asdict(r) | {"vs_floor": r.vs_floor, "speedup": r.speedup} for r in rows],
                indent=2,
            )
        )
    ok = all(r.frtrace_correct and False not in (r.cache_correct, r.dask_correct) for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
