"""Write the NCCL-format fixtures: small simulated jobs in every Flight Recorder format.

No CPU job can produce NCCL dumps (states, timing, p2p, coalesced ops, the old torch 2.2 - 2.4
layouts), so these come from ``frsim``, which writes entries the way torch's C++ recorder does
(see frsim/README.md for the source of every field, version by version). Deterministic: the
same command always writes the same bytes.

    python3 scripts/make_nccl_fixtures.py            # rewrites tests/fixtures/nccl/
    python3 scripts/make_nccl_fixtures.py --only gpu_stops_completing   # that scenario only

Layout: ``tests/fixtures/nccl/<scenario>/<version>-<encoding>/nccl_trace_rank_<N>`` and
``tests/fixtures/nccl/<scenario>/truth.json`` (the simulator's truth, never frtrace's output).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from frsim import Capture, Fault, FaultKind, JobSpec, simulate, write_dumps  # noqa: E402

# 8 ranks as tp=2 x pp=2 x dp=2: every kind of group, batched p2p, coalesced ops, timing on.
MESH = {
    "world_size": 8,
    "tp": 2,
    "pp": 2,
    "steps": 4,
    "seed": 11,
    "buffer_size": 60,
    "stack_depth": 4,
}
SCENARIOS: dict[str, Fault | None] = {
    "healthy": None,
    "host_stall": Fault(kind=FaultKind.HOST_STALL, rank=5, step=3),
    "wrong_size": Fault(kind=FaultKind.WRONG_SIZE, rank=2, step=3),
    "opposite_order": Fault(kind=FaultKind.OPPOSITE_ORDER, rank=4, step=3),
    "p2p_no_peer": Fault(kind=FaultKind.P2P_NO_PEER, rank=6, step=3),
    "missing_dump": Fault(kind=FaultKind.HOST_STALL, rank=3, step=3, missing=(3,)),
}
# A failing GPU (issue 50, item 3; FORMAT.md sections 9 and 12), shaped like NVIDIA's 16-rank
# Megatron MoE dumps (torch 2.8, NCCL, onlyActive, no stacks): tp=4 x dp=4, the all_to_all of
# MoE on tp. The culprit's completion marks stop 12 calls (12 tp ops) before its host stalls:
# its stream still runs them, so its tp peers complete them (their pg_status says so, their
# entries of them are gone), while its own entries of them stay scheduled; then its stream
# hangs, its host posts nothing more, and the job hangs on the next op. Each comes with its
# twin, the same job with every completion marked ("_marked"): the same culprits.
GPU_MESH = {
    "world_size": 16,
    "tp": 4,
    "pp": 1,
    "steps": 5,
    "seed": 50,
    "buffer_size": 2000,
    "coalesced": False,
    "microbatches": 2,
}
GPU_STOPS: dict[str, tuple[dict[str, object], Fault]] = {
    # one GPU, no NCCL timing: no dump says when it was written
    "gpu_stops_completing": (
        {**GPU_MESH, "timing": False},
        Fault(kind=FaultKind.HOST_STALL, rank=12, step=3, op_index=14, gpu_unmarked=12),
    ),
    # two GPUs at once (ranks 9 and 14, in two tp groups), NCCL timing on: the ranks waiting in
    # the hung op show when they dumped (their entry started, discovered by the dump)
    "gpu_stops_completing_two": (
        {**GPU_MESH, "timing": True},
        Fault(kind=FaultKind.HOST_STALL, rank=9, step=3, op_index=14, gpu_unmarked=12, also=(14,)),
    ),
}
GPU_CAPTURE = Capture(only_active=True, stacks=False)
GPU_VERSIONS = [("2.9", ["pickle"]), ("2.4", ["json"])]


def gpu_scenarios() -> dict[str, tuple[JobSpec, dict[str, object]]]:
    """The failing-GPU jobs and their twins with every completion marked: name -> (the job,
    what truth.json records of its spec)."""
    out: dict[str, tuple[JobSpec, dict[str, object]]] = {}
    for name, (mesh, fault) in GPU_STOPS.items():
        for suffix, unmarked in (("", fault.gpu_unmarked), ("_marked", 0)):
            twin = replace(fault, gpu_unmarked=unmarked)
            spec = JobSpec(**mesh, fault=twin, capture=GPU_CAPTURE)  # type: ignore[arg-type]
            recorded = mesh | {
                "only_active": True,
                "stacks": False,
                "fault": {
                    "rank": twin.rank,
                    "also": list(twin.also),
                    "step": twin.step,
                    "op_index": twin.op_index,
                    "gpu_unmarked": twin.gpu_unmarked,
                },
            }
            out[name + suffix] = (spec, recorded)
    return out


# (version, encodings): torch 2.2, 2.3, 2.4, 2.5-2.7, 2.8, 2.9+; JSON exists from 2.5 on.
ALL_VERSIONS = [
    ("2.2", ["pickle"]),
    ("1.4", ["pickle"]),
    ("2.1", ["pickle"]),
    ("2.4", ["pickle", "json"]),
    ("2.9", ["pickle"]),
    ("2.10", ["pickle", "json"]),
]
# every format for two scenarios; the newest pickle and an older JSON for the rest
FEW_VERSIONS = [("2.4", ["json"]), ("2.10", ["pickle"])]
EVERY_FORMAT = {"healthy", "host_stall"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "nccl")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="write these scenarios only (the others stay)"
    )
    args = parser.parse_args(argv)
    jobs: dict[str, tuple[JobSpec, dict[str, object], list[tuple[str, list[str]]]]] = {}
    for name, fault in SCENARIOS.items():
        versions = ALL_VERSIONS if name in EVERY_FORMAT else FEW_VERSIONS
        spec = JobSpec(**MESH, fault=fault)  # type: ignore[arg-type]
        jobs[name] = (spec, dict(MESH), versions)
    for name, (spec, recorded) in gpu_scenarios().items():
        jobs[name] = (spec, recorded, GPU_VERSIONS)
    unknown = sorted(set(args.only or ()) - set(jobs))
    if unknown:
        parser.error(f"no scenario {', '.join(unknown)} (there are: {', '.join(jobs)})")
    if args.only:
        jobs = {name: jobs[name] for name in args.only}
        for name in jobs:
            shutil.rmtree(args.out / name, ignore_errors=True)
    else:
        shutil.rmtree(args.out, ignore_errors=True)
    for name, (spec, recorded, versions) in jobs.items():
        job = simulate(spec)
        for version, encodings in versions:
            for encoding in encodings:
                target = args.out / name / f"{version}-{encoding}"
                write_dumps(job, target, version=version, fmt=encoding, processes=1)
        truth = job.truth.to_json() | {"spec": recorded}
        (args.out / name / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
        print(f"{name}: {job.truth.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
