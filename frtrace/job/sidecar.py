"""Write the frtrace recorder sidecar: every thread's Python stack, from inside the process.

The sidecar is one JSON object per rank (``stacks_rank_<N>.json``)::

    {"format": "frtrace-stacks", "version": 1,
     "rank": 5, "pid": 1234, "host": "node-7", "dumped_at_ns": 1700000000000000000,
     "trigger": {"kind": "signal" | "exception" | "on_demand", "detail": "SIGUSR1"},
     "phase": "checkpoint", "world_size": 8,
     "threads": [{"id": "0x00007f...", "name": "MainThread", "is_main": true,
                  "native_id": 1234,
                  "frames": [{"name": "load_batch", "filename": "/job/data.py", "line": 88},
                             ...]}]}

Frames are innermost first, like py-spy and faulthandler. ``rank``, ``pid``, ``host``,
``detail``, ``native_id`` and ``line`` may be null, ``phase`` (what the job marked:
:mod:`frtrace.job.phase`) null or absent, ``world_size`` (the default group's, else
``$WORLD_SIZE``: the attempt's world, which a Gloo dump does not record) null or absent;
unknown keys are ignored by the reader.
``name`` is the code object's qualified name (``Event.wait``), as py-spy prints it.

:func:`capture_current_stacks` works from any thread: from a helper thread while the main
thread is blocked (in a collective, a sleep, a lock), or from a signal handler (which runs
on the main thread: its own frames are left out, so the main thread shows where it was).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from frtrace.base.files import replace_file
from frtrace.job.phase import current as current_phase

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "TRIGGER_KINDS",
    "TriggerKind",
    "capture_current_stacks",
    "write_stacks",
]

FORMAT_NAME = "frtrace-stacks"
FORMAT_VERSION = 1
TriggerKind = Literal["signal", "exception", "on_demand"]
TRIGGER_KINDS: tuple[TriggerKind, ...] = ("signal", "exception", "on_demand")

_THIS_FILE = __file__


def _rank_from_env() -> int | None:
    value = os.environ.get("RANK")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _frames_of(frame: FrameType | None, *, max_frames: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while frame is not None and len(out) < max_frames:
        code = frame.f_code
        out.append({"name": code.co_qualname, "filename": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return out


def capture_current_stacks(
    kind: TriggerKind = "on_demand",
    detail: str | None = None,
    *,
    rank: int | None = None,
    host: str | None = None,
    frame: FrameType | None = None,
    max_frames: int = 512,
) -> dict[str, Any]:
    """Every thread's stack now, as a sidecar document (a JSON-able dict).

    ``rank`` defaults to ``$RANK`` (set by torchrun), ``host`` to the host name. Frames of
    this module are dropped from the top of the calling thread's stack; ``frame`` starts
    the calling thread's stack there instead: pass a signal handler's ``frame`` argument,
    so the main thread shows where the signal interrupted it, not the handler.
    """
    if kind not in TRIGGER_KINDS:
        raise ValueError(f"trigger kind {kind!r} is not one of {', '.join(TRIGGER_KINDS)}")
    now_ns = time.time_ns()
    current = threading.get_ident()
    main_ident = threading.main_thread().ident
    by_ident = {t.ident: t for t in threading.enumerate()}
    threads: list[dict[str, Any]] = []
    for ident, top in sys._current_frames().items():
        start: FrameType | None = top
        if ident == current:
            start = frame
            if start is None:
                start = top
                while start is not None and start.f_code.co_filename == _THIS_FILE:
                    start = start.f_back
        thread = by_ident.get(ident)
        threads.append(
            {
                "id": f"0x{ident:016x}",
                "name": thread.name if thread is not None else None,
                "is_main": ident == main_ident,
                "native_id": thread.native_id if thread is not None else None,
                "frames": _frames_of(start, max_frames=max_frames),
            }
        )
    threads.sort(key=lambda t: (not t["is_main"], t["id"]))  # main thread first
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "rank": _rank_from_env() if rank is None else rank,
        "pid": os.getpid(),
        "host": socket.gethostname() if host is None else host,
        "dumped_at_ns": now_ns,
        "trigger": {"kind": kind, "detail": detail},
        "phase": current_phase(),
        "world_size": _world_size(),
        "threads": threads,
    }


def _world_size() -> int | None:
    """The job's world size: the default group's where it is up (torch already imported by
    the job: never imported here), else ``$WORLD_SIZE`` (torchrun's, per attempt)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:  # (a group torn down meanwhile: the environment's then)
        pass
    value = os.environ.get("WORLD_SIZE", "")
    return int(value) if value.isdigit() and len(value) <= 9 else None


def write_stacks(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write a sidecar atomically, 0600 (``frtrace.base.files.replace_file``)."""
    replace_file(Path(path), json.dumps(doc, indent=1) + "\n")
