"""The stall watch on a real NCCL job, on one GPU: what CI (no GPU) cannot run.

    python3 scripts/nccl_watch_check.py OUT [--seconds 20] [--watch 3]

Runs a one-rank NCCL job twice, each time a few all_reduces and then one held back on the GPU
(``torch.cuda._sleep`` on the compute stream: the all_reduce is enqueued and stays pending for
``--seconds``, as a collective whose peer never came would): first with
``frtrace.recorder.enable(DIR, watch=W, timing=True)``, then with no frtrace code at all and
``FRTRACE_WATCH=W`` in the environment ``frtrace env DIR`` prints (torch's entry point; skipped
where frtrace is not installed). Each time the watch must notice the pending op from NCCL's
recorder status, dump the rank's NCCL buffer (a real NCCL pickle: torch's
``_dump_nccl_trace``) and its stacks, and write ``DIR/frtrace-report.{txt,json,html}`` while
the job lives, which then finishes. Prints what it saw; ``OUT/<mode>/`` keeps each job's
folder (the real NCCL dump among them) and ``OUT/summary.json`` the checks. Exit 0 when every
check held.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job(out: Path, mode: str, seconds: float, watch: float) -> None:
    """One rank: the body of the job (``--job``)."""
    if mode == "enable":
        import frtrace.recorder

        frtrace.recorder.enable(out, watch=watch, timing=True)
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    t = torch.ones(1 << 20, device="cuda")
    for _ in range(5):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 1_980_000)  # (kHz)
    torch.cuda._sleep(int(seconds * khz * 1000))  # type: ignore[no-untyped-call]
    work = dist.all_reduce(t, async_op=True)
    assert work is not None
    print("pending", flush=True)
    started = time.monotonic()
    while not work.is_completed() and time.monotonic() - started < seconds * 4:
        time.sleep(0.1)  # (Python runs: the watch thread has the GIL when it wants it)
    print(f"completed after {time.monotonic() - started:.1f} s", flush=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("done", flush=True)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(out: Path, mode: str, seconds: float, watch: float) -> dict[str, object]:
    folder = out / mode
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port())}
    if mode == "env":
        from frtrace.job.env import job_environment

        env |= job_environment(folder, timing=True)
        env["FRTRACE_WATCH"] = f"{watch:g}"
    argv = [sys.executable, __file__, str(folder), "--job", mode]
    argv += ["--seconds", f"{seconds}", "--watch", f"{watch}"]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=seconds * 6 + 120)
    took = time.monotonic() - started
    (folder / "job.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    report = folder / "frtrace-report.txt"
    dump = folder / "comm_lib_trace_rank_0"
    hung = [line for line in proc.stderr.splitlines() if "job hung" in line]
    result: dict[str, object] = {
        "mode": mode,
        "exit": proc.returncode,
        "seconds": round(took, 1),
        "report": report.exists(),
        "dump_bytes": dump.stat().st_size if dump.exists() else 0,
        "hung_line": hung,
        "done": "done" in proc.stdout,
        "files": sorted(p.name for p in folder.iterdir()),
    }
    if report.exists():
        result["report_head"] = report.read_text()[:1500]
    if dump.exists():
        result["dump"] = _describe(dump)
    print(json.dumps(result, indent=1), flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], flush=True)
    return result


def _describe(dump: Path) -> dict[str, object]:
    """What the real NCCL dump holds, read as frtrace reads it (never unpickled by pickle)."""
    from frtrace.load.tables import load_dumps

    try:
        dumps = load_dumps(dump.parent)
        e = dumps.entries
        cols = ["pg_id", "collective_seq", "profiling_name", "state", "duration_ms", "retired"]
        rows = e.select([c for c in cols if c in e.schema.names]).to_pylist()
        return {
            "loaded_ranks": sorted(dumps.loaded_ranks),
            "problems": [p.message for p in dumps.problems],
            "entries": rows[-4:],
        }
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--job", choices=["enable", "env"])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--watch", type=float, default=3.0)
    args = ap.parse_args()
    if args.job:
        job(args.out, args.job, args.seconds, args.watch)
        return 0
    from importlib.metadata import entry_points

    modes = ["enable"]
    if any(e.name == "frtrace_watch" for e in entry_points(group="torch.backends")):
        modes.append("env")
    else:
        print("frtrace is not installed here (no torch.backends entry point): env mode skipped")
    results = [run(args.out, mode, args.seconds, args.watch) for mode in modes]
    ok = all(r["exit"] == 0 and r["report"] and r["done"] and r["hung_line"] for r in results)
    (args.out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    print("ALL OK" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
