#!/usr/bin/env python3
"""Generate HangBench's corpus: run every case's real job, keep what it left, with its truth.

    python3 bench/hangbench/generate.py                  # every case not yet in the corpus
    python3 bench/hangbench/generate.py --all            # every case, anew (~45 min, 2 busy CPUs)
    python3 bench/hangbench/generate.py --only NAME      # one case (repeatable), anew
    python3 bench/hangbench/generate.py --fault dead     # the cases of one fault kind, anew
    python3 bench/hangbench/generate.py --list           # the cases and whether each is there

One job at a time (each is 2-8 processes on a small machine). A case whose job did not run as
built (its culprit never reached its fault, a job that is not hung did not finish cleanly, the
capture left nothing) is retried once, then left out with its reason on stderr. After each
case ``corpus/MANIFEST.json`` is written: the corpus is commit-ready between any two cases.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from capture import dumps_of, run_case  # noqa: E402
from cases import CAPTURES, CASES, FAULTS, FOLDERS, LAUNCHERS, MECHANISMS, Case  # noqa: E402
from folders import as_copies, as_upload, clock_shim, mtimes, neutral, ray_layout  # noqa: E402
from harness import Job  # noqa: E402

CORPUS = HERE / "corpus"
MANIFEST = CORPUS / "MANIFEST.json"


def ranks_with(folder: Path, prefix: str) -> list[int]:
    found = set()
    for path in folder.rglob(f"{prefix}*"):
        digits = path.name[len(prefix) :].split(".")[0]
        if path.is_file() and digits.isdigit():
            found.add(int(digits))
    return sorted(found)


def observed(job: Job) -> dict[str, Any]:
    """What the run left and did, file by file; never an analysis of the dumps."""
    folder, world = job.dir, job.case.world
    markers = {str(r): job.read("fault", r) for r in range(world) if job.read("fault", r)}
    return {
        "dumps": ranks_with(folder, "comm_lib_trace_rank_"),
        "stack_sidecars": ranks_with(folder, "stacks_rank_"),
        "pyspy": ranks_with(folder, "pyspy_rank_"),
        "error_json": sorted(
            int(p.parent.name) for p in folder.rglob("error.json") if p.parent.name.isdigit()
        ),
        "fault_reached": markers,
        "frozen": sorted(job.stopped),
        "launcher_exit_codes": [p.returncode for p in job.procs],
        "harness_actions": job.actions,
    }


def built(job: Job) -> list[str]:
    """Why the run is not the case as built (empty: it is)."""
    errors = list(job.errors)
    case = job.case
    if case.hangs and not any(job.read("fault", r) for r in case.culprits):
        errors.append("no culprit reached its fault")
    if case.hangs and all(job.read("finished", r) for r in range(case.world)):
        errors.append("the job did not hang: every rank finished")
    if not dumps_of(job.dir) and case.capture not in ("exception", "periodic"):
        errors.append("the capture left no dump")
    return errors


def entry(case: Case, job: Job, folder: Path, seconds: float, torch: str) -> dict[str, Any]:
    truth = case.truth()
    out: dict[str, Any] = {
        "fault": case.fault,
        "variant": case.variant,
        "mechanism": case.mechanism,
        "launcher": case.launcher,
        "capture": case.capture,
        "folder": case.folder,
        "torch": torch,
        "world_size": case.world,
        "fault_step": case.fault_step,
        "description": (
            f"{MECHANISMS[case.mechanism]}; {truth['what']}; launched by "
            f"{LAUNCHERS[case.launcher]}; captured by {CAPTURES[case.capture]}; "
            f"{FOLDERS[case.folder]}"
        ),
        "truth": truth,
        "observed": observed(job),
        "seconds": round(seconds, 1),
        "bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()),
        "mtimes": mtimes(folder),
    }
    if case.launcher == "torchrun_restart":
        decoy = (case.culprits[0] + 2) % case.world
        out["attempts"] = {
            "0": {"culprit_ranks": [decoy], "fault": "host_code/poll at step 2"},
            "1": {"culprit_ranks": truth["culprit_ranks"]},
        }
    return out


def generate(case: Case, work: Path) -> tuple[dict[str, Any] | None, list[str]]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if case.folder == "hosts":
        clock_shim(work)
    started = time.monotonic()
    job = run_case(case, work / "incident", work / "scratch")
    errors = built(job)
    if errors:
        return None, errors
    folder = job.dir
    if case.launcher == "ray":
        ray_layout(folder, job.scratch, case.world)
    neutral(folder, work)
    if case.folder == "copies":
        as_copies(folder)
    elif case.folder == "compressed":
        as_upload(folder)
    return entry(case, job, folder, time.monotonic() - started, torch_version()), []


def torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


def spec(case: Case) -> dict[str, Any]:
    return {
        "fault": case.fault,
        "variant": case.variant,
        "mechanism": case.mechanism,
        "launcher": case.launcher,
        "capture": case.capture,
        "torch": case.torch,
        "why_not": case.why_not,
        "truth": case.truth(),
    }


def load_manifest() -> dict[str, Any]:
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {"cases": {}, "not_generated": {}}


def save_manifest(manifest: dict[str, Any]) -> None:
    order = {c.name: i for i, c in enumerate(CASES) if c.generated}
    cases = dict(sorted(((n, e) for n, e in manifest["cases"].items() if n in order),
                        key=lambda kv: order[kv[0]]))  # fmt: skip
    for stale in sorted(p for p in CORPUS.iterdir() if p.is_dir() and p.name not in cases):
        shutil.rmtree(stale)  # (a case no longer in cases.py, or not made)
    manifest = {
        "about": "HangBench: real hung jobs and their truth (bench/hangbench/README.md)",
        "faults": {f: {v: d[0] for v, d in vs.items()} for f, vs in FAULTS.items()},
        "cases": cases,
        "not_generated": {c.name: spec(c) for c in CASES if not c.generated},
    }
    CORPUS.mkdir(exist_ok=True)
    tmp = MANIFEST.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    tmp.rename(MANIFEST)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--fault", action="append", default=[], choices=sorted(FAULTS))
    ap.add_argument("--all", action="store_true", help="every case, anew")
    ap.add_argument("--list", action="store_true", help="the cases and whether each is there")
    ap.add_argument(
        "--retruth", action="store_true", help="rewrite every case's truth from cases.py (no job)"
    )
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "hangbench-gen")
    args = ap.parse_args(argv)
    manifest = load_manifest()
    cases = [c for c in CASES if c.generated]
    if args.retruth:
        by_name = {c.name: c for c in CASES}
        for name, made in manifest["cases"].items():
            made["truth"] = by_name[name].truth()
        save_manifest(manifest)
        return 0
    if args.list:
        for c in CASES:
            state = "spec only: " + c.why_not if not c.generated else (
                "in the corpus" if c.name in manifest["cases"] else "missing"
            )  # fmt: skip
            print(f"{c.name:60s} {state}")
        return 0
    if args.only or args.fault:
        chosen = [c for c in cases if c.name in args.only or c.fault in args.fault]
        if unknown := set(args.only) - {c.name for c in cases}:
            ap.error(f"no such case: {', '.join(sorted(unknown))}")
    else:
        chosen = [c for c in cases if args.all or c.name not in manifest["cases"]]
    failed = 0
    for i, case in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {case.name}", file=sys.stderr, flush=True)
        work = args.work / case.name
        for _ in range(1 + args.retries):
            made, errors = generate(case, work)
            if made is not None:
                break
            print(f"  not as built: {'; '.join(errors)}", file=sys.stderr, flush=True)
        target = CORPUS / case.name
        if made is None:
            failed += 1
            continue
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(work / "incident", target)
        manifest["cases"][case.name] = made
        save_manifest(manifest)
        shutil.rmtree(work, ignore_errors=True)
    save_manifest(manifest)
    print(f"{len(chosen) - failed}/{len(chosen)} cases made", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
