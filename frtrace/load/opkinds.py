"""The op families whose members may legitimately record different sizes: what matching
compares across ranks (``analysis.facts.match``), and what the cluster's fold must treat as
agreement (``load.workers.frontier``)."""

from __future__ import annotations

__all__ = ["COMPARE_INPUT_ONLY", "COMPARE_OUTPUT_ONLY", "UNEVEN_OPS"]

# Ops whose members legitimately pass different sizes: only op and dtypes are compared.
UNEVEN_OPS = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_to_all_v_single",
        "alltoall",
        "alltoall_base",
        "all_gather_v",
        "reduce_scatter_v",
        "allgather_v",
    }
)
# The root passes a list (gather: output, scatter: input), the others pass nothing there.
COMPARE_INPUT_ONLY = frozenset({"gather", "_gather_base"})
COMPARE_OUTPUT_ONLY = frozenset({"scatter", "_scatter_base"})
