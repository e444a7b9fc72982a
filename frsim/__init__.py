"""frsim: simulate distributed training jobs and write their NCCL flight-recorder dumps.

Independent ground truth for frtrace (it imports nothing from it)::

    from frsim import JobSpec, Fault, FaultKind, simulate, write_dumps

    spec = JobSpec(world_size=16, tp=4, pp=2, steps=30,
                   fault=Fault(kind=FaultKind.HOST_STALL, rank=5, step=20))
    job = simulate(spec)            # deterministic for spec.seed
    job.truth.culprit_ranks         # (5,)
    write_dumps(job, "out/dumps", version="2.10", fmt="pickle")

See README.md in this package for the execution model and the format versions.
"""

from frsim.job import Job, simulate
from frsim.layout import VERSIONS
from frsim.serialize import dump_object
from frsim.spec import Capture, Fault, FaultKind, JobSpec, Moment
from frsim.truth import Truth
from frsim.write import write_dumps

__all__ = [
    "VERSIONS",
    "Capture",
    "Fault",
    "FaultKind",
    "Job",
    "JobSpec",
    "Moment",
    "Truth",
    "dump_object",
    "simulate",
    "write_dumps",
]
