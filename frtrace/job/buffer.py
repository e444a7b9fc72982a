"""This process's Flight Recorder buffer, as the recorder writes it into a dump."""

from __future__ import annotations

from typing import Any

__all__ = ["trace_bytes"]


def trace_bytes(fmt: str) -> bytes:
    """This process's Flight Recorder buffer, from the recorder its backend uses.

    NCCL has its own recorder: when the default group's backend includes NCCL (also
    ``cpu:gloo,cuda:nccl``), that one is dumped; otherwise the generic one Gloo records into.
    """
    import torch.distributed as dist
    from torch._C import _distributed_c10d

    c10d: Any = _distributed_c10d  # private API: its stubs lack the dump functions
    nccl = False
    if dist.is_initialized() and hasattr(c10d, "_dump_nccl_trace"):
        nccl = "nccl" in str(dist.get_backend()).lower()
    if fmt == "json":
        fn = c10d._dump_nccl_trace_json if nccl else c10d._dump_fr_trace_json
        data = fn(includeCollectives=True, onlyActive=False)
    else:
        fn = c10d._dump_nccl_trace if nccl else c10d._dump_fr_trace
        data = fn(includeCollectives=True, includeStackTraces=True, onlyActive=False)
    return data if isinstance(data, bytes) else str(data).encode()
