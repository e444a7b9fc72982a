"""The phase a rank is in, as the job marks it or as its stack shows it, for the report a
stalled job writes about itself: "rank 0 was writing a checkpoint".

The job marks a phase around slow host work::

    with frtrace.recorder.phase("checkpoint"):
        torch.save(state, path)

and every stacks sidecar written meanwhile says so (``"phase": "checkpoint"``,
:mod:`frtrace.job.sidecar`). Without a mark, a main thread inside torch's checkpoint writers
(``torch.save``, ``torch.distributed.checkpoint``) is in the phase its stack shows
(:func:`phase_of_frames`). A phase is this process's own and resets at a restart: a forked child
(a data loader's worker) and a restarted job's new processes start with none, and the watch's
report reads only the sidecars written since the stall began. It never changes what the watch
does: the ranks named are the analysis's, the phase says what a rank was doing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator

__all__ = ["CHECKPOINT", "CHECKPOINT_LOAD", "current", "phase", "phase_of_frames", "wording"]

CHECKPOINT = "checkpoint"
CHECKPOINT_LOAD = "checkpoint load"
MAX_PHASE_CHARS = 80  # a phase's name is cut here

# torch's checkpoint writers and readers, by file (the path's tail) and function name
_SERIALIZATION = "torch/serialization.py"
_DCP = "torch/distributed/checkpoint/"
_DCP_SAVER = _DCP + "state_dict_saver.py"  # dcp.save, async_save
_DCP_LOADER = _DCP + "state_dict_loader.py"  # dcp.load
_SAVES = frozenset({"save", "_save", "_legacy_save"})
_LOADS = frozenset({"load", "_load", "_legacy_load"})

_lock = threading.Lock()
_active: list[tuple[object, str]] = []  # (token, name), the innermost last


def _forget() -> None:
    _active.clear()


os.register_at_fork(after_in_child=_forget)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """While the block runs, this process is in phase ``name`` (innermost wins, any thread);
    each dump's stacks sidecar records it, and the watch's report says it."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a phase is a name such as 'checkpoint', not {name!r}")
    token = object()
    with _lock:
        _active.append((token, name.strip()[:MAX_PHASE_CHARS]))
    try:
        yield
    finally:
        with _lock:
            _active[:] = [entry for entry in _active if entry[0] is not token]


def current() -> str | None:
    """The phase this process is in now (the innermost marked), None for none."""
    with _lock:
        return _active[-1][1] if _active else None


def phase_of_frames(frames: Iterable[tuple[str, str]]) -> str | None:
    """The phase a thread's stack (``(filename, function)`` pairs, innermost first) shows:
    :data:`CHECKPOINT` inside ``torch.save`` or ``torch.distributed.checkpoint``'s save,
    :data:`CHECKPOINT_LOAD` inside ``torch.load`` or its load; None otherwise. The outermost
    of torch's frames decides (a save reads files too)."""
    dcp = False
    for filename, function in reversed(list(frames)):
        path = filename.replace("\\", "/")
        if path.endswith(_SERIALIZATION) and function in _SAVES | _LOADS:
            return CHECKPOINT if function in _SAVES else CHECKPOINT_LOAD
        if _DCP in path:
            dcp = True
            if path.endswith((_DCP_SAVER, _DCP_LOADER)):
                return CHECKPOINT if path.endswith(_DCP_SAVER) else CHECKPOINT_LOAD
    return CHECKPOINT if dcp else None


def wording(name: str) -> str:
    """What a rank in phase ``name`` was doing: ``writing a checkpoint``, ``in phase 'eval'``."""
    if name == CHECKPOINT:
        return "writing a checkpoint"
    if name == CHECKPOINT_LOAD:
        return "loading a checkpoint"
    return f"in phase {name!r}"
