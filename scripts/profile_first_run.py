"""Where a first run's seconds go: ``frtrace analyze -d DIR -f json`` in this process, each
phase timed (wall, and CPU of this process and of the workers it waited for).

Phases: the imports before the run, discovering and fingerprinting the files, the load (the
workers reading the dumps; this process receiving their results, and importing the analysis
meanwhile), building the entries table from the workers' files (the gather, into the cache's
file or the spill directory's), the cache's small tables (stored in a thread while the
analysis runs: its wall time overlaps the analysis), the analysis, the diagnosis stored, and
what is left (the report rendered, the exit). The cache is a fresh one under ``--workdir``
unless ``--no-cache``. CPU is user + sys; on a machine shared with other work the wall times
move with the load and the CPU times much less.

Usage (from the repository root; the sets ``scripts/bench.py`` makes)::

    python3 scripts/profile_first_run.py /tmp/frbench/2d_r1024_e2000_host_stall_s0
    python3 scripts/profile_first_run.py DIR --no-cache --json phases.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import io
import json
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START = time.perf_counter()


def _cpu(who: int = resource.RUSAGE_SELF) -> float:
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime


class Phases:
    """Each timed call's wall and CPU seconds (this process; the workers it waited for)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float]] = []
        self.gc_s = 0.0
        self._gc_started = 0.0

    def timed(
        self, name: str, call: Callable[..., Any], thread: bool = False
    ) -> Callable[..., Any]:
        """``call`` timed; ``thread``: it runs in a thread of its own, whose CPU alone counts
        (the process's would count the analysis running beside it)."""
        who = resource.RUSAGE_THREAD if thread else resource.RUSAGE_SELF

        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wall, cpu, kids = time.perf_counter(), _cpu(who), _cpu(resource.RUSAGE_CHILDREN)
            try:
                return call(*args, **kwargs)
            finally:
                for worker in multiprocessing.active_children():  # (their CPU counted)
                    worker.join()
                self.rows.append(
                    (
                        name,
                        time.perf_counter() - wall,
                        _cpu(who) - cpu,
                        _cpu(resource.RUSAGE_CHILDREN) - kids,
                    )
                )

        return wrapper

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.process_time()
        else:
            self.gc_s += time.process_time() - self._gc_started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="where the cache goes")
    parser.add_argument("--json", type=Path, default=None, help="also write the phases here")
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="frprofile-", dir=args.workdir))
    os.environ["XDG_CACHE_HOME"] = str(workdir)
    phases = Phases()
    gc.callbacks.append(phases.on_gc)
    wall, cpu = time.perf_counter(), _cpu()
    sys.path.insert(0, str(ROOT))
    import frtrace.cli as cli
    import frtrace.diagnosis_cache as diagnosis_cache
    import frtrace.load.cache as cache
    import frtrace.load.tables as tables
    import frtrace.load.workers.executors as executors
    import frtrace.pipeline as pipeline

    phases.rows.append(("imports", time.perf_counter() - wall, _cpu() - cpu, 0.0))
    for owner, name, label in (
        (diagnosis_cache.DiagnosisCache, "open", "discover, fingerprint"),
        (executors.LocalProcesses, "parse", "load (workers)"),
        (tables._Assembler, "finish", "entries table (gather)"),
        (cache.DirectoryCache, "save", "cache's small tables (thread)"),
        (pipeline, "_analysed", "analysis"),
        (diagnosis_cache.DiagnosisCache, "save", "diagnosis stored"),
    ):
        thread = name == "save" and owner is cache.DirectoryCache
        setattr(owner, name, phases.timed(label, getattr(owner, name), thread))
    argv = ["frtrace", "analyze", "-d", str(args.directory), "-f", "json", "-q"]
    sys.argv = argv + (["--no-cache"] if args.no_cache else [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.run()
    total = time.perf_counter() - START
    report = json.loads(out.getvalue()[out.getvalue().index("{") :])
    shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        {"phase": name, "wall_s": w, "cpu_s": c, "workers_cpu_s": k}
        for name, w, c, k in phases.rows
    ]
    rows.append(
        {
            "phase": "total",
            "wall_s": total,
            "cpu_s": _cpu(),
            "workers_cpu_s": _cpu(resource.RUSAGE_CHILDREN),
        }
    )
    print(f"{'phase':32s} {'wall s':>7s} {'CPU s':>7s} {'workers CPU s':>14s}")
    for row in rows:
        print(
            f"{row['phase']:32s} {row['wall_s']:7.2f} {row['cpu_s']:7.2f} "
            f"{row['workers_cpu_s']:14.2f}"
        )
    print(f"garbage collector: {phases.gc_s:.2f} s of this process's CPU")
    print(f"culprits: {report['culprit_ranks']}")
    if args.json is not None:
        summary = {"phases": rows, "gc_s": phases.gc_s, "culprits": report["culprit_ranks"]}
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
