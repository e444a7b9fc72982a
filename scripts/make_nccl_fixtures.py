"""Write the NCCL-format fixtures: small simulated jobs in every Flight Recorder format.

No CPU job can produce NCCL dumps (states, timing, p2p, coalesced ops, the old torch 2.2 - 2.4
layouts), so these come from ``frsim``, which writes entries the way torch's C++ recorder does
(see frsim/README.md for the source of every field, version by version). Deterministic: the
same command always writes the same bytes.

    python3 scripts/make_nccl_fixtures.py            # rewrites tests/fixtures/nccl/

Layout: ``tests/fixtures/nccl/<scenario>/<version>-<encoding>/nccl_trace_rank_<N>`` and
``tests/fixtures/nccl/<scenario>/truth.json`` (the simulator's truth, never frtrace's output).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps  # noqa: E402

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
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    for name, fault in SCENARIOS.items():
        job = simulate(JobSpec(**MESH, fault=fault))  # type: ignore[arg-type]
        for version, encodings in ALL_VERSIONS if name in EVERY_FORMAT else FEW_VERSIONS:
            for encoding in encodings:
                target = args.out / name / f"{version}-{encoding}"
                write_dumps(job, target, version=version, fmt=encoding, processes=1)
        truth = job.truth.to_json() | {"spec": MESH}
        (args.out / name / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
        print(f"{name}: {job.truth.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
