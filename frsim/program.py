"""Per-rank programs: the ordered host calls each rank makes, built from the mesh.

Every rank of a pipeline stage runs the same step template (only its groups differ):

    tp  broadcast of the batch from tp rank 0                 (Megatron get_batch)
    dp  all_gather_into_tensor_coalesced of the params        (FSDP unshard, fast path)
    forward, per microbatch: [recv act from stage-1], per layer tp all_gather +
        reduce_scatter (sequence parallel), a tp all_to_all (MoE, uneven), then one p2p unit
        [send act to stage+1, recv next act from stage-1]
    backward: the same mirrored (grads flow to stage-1); tp calls come from the autograd thread
    tp  uneven all_gather of vocab shards                      (slow path: _broadcast_oop
        per rank + ALLGATHER_coalesced)
    dp  reduce_scatter_tensor_coalesced of the grads          (or all_reduce buckets)
    world all_reduce of the grad norm

The job starts with a barrier on the default group and ends with another. A p2p unit is one
batch_isend_irecv (batched_p2p) or one standalone send/recv per op. Steps are closed: every
call of a step matches calls of the same step on other ranks.
"""

from __future__ import annotations

from frsim.faults import plan_fault
from frsim.mesh import Mesh
from frsim.spec import JobSpec
from frsim.units import Call, Sizes, Unit, UnitKind

HIDDEN = 4096
TOKENS = 4096  # tokens per microbatch
VOCAB = 50257  # GPT-2 vocabulary: uneven shards for any tp > 1
DDP_BUCKET = 26_214_400  # 100 MB of fp32 gradients


def _coll(
    axis: str,
    op: str,
    in_sizes: Sizes,
    dtype: str,
    out_sizes: Sizes | None = None,
    *,
    api: str,
    context: str,
    cost: float,
    gpu_gap: float = 50.0,
    host_gap: float = 40.0,
    out_dtype: str | None = None,
    mb: int = 0,
    a2a: bool = False,
) -> Unit:
    outs = in_sizes if out_sizes is None else out_sizes
    call = Call(
        op,
        in_sizes,
        (dtype,) * len(in_sizes),
        outs,
        (out_dtype or dtype,) * len(outs),
        api,
        mb=mb,
        a2a=a2a,
    )
    return Unit(
        UnitKind.COLL,
        axis,
        (call,),
        context,
        cost_us=cost,
        gpu_gap_us=gpu_gap,
        host_gap_us=host_gap,
    )


def barrier(context: str) -> Unit:
    """A c10d barrier on the default group: an all_reduce of one float."""
    return _coll(
        "world",
        "all_reduce_barrier",
        ((1,),),
        "Float",
        api="barrier",
        context=context,
        cost=50.0,
        host_gap=200.0,
    )


def _p2p_units(spec: JobSpec, ops: list[Call], context: str) -> list[Unit]:
    if not ops:
        return []
    if spec.batched_p2p:
        return [
            Unit(
                UnitKind.BATCH,
                "pp",
                tuple(ops),
                context,
                end_op="coalesced",
                end_api="batch_end",
                cost_us=250.0,
                gpu_gap_us=30.0,
                host_gap_us=60.0,
            )
        ]
    return [
        Unit(UnitKind.P2P, "pp", (op,), context, cost_us=250.0, gpu_gap_us=30.0, host_gap_us=40.0)
        for op in ops
    ]


def _p2p(spec: JobSpec, op: str, peer: int, tag: str, mb: int) -> Call:
    shape = ((TOKENS // spec.tp, HIDDEN),)
    api = ("batch_" if spec.batched_p2p else "") + op
    return Call(op, shape, ("BFloat16",), shape, ("BFloat16",), api, peer=peer, tag=tag, mb=mb)


def _layer_calls(spec: JobSpec, backward: bool, mb: int) -> list[Unit]:
    if spec.tp < 2:
        return []
    shard = ((TOKENS // spec.tp, HIDDEN),)
    full = ((TOKENS, HIDDEN),)
    scale = 2.0 if backward else 1.0
    ctx = "layer_bwd" if backward else "layer_fwd"
    units: list[Unit] = []
    for _ in range(spec.layers):
        units.append(
            _coll(
                "tp",
                "_all_gather_base",
                shard,
                "BFloat16",
                full,
                api="all_gather_into_tensor",
                context=ctx,
                cost=350.0,
                gpu_gap=1800.0 * scale,
            )
        )
        units.append(
            _coll(
                "tp",
                "_reduce_scatter_base",
                full,
                "BFloat16",
                shard,
                api="reduce_scatter_tensor",
                context=ctx,
                cost=350.0,
                gpu_gap=2500.0 * scale,
            )
        )
    if spec.all_to_all:
        units.append(
            _coll(
                "tp",
                "all_to_all",
                full,
                "BFloat16",
                full,
                api="all_to_all_single",
                context="moe_bwd" if backward else "moe_fwd",
                cost=500.0,
                gpu_gap=300.0 * scale,
                mb=mb,
                a2a=True,
            )
        )
    return units


def _dp_buckets(spec: JobSpec) -> list[int]:
    per_layer = 12 * HIDDEN * HIDDEN // spec.tp
    dp = spec.dp_size
    return [-(-per_layer // dp) * dp for _ in range(spec.layers)]


def step_template(spec: JobSpec, stage: int) -> tuple[Unit, ...]:
    """The units of one training step on a rank of pipeline `stage`."""
    pp, micro = spec.pp, spec.microbatches
    first, last = stage == 0, stage == pp - 1
    units: list[Unit] = []
    if spec.tp > 1:
        units.append(
            _coll(
                "tp",
                "broadcast",
                ((micro, TOKENS + 1),),
                "Long",
                api="broadcast",
                context="data",
                cost=40.0,
                host_gap=5000.0,
            )
        )
    if spec.dp_size > 1 and spec.coalesced:
        buckets = _dp_buckets(spec)
        shards = tuple((n // spec.dp_size,) for n in buckets)
        fulls = tuple((n,) for n in buckets)
        units.append(
            _coll(
                "dp",
                "all_gather_into_tensor_coalesced",
                shards,
                "BFloat16",
                fulls,
                api="coalescing_manager",
                context="param_gather",
                cost=25_000.0,
                host_gap=300.0,
            )
        )
    for backward in (False, True):
        tag, towards, source = ("grad", -1, +1) if backward else ("act", +1, -1)
        sends = not (first if backward else last)
        recvs = not (last if backward else first)
        ctx = "pp_bwd" if backward else "pp_fwd"
        if pp > 1 and recvs:
            units += _p2p_units(spec, [_p2p(spec, "recv", source, tag, 0)], ctx)
        for mb in range(micro):
            units += _layer_calls(spec, backward, mb)
            ops: list[Call] = []
            if pp > 1 and sends:
                ops.append(_p2p(spec, "send", towards, tag, mb))
            if pp > 1 and recvs and mb + 1 < micro:
                ops.append(_p2p(spec, "recv", source, tag, mb + 1))
            units += _p2p_units(spec, ops, ctx)
    if spec.tp > 1 and spec.coalesced:
        parts = []
        for i in range(spec.tp):
            rows = VOCAB // spec.tp + (1 if i < VOCAB % spec.tp else 0)
            shape = ((rows, HIDDEN),)
            parts.append(
                Call("_broadcast_oop", shape, ("BFloat16",), shape, ("BFloat16",), "all_gather")
            )
        units.append(
            Unit(
                UnitKind.SLOW,
                "tp",
                tuple(parts),
                "vocab_gather",
                end_op="ALLGATHER_coalesced",
                end_api="all_gather",
                cost_us=300.0,
                gpu_gap_us=200.0,
                host_gap_us=120.0,
            )
        )
    if spec.dp_size > 1:
        if spec.coalesced:
            buckets = _dp_buckets(spec)
            fulls = tuple((n,) for n in buckets)
            shards = tuple((n // spec.dp_size,) for n in buckets)
            units.append(
                _coll(
                    "dp",
                    "reduce_scatter_tensor_coalesced",
                    fulls,
                    "Float",
                    shards,
                    api="coalescing_manager",
                    context="grad_sync",
                    cost=40_000.0,
                    gpu_gap=400.0,
                )
            )
        else:
            for _ in range(max(1, spec.layers)):
                units.append(
                    _coll(
                        "dp",
                        "all_reduce",
                        ((DDP_BUCKET,),),
                        "Float",
                        api="all_reduce",
                        context="grad_sync",
                        cost=15_000.0,
                        gpu_gap=300.0,
                    )
                )
    units.append(
        _coll(
            "world",
            "all_reduce",
            ((1,),),
            "Float",
            api="all_reduce",
            context="grad_norm",
            cost=60.0,
            gpu_gap=100.0,
        )
    )
    return tuple(units)


PROLOGUE: tuple[Unit, ...] = (barrier("setup"),)
EPILOGUE: tuple[Unit, ...] = (barrier("teardown"),)


class Programs:
    """All ranks' programs: prologue, per-stage step template, fault plan, epilogue."""

    def __init__(self, spec: JobSpec, mesh: Mesh) -> None:
        self.spec, self.mesh = spec, mesh
        self.templates = tuple(step_template(spec, s) for s in range(spec.pp))
        self.plan = plan_fault(spec, mesh, self.templates)

    def step_units(self, rank: int, step: int) -> tuple[Unit, ...]:
        """Units of `rank` in `step`."""
        if step == self.plan.step and rank in self.plan.overrides:
            return self.plan.overrides[rank]
        return self.templates[self.mesh.stage(rank)]
