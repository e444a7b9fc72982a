"""Python stack frames for entries, innermost first, as `torch::symbolize` reports them.

Real entries carry the whole Python stack of the thread that issued the call: the c10d API
function (`all_reduce` in distributed_c10d.py), the `_exception_logger` `wrapper` in
c10d_logger.py, then user frames down to `<module>`. Line numbers of torch frames are those of
torch 2.13; user frames belong to a made-up training script under /workspace/llm.

Collectives issued from a custom autograd Function's backward run on the autograd device
thread ("pt_autograd_0"), whose Python stack is short: the backward and `apply` only.
"""

from __future__ import annotations

Frame = tuple[str, str, int]

TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
C10D = f"{TORCH}/distributed/distributed_c10d.py"
_WRAPPER: Frame = ("wrapper", f"{TORCH}/distributed/c10d_logger.py", 83)
_MODULE = f"{TORCH}/nn/modules/module.py"
_CONTEXTLIB = "/usr/lib/python3.12/contextlib.py"
APP = "/workspace/llm"
_EXIT: Frame = ("__exit__", _CONTEXTLIB, 144)

# The c10d API part of a stack, per call site.
API: dict[str, tuple[Frame, ...]] = {
    "all_reduce": (("all_reduce", C10D, 3245), _WRAPPER),
    "barrier": (("barrier", C10D, 5349), _WRAPPER),
    "broadcast": (("broadcast", C10D, 3145), _WRAPPER),
    "all_gather": (("all_gather", C10D, 4280), _WRAPPER),
    "all_gather_into_tensor": (("all_gather_into_tensor", C10D, 4387), _WRAPPER),
    "reduce_scatter_tensor": (("reduce_scatter_tensor", C10D, 4936), _WRAPPER),
    "all_to_all_single": (("all_to_all_single", C10D, 5131), _WRAPPER),
    "send": (("isend", C10D, 2652), ("send", C10D, 2751), _WRAPPER),
    "recv": (("irecv", C10D, 2709), ("recv", C10D, 2794), _WRAPPER),
    "batch_send": (("isend", C10D, 2652), ("batch_isend_irecv", C10D, 3053), _WRAPPER),
    "batch_recv": (("irecv", C10D, 2709), ("batch_isend_irecv", C10D, 3053), _WRAPPER),
    "batch_end": (("_coalescing_manager", C10D, 2928), _EXIT, ("batch_isend_irecv", C10D, 3051)),
    "coalescing_manager": (("_coalescing_manager", C10D, 2919), _EXIT),
}

_TRAINER = f"{APP}/train/trainer.py"
_OUTER: tuple[Frame, ...] = (
    ("train", _TRAINER, 455),
    ("main", f"{APP}/train.py", 61),
    ("<module>", f"{APP}/train.py", 75),
)
_LAYERS = f"{APP}/parallel/layers.py"
_SCHEDULE = f"{APP}/train/schedule.py"

# The user part of a stack, per place in the training step (innermost first).
CONTEXT: dict[str, tuple[Frame, ...]] = {
    "setup": (("setup", _TRAINER, 77), ("main", f"{APP}/train.py", 58), _OUTER[2]),
    "teardown": (("cleanup", _TRAINER, 488), ("main", f"{APP}/train.py", 66), _OUTER[2]),
    "data": (
        ("broadcast_data", f"{APP}/data/loader.py", 57),
        ("get_batch", _TRAINER, 140),
        ("train_step", _TRAINER, 290),
        *_OUTER,
    ),
    "param_gather": (
        ("unshard", f"{APP}/parallel/fsdp.py", 96),
        ("train_step", _TRAINER, 294),
        *_OUTER,
    ),
    "layer_fwd": (
        ("forward", _LAYERS, 212),
        ("_call_impl", _MODULE, 1789),
        ("_wrapped_call_impl", _MODULE, 1778),
        ("forward", f"{APP}/model/transformer.py", 388),
        ("_call_impl", _MODULE, 1789),
        ("_wrapped_call_impl", _MODULE, 1778),
        ("forward_step", _SCHEDULE, 141),
        ("run_schedule", _SCHEDULE, 203),
        ("train_step", _TRAINER, 302),
        *_OUTER,
    ),
    "moe_fwd": (
        ("dispatch", f"{APP}/model/moe.py", 133),
        ("forward", f"{APP}/model/moe.py", 171),
        ("_call_impl", _MODULE, 1789),
        ("_wrapped_call_impl", _MODULE, 1778),
        ("forward_step", _SCHEDULE, 141),
        ("run_schedule", _SCHEDULE, 203),
        ("train_step", _TRAINER, 302),
        *_OUTER,
    ),
    "layer_bwd": (("backward", _LAYERS, 240), ("apply", f"{TORCH}/autograd/function.py", 307)),
    "moe_bwd": (
        ("backward", f"{APP}/model/moe.py", 150),
        ("apply", f"{TORCH}/autograd/function.py", 307),
    ),
    "pp_fwd": (
        ("send_recv", _SCHEDULE, 88),
        ("run_schedule", _SCHEDULE, 198),
        ("train_step", _TRAINER, 302),
        *_OUTER,
    ),
    "pp_bwd": (
        ("send_recv", _SCHEDULE, 88),
        ("run_schedule", _SCHEDULE, 221),
        ("train_step", _TRAINER, 302),
        *_OUTER,
    ),
    "vocab_gather": (
        ("gather_vocab_shards", _LAYERS, 318),
        ("log_metrics", _TRAINER, 351),
        ("train_step", _TRAINER, 324),
        *_OUTER,
    ),
    "grad_sync": (
        ("finalize_grads", f"{APP}/parallel/fsdp.py", 171),
        ("train_step", _TRAINER, 320),
        *_OUTER,
    ),
    "grad_norm": (
        ("clip_grad_norm", f"{APP}/optim/clip.py", 44),
        ("train_step", _TRAINER, 327),
        *_OUTER,
    ),
}

# Contexts that run on the autograd device thread.
AUTOGRAD_CONTEXTS = frozenset({"layer_bwd", "moe_bwd"})

_PADDING: tuple[Frame, ...] = (
    ("_call_impl", _MODULE, 1789),
    ("_wrapped_call_impl", _MODULE, 1778),
    ("forward", f"{APP}/model/block.py", 97),
)


def stack(api: str, context: str, depth: int) -> tuple[Frame, ...]:
    """The frames of a call to c10d `api` from `context`, `depth` frames for main-thread
    stacks (autograd-thread stacks keep their natural, shorter length up to `depth`)."""
    frames = API[api] + CONTEXT[context]
    if context not in AUTOGRAD_CONTEXTS and len(frames) < depth:
        # nested module calls between the innermost user frame and the rest of the stack
        cut = len(API[api]) + 1
        pad = tuple(_PADDING[i % len(_PADDING)] for i in range(depth - len(frames)))
        frames = frames[:cut] + pad + frames[cut:]
    if len(frames) > depth:
        keep_outer = 2 if depth >= 4 else 0
        frames = frames[: depth - keep_outer] + (frames[len(frames) - keep_outer :])
    return frames
