"""The recorder's helper thread: a dump on a signal, and on ``frtrace collect``'s request.

The signal is handled by a thread, not by the main thread: a rank blocked inside a
collective never returns to Python to run a signal handler, yet it still dumps. (Python's
``signal.set_wakeup_fd`` wakes the thread from C; the main thread's handler does nothing.)
Where the wakeup descriptor is taken (an event loop owns it), the main thread's handler dumps
instead, which needs the main thread to run Python. The same thread answers collect's
requests on the registry's socket (:mod:`frtrace.job.registry`).
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from frtrace.job import registry as reg

__all__ = ["OnRequest", "OnSignal", "install_signals", "start_helper"]

OnSignal = Callable[[int, FrameType | None], None]  # (signal, the frame it came in, if known)
OnRequest = Callable[[], tuple[Path, Path | None]]  # collect asked: (dump, stacks sidecar)


def _noop_handler(signum: int, frame: FrameType | None) -> None:
    """The main thread's handler: the helper thread does the dump."""


def install_signals(
    sigs: list[int], on_signal: OnSignal
) -> tuple[dict[int, Any], socket.socket | None, socket.socket | None, int]:
    """Handlers for ``sigs`` (call from the main thread): (the previous handlers, the wakeup
    socket pair the helper thread reads, or None where the main thread's handler calls
    ``on_signal`` itself, the previous wakeup descriptor)."""
    r, w = socket.socketpair()
    r.setblocking(True)
    w.setblocking(False)
    previous = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    if previous != -1:  # e.g. an asyncio loop owns it: give it back, dump from the main thread
        signal.set_wakeup_fd(previous)
        r.close()
        w.close()
        warnings.warn(
            "signal.set_wakeup_fd is in use (an event loop?): frtrace dumps on a signal only "
            "when the main thread runs Python",
            RuntimeWarning,
            stacklevel=4,
        )
        return _installed(sigs, on_signal), None, None, -1
    return _installed(sigs, _noop_handler), r, w, previous


def _installed(sigs: list[int], handler: OnSignal) -> dict[int, Any]:
    """``handler`` for each of ``sigs`` (the previous handlers), the system calls the signal
    lands in restarted, not failed: Python's ``signal.signal`` makes them fail with EINTR,
    which C++ code does not retry (torch.save's ``open`` raised "Interrupted system call" in
    a rank blocked on a slow mount: the dump request broke the job it was to observe)."""
    previous = {}
    for signum in sigs:
        previous[signum] = signal.signal(signum, handler)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            signal.siginterrupt(signum, False)  # (SA_RESTART)
    return previous


def start_helper(
    wakeup: socket.socket | None,
    listener: socket.socket | None,
    sigs: list[int],
    on_signal: OnSignal,
    on_request: OnRequest,
) -> tuple[socket.socket, socket.socket, threading.Thread] | None:
    """The helper thread (None when it has nothing to wait for): (the socket it also waits
    on, the one whose closing ends it, the thread)."""
    if wakeup is None and listener is None:
        return None
    stop_r, stop_w = socket.socketpair()
    helper = _Helper(
        stop=stop_r,
        wakeup=wakeup,
        listener=listener,
        wanted=frozenset(int(s) for s in sigs),
        on_signal=on_signal,
        on_request=on_request,
    )
    thread = threading.Thread(target=helper.run, name="frtrace-recorder", daemon=True)
    thread.start()
    return stop_r, stop_w, thread


@dataclass(frozen=True, slots=True, kw_only=True)
class _Helper:
    """What the helper thread waits on, and what it does when each is ready."""

    stop: socket.socket
    wakeup: socket.socket | None
    listener: socket.socket | None
    wanted: frozenset[int]
    on_signal: OnSignal
    on_request: OnRequest

    def run(self) -> None:
        # (selectors, not select(): a process with more than 1,024 descriptors open is common)
        with selectors.DefaultSelector() as sel:
            for s in (self.stop, self.wakeup, self.listener):
                if s is not None:
                    sel.register(s, selectors.EVENT_READ)
            while self._one_wait(sel):
                pass

    def _one_wait(self, sel: selectors.BaseSelector) -> bool:
        """One wait and what it brought; False: the thread ends."""
        try:
            ready = {key.fileobj for key, _ in sel.select()}
        except (OSError, ValueError) as exc:
            if self.stop.fileno() != -1:  # (not disable() closing it: say so, never silently)
                warnings.warn(
                    f"frtrace.recorder: its helper thread stopped ({exc}): no dump on a "
                    "signal or on frtrace collect's request from now on",
                    RuntimeWarning,
                    stacklevel=1,
                )
            return False
        if self.stop in ready:
            return False  # disable()
        if self.wakeup is not None and self.wakeup in ready:
            try:
                data = self.wakeup.recv(64)
            except OSError:
                return False
            for signum in data:
                if signum in self.wanted:
                    self.on_signal(signum, None)
        if self.listener is not None and self.listener in ready:
            with contextlib.suppress(OSError):  # BlockingIOError: the client gave up
                conn, _ = self.listener.accept()
                reg.answer_request(conn, self.on_request)
        return True
