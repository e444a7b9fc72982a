"""HangBench's scale rows: the time to the verdict and the peak memory of ``frtrace analyze``
at 1,024 to 16,384 ranks and at 20,000 entries a rank, measured by ``scripts/bench.py`` (frsim's
NCCL-format sets, one injected host stall) one row at a time and kept in ``scale.json``, which
``scripts/hangbench.py`` renders (``--scale`` measures them anew).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
SCALE = Path(__file__).resolve().parent / "scale.json"
SCALE_ROWS = [(1024, 2000), (4096, 2000), (16384, 2000), (1024, 20000), (4096, 20000)]
SCALE_NOTE = (
    "`scripts/bench.py --ranks N --entries E --torchfrtrace-max 0` (frsim's NCCL-format dumps, "
    "tp=8 x dp, one host stall): the time to the verdict and the peak memory of `frtrace "
    "analyze` (its workers included), one row at a time (`python3 scripts/hangbench.py --scale "
    "--scale-rows 4096x20000`). A row not run was not measured on this machine: its memory or "
    "its time did not allow it."
)


def run_scale(rows: list[tuple[int, int]], timeout: float) -> list[dict[str, Any]]:
    """Time to verdict and peak memory from ``scripts/bench.py`` (frsim's NCCL-format sets,
    one injected host stall), one row at a time; a row that fails is kept with its reason."""
    done = json.loads(SCALE.read_text()) if SCALE.exists() else []
    work = Path(tempfile.gettempdir()) / "hangbench-scale"
    for ranks, entries in rows:
        out = work / f"r{ranks}_e{entries}.json"
        argv = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--ranks", str(ranks)]
        argv += ["--entries", str(entries), "--torchfrtrace-max", "0", "--json", str(out)]
        argv += ["--workdir", str(work), "--timeout", str(timeout)]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        row: dict[str, Any] = {"ranks": ranks, "entries": entries}
        if proc.returncode == 0 and out.exists():
            got = json.loads(out.read_text())[0]
            row |= {k: got[k] for k in ("files_mb", "frtrace_s", "frtrace_mb", "frtrace_correct")}
        else:
            row["failed"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        row["wall_s"] = round(time.monotonic() - started)
        row["machine"] = f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        done = [r for r in done if (r["ranks"], r["entries"]) != (ranks, entries)] + [row]
        SCALE.write_text(
            json.dumps(sorted(done, key=lambda r: (r["entries"], r["ranks"])), indent=1) + "\n"
        )
        shutil.rmtree(work, ignore_errors=True)  # (the sets are large: one at a time)
    return done


def scale_table() -> str:
    rows = json.loads(SCALE.read_text()) if SCALE.exists() else []
    head = "ranks | entries a rank | dumps | time to verdict | peak memory | verdict right | on"
    lines = [f"| {head} |", "|---|---|---|---|---|---|---|"]
    measured = {(r["ranks"], r["entries"]): r for r in rows}
    for ranks, entries in SCALE_ROWS:
        r = measured.get((ranks, entries))
        if r is None or "failed" in r:
            why = "not run" if r is None else f"failed: {r['failed'][0][:80]}"
            lines.append(f"| {ranks:,} | {entries:,} | - | {why} | - | - | - |")
            continue
        lines.append(
            f"| {ranks:,} | {entries:,} | {r['files_mb'] / 1024:.1f} GB | {r['frtrace_s']:.1f} s | "
            f"{r['frtrace_mb']:,.0f} MB | {'yes' if r['frtrace_correct'] else 'NO'} | "
            f"{r['machine']} |"
        )
    return "\n".join(lines)
