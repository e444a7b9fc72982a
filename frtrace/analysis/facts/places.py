"""Where one rank's Python stack sample says it is: in a torch.distributed call or in host
code, in which function of the user's code (a ``CulpritWhere``, one per rank with a stack)."""

from __future__ import annotations

import os

from frtrace.model import CulpritWhere
from frtrace.pystack.model import Frame, ProcessStacks
from frtrace.pystack.where import frame_label, short_filename, where

__all__ = ["culprit_where", "in_send_recv"]

# What a torch.distributed call that sends or receives point to point is called, as its
# innermost library frame shows it: send, recv, isend, irecv, batch_isend_irecv,
# send/recv_object_list, a P2POp, a pipeline schedule's wait on its batched p2p
# (torch.distributed.pipelining: ``_wait_batch_p2p``, anywhere in ``pipelining/``).
_P2P_WORDS = ("send", "recv", "p2p", "torch/distributed/pipelining/")


def _is_collective_call(frame: Frame | None) -> bool:
    if frame is None:
        return False
    path = frame.filename.replace("\\", "/")
    return "torch/distributed/" in path or "torch\\distributed" in frame.filename


def culprit_where(rank: int, sample: ProcessStacks) -> CulpritWhere:
    """Where one rank's sample says it is."""
    w = where(sample)
    # (a torch.distributed frame anywhere inside the user's: DTensor's functional collectives
    # wait in torch's op dispatch, ``_ops.py``, under ``_functional_collectives.wait_tensor``)
    inside = _inside_user(w.thread.frames if w.thread is not None else (), w.user_frame)
    dist = next((f for f in inside if not f.native and _is_collective_call(f)), None)
    place = (
        "collective" if dist is not None or _is_collective_call(w.library_frame) else "host code"
    )
    user = w.user_frame
    thread = w.thread
    off_main = thread is not None and thread.is_main is False and w.thread_reason != "main thread"
    return CulpritWhere(
        rank=rank,
        place=place,
        function=None if user is None else user.function,
        file=None if user is None else short_filename(user.filename),
        line=None if user is None else user.line,
        library_call=None if w.library_frame is None else frame_label(w.library_frame),
        thread=w.thread_reason,
        source=sample.source,
        file_name=os.path.basename(sample.path),
        taken_at_ns=sample.taken_at_ns,
        trigger=sample.trigger,
        innermost=None if user is not None or w.innermost is None else frame_label(w.innermost),
        sampled="no_thread" if thread is None else "frames" if thread.frames else "empty_thread",
        off_main=off_main,
    )


def _inside_user(frames: tuple[Frame, ...], user: Frame | None) -> tuple[Frame, ...]:
    """The frames inside the user's innermost one (none where it has none: a thread of
    library frames only, whose outermost, torchrun's ``record`` wrapper, is no call)."""
    for i, f in enumerate(frames):
        if f is user:
            return frames[:i]
    return ()


def in_send_recv(place: CulpritWhere) -> bool:
    """Is the rank's stack inside a torch.distributed point-to-point call (or a pipeline
    schedule waiting on one)? Gloo records none of them."""
    call = (place.library_call or "").replace("\\", "/")
    return place.place == "collective" and any(word in call for word in _P2P_WORDS)
