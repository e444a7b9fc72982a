"""`python -m frsim`: simulate a job and write its per-rank dumps plus a truth file.

Example::

    python -m frsim --world 1024 --entries 2000 --fault host_stall --out /tmp/job/dumps

writes /tmp/job/dumps/nccl_trace_rank_<rank> for every rank and /tmp/job/dumps.truth.json
next to the directory (never inside it: a dump reader must not mistake it for a dump).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from frsim.job import simulate
from frsim.layout import VERSIONS, entries_of, layout_of
from frsim.program import PROLOGUE, step_template
from frsim.spec import Capture, Fault, FaultKind, JobSpec, Moment


def steps_for_entries(spec: JobSpec, entries: int, version: str) -> int:
    """Steps after which every rank has recorded more than `entries` entries (buffers wrap)."""
    layout = layout_of(version)
    per_step = min(
        sum(entries_of(u, layout) for u in step_template(spec, s)) for s in range(spec.pp)
    )
    prologue = sum(entries_of(u, layout) for u in PROLOGUE)
    return max(2, -(-(entries - prologue) // per_step) + 2)


def truth_path(out_dir: Path) -> Path:
    """Where the truth of dumps written to `out_dir` goes: `<out_dir>.truth.json` beside it."""
    return out_dir.parent / f"{out_dir.name}.truth.json"


def _default_rank(kind: FaultKind, world: int, pp: int) -> int:
    if kind is FaultKind.P2P_NO_PEER:
        return world // pp + (world // pp) // 3
    return world // 3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(
        prog="python -m frsim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--world", type=int, required=True, help="number of ranks")
    p.add_argument("--tp", type=int, default=None, help="tensor parallel (default min(8, world))")
    p.add_argument("--pp", type=int, default=None, help="pipeline stages (default 4 if possible)")
    p.add_argument(
        "--entries",
        type=int,
        default=2000,
        help="ring-buffer size per rank; steps are "
        "chosen so every buffer fills and wraps (default 2000)",
    )
    p.add_argument("--steps", type=int, default=None, help="override the number of steps")
    p.add_argument("--no-coalesced", action="store_true", help="no coalesced collectives")
    p.add_argument("--no-all-to-all", action="store_true", help="no uneven all_to_all")
    p.add_argument("--no-batched-p2p", action="store_true", help="standalone send/recv")
    p.add_argument("--fault", choices=[k.value for k in FaultKind], default=None)
    p.add_argument("--fault-rank", type=int, default=None)
    p.add_argument("--fault-step", type=int, default=-1, help="default: the last step")
    p.add_argument("--missing", type=int, nargs="*", default=(), help="ranks without a dump")
    p.add_argument("--version", choices=VERSIONS, default="2.10")
    p.add_argument("--format", choices=("pickle", "json"), default="pickle")
    p.add_argument("--prefix", default="nccl_trace_rank_")
    p.add_argument("--no-timing", action="store_true", help="TORCH_NCCL_ENABLE_TIMING off")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-shared-frames",
        action="store_true",
        help="give every entry its own frame dicts (real dumps share them)",
    )
    p.add_argument(
        "--moment",
        choices=[m.value for m in Moment],
        default="blocked",
        help="when the dumps are taken (timeout/mixed need a hanging --fault; snapshot: a "
        "healthy job caught while running)",
    )
    p.add_argument(
        "--retired",
        choices=("before", "after", "either"),
        default="before",
        help="timed-out call retired by the watchdog before the dump ('after') or not",
    )
    p.add_argument("--only-active", action="store_true", help="dump with onlyActive=True")
    p.add_argument("--no-stacks", action="store_true", help="includeStackTraces=False")
    p.add_argument("--processes", type=int, default=None)
    p.add_argument("--out", type=Path, required=True, help="directory for the dump files")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    from frsim.write import write_dumps

    args = parse_args(argv)
    if args.format == "json" and not layout_of(args.version).json:
        print(f"error: torch wrote no JSON dumps for version {args.version}; use "
              "--format pickle or a version >= 2.4", file=sys.stderr)  # fmt: skip
        return 2
    tp = args.tp or min(8, args.world)
    pp = args.pp or (4 if args.world % (tp * 4) == 0 else 1)
    fault = None
    if args.fault or args.missing:
        kind = FaultKind(args.fault or "missing_dump")
        rank = args.fault_rank
        if rank is None:
            rank = args.missing[0] if not args.fault else _default_rank(kind, args.world, pp)
        fault = Fault(kind=kind, rank=rank, step=args.fault_step, missing=tuple(args.missing))
    try:
        spec = JobSpec(
            world_size=args.world,
            tp=tp,
            pp=pp,
            steps=1,
            buffer_size=args.entries,
            timing=not args.no_timing,
            coalesced=not args.no_coalesced,
            all_to_all=not args.no_all_to_all,
            batched_p2p=not args.no_batched_p2p,
            seed=args.seed,
        )
        steps = args.steps or steps_for_entries(spec, args.entries, args.version)
        spec = JobSpec(
            world_size=args.world,
            tp=tp,
            pp=pp,
            steps=steps,
            buffer_size=args.entries,
            timing=not args.no_timing,
            coalesced=not args.no_coalesced,
            all_to_all=not args.no_all_to_all,
            batched_p2p=not args.no_batched_p2p,
            seed=args.seed,
            fault=fault,
            capture=Capture(
                moment=Moment(args.moment),
                retired=args.retired,
                only_active=args.only_active,
                stacks=not args.no_stacks,
            ),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    job = simulate(spec)
    t1 = time.perf_counter()
    paths = write_dumps(
        job,
        args.out,
        version=args.version,
        fmt=args.format,
        prefix=args.prefix,
        processes=args.processes,
        share_frames=not args.no_shared_frames,
    )
    t2 = time.perf_counter()
    truth = job.truth.to_json()
    truth["spec"] = {
        "world_size": args.world,
        "tp": tp,
        "pp": pp,
        "dp": spec.dp_size,
        "steps": steps,
        "buffer_size": args.entries,
        "version": args.version,
        "format": args.format,
        "seed": args.seed,
        "moment": args.moment,
        "retired": args.retired,
        "only_active": args.only_active,
        "stacks": not args.no_stacks,
    }
    target = truth_path(args.out)
    target.write_text(json.dumps(truth, indent=2) + "\n")
    size = sum(p.stat().st_size for p in paths)
    print(
        f"simulated {args.world} ranks x {steps} steps in {t1 - t0:.1f} s; wrote {len(paths)} "
        f"dumps ({size / 1e6:.0f} MB) to {args.out} in {t2 - t1:.1f} s"
    )
    print(f"truth: {target}: {job.truth.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
