"""What a Python stack sample says: frames, threads, one process.

Every parser in :mod:`frtrace.pystack.parse` returns a :class:`ProcessStacks`; frames are
stored innermost first (the order py-spy and faulthandler print them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SOURCES", "Frame", "ProcessStacks", "Source", "ThreadStack"]

Source = Literal["py-spy-text", "py-spy-json", "dump_traceback", "faulthandler", "recorder"]
SOURCES: tuple[Source, ...] = (
    "py-spy-text",
    "py-spy-json",
    "dump_traceback",
    "faulthandler",
    "recorder",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One frame: the function, its file as the sample wrote it, and the line if known.

    ``native`` marks a C/C++ frame from ``py-spy dump --native`` (``clock_nanosleep
    (libc.so.6)``): its ``filename`` is the shared library and ``line`` is None.
    """

    function: str
    filename: str
    line: int | None = None
    native: bool = False

    def label(self) -> str:
        """``all_reduce (distributed_c10d.py:2501)``: py-spy's way, with the file's basename."""
        base = self.filename.replace("\\", "/").rsplit("/", 1)[-1]
        where = base if self.line is None else f"{base}:{self.line}"
        return f"{self.function} ({where})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadStack:
    """One thread's stack, innermost frame first.

    ``is_main`` is exact for py-spy (the thread named MainThread, or whose OS id is the
    pid) and the recorder sidecar; for faulthandler output, which names no thread, it is
    the one thread not started by :mod:`threading` (outermost frame not ``_bootstrap``).
    ``active``/``owns_gil`` come from py-spy; ``current`` marks faulthandler's
    ``Current thread`` (the thread that wrote the dump). None: the sample does not say.
    """

    thread_id: str | None
    name: str | None
    frames: tuple[Frame, ...]
    is_main: bool
    active: bool | None = None
    owns_gil: bool | None = None
    current: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessStacks:
    """All threads of one process at one moment, and where the sample came from."""

    rank: int | None
    pid: int | None
    host: str | None
    source: Source
    path: str
    threads: tuple[ThreadStack, ...]
    taken_at_ns: int | None = None
    trigger: str | None = None  # recorder sidecar: "signal: SIGUSR1", "on_demand", ...

    @property
    def main_thread(self) -> ThreadStack | None:
        for t in self.threads:
            if t.is_main:
                return t
        return None
