"""The stall watch of a job that changed no code: ``FRTRACE_WATCH`` in its environment.

torch (2.5 and later) calls every ``torch.backends`` entry point as it is imported
(``TORCH_DEVICE_BACKEND_AUTOLOAD``, on unless set to 0); frtrace declares :func:`load` there.
With ``$FRTRACE_WATCH`` unset it returns at once. Set, it reads the dump folder from the
recipe ``frtrace env --dir DIR`` prints (``TORCH_FR_DUMP_TEMP_FILE``, else
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: the folder of that prefix), sets the ring buffer's size
where the job set none (a watch needs a recorder that records), and starts a thread that
waits for the job's default process group, then :func:`frtrace.recorder.attach`\\ es: the
stall watch (:mod:`frtrace.job.watch`), ``frtrace collect``'s request socket, a dump on an
unhandled exception. A process that never makes a process group (torchrun's agent, a data
loader's worker) keeps only that thread, asleep. A job that calls ``enable()`` itself keeps
its own setup, whatever the order.

It never raises an ``Exception`` (torch turns one into "Failed to load the backend extension"
and stops its import): a problem is one line on stderr and no watch; the job runs on. A
stderr that cannot take that line (a full disk, a closed pipe, none at all) costs the line
only. ``KeyboardInterrupt`` and ``SystemExit`` are let through, as from any code (torch lets
them through too): a Ctrl-C during ``import torch`` still stops the process. It imports
neither torch nor the analysis. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns every
``torch.backends`` entry point off, this one included.

The dump folder must be the user's own, that group and others cannot write
(:func:`frtrace.job.recorder.dump_folder`): one that exists is checked here, at once (one line,
no waiting thread); one that does not is made 0700 when the job's group is ready.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

__all__ = ["POLL_S", "dump_folder", "load"]

POLL_S = 0.5  # how often the waiting thread looks for the default process group
_PREFIXES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
_BUFFERS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_started = False


def dump_folder(env: dict[str, str] | os._Environ[str]) -> Path | None:
    """The folder the job's dumps go to, from the first dump-file prefix it sets."""
    for name in _PREFIXES:
        prefix = env.get(name, "").strip()
        if prefix:
            return Path(prefix).parent
    return None


def load() -> None:
    """torch's entry point: start waiting to watch when ``$FRTRACE_WATCH`` asks for it."""
    try:
        _load()
    except Exception as exc:  # never stop torch's import
        _not_watching(exc)


def _load() -> None:
    global _started
    if not os.environ.get("FRTRACE_WATCH") or _started:
        return
    _started = True
    from frtrace.job.env import DEFAULT_BUFFER_SIZE
    from frtrace.job.watch import resolve

    watch_s = resolve(None)  # (nonsense is one warning and None)
    if watch_s is None:
        return
    folder = dump_folder(os.environ)
    if folder is None:
        _say(
            "FRTRACE_WATCH is set but no dump folder is: set TORCH_FR_DUMP_TEMP_FILE="
            "DIR/comm_lib_trace_rank_ as `frtrace env --dir DIR` prints it; not watching"
        )
        return
    if os.path.lexists(folder):  # (another user's folder, planted: said at once)
        from frtrace.job.recorder import dump_folder as checked

        if checked(folder, who="frtrace: FRTRACE_WATCH") is None:
            return
    if not any(os.environ.get(name) for name in _BUFFERS):
        for name in _BUFFERS:  # (before the job makes its groups: they read it then)
            os.environ[name] = str(DEFAULT_BUFFER_SIZE)
    waiter = threading.Thread(
        target=_attach_when_ready, args=(folder, watch_s), name="frtrace-autowatch", daemon=True
    )
    waiter.start()


def _attach_when_ready(folder: Path, watch_s: float) -> None:
    from frtrace.job import recorder
    from frtrace.job.watch import default_group

    try:
        while default_group() is None:
            threading.Event().wait(POLL_S)
        # (made 0700 when missing; refused, in one line, when not the user's own)
        if (
            recorder.state() is None
            and recorder.dump_folder(folder, who="frtrace: FRTRACE_WATCH") is not None
        ):
            recorder.attach(folder, watch_s)
    except Exception as exc:  # the job runs on, unwatched
        _not_watching(exc)


def _not_watching(exc: Exception) -> None:
    with contextlib.suppress(Exception):  # (an exception whose str() raises: no line)
        _say(f"FRTRACE_WATCH: not watching ({type(exc).__name__}: {exc})")


def _say(text: str) -> None:
    """One line on stderr, never an exception (an unwritable or missing stderr: no line)."""
    err = sys.stderr
    if err is not None:  # (print(file=None) would write to stdout)
        with contextlib.suppress(Exception):
            print(f"frtrace: {text}", file=err, flush=True)
