"""Where one process is: the innermost frame of the user's own code, and the library call
it is in (``load_batch (data.py:88), in time.sleep``).

Library code is anything in torch, site-packages/dist-packages, the standard library
(``threading.py``, ``selectors``, ``socket``, ``subprocess``...), frtrace itself, and native
frames (``py-spy --native``). Filenames come absolute (faulthandler, the sidecar, py-spy
``--json``) or shortened to the package part (py-spy text: ``torch/distributed/...``,
``threading.py``); both are recognised: the standard library by this Python's ``sysconfig``
folders and by where any Python keeps it (``lib/python3.11/``, ``lib64/python3.11/``,
``Lib/``, ``<frozen ...>``), by a module name of it for a bare name. Library frames are
context: never the user's frame, never the call site (``call_site``).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack

__all__ = [
    "Where",
    "call_site",
    "frame_label",
    "innermost_user_frame",
    "is_library_file",
    "is_library_frame",
    "is_library_text",
    "pick_thread",
    "short_filename",
    "where",
    "where_summary",
]

# Standard-library names a user's own file is often called: not library for a bare name.
_USERISH = frozenset({"test", "tests", "code", "main", "this", "types", "token", "profile"})
_STDLIB = frozenset(sys.stdlib_module_names) - _USERISH
_LIB_DIRS = re.compile(r"(?:^|/)(?:site-packages|dist-packages)/")
# The standard library however the job's Python was installed: ``lib/python3.11/``,
# ``lib64/python3.11/`` (Fedora, RHEL), ``python3.11/`` alone, ``C:/Python311/Lib/`` (Windows).
_STDLIB_DIR = re.compile(
    r"(?:^|/)(?:[Ll]ib(?:64)?/python\d+(?:\.\d+)?t?|python\d\.\d+t?)/|^[A-Za-z]:/(?:[^/]+/)*Lib/"
)
_CUT = re.compile(r"^.*/(?:site-packages|dist-packages|[Ll]ib(?:64)?/python\d+(?:\.\d+)?t?)/")


@functools.cache
def _frtrace_modules() -> frozenset[str]:
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        names = os.listdir(pkg)
    except OSError:
        return frozenset({"pystack", "recorder.py"})
    return frozenset(n for n in names if n.endswith(".py") or n == "pystack")


@functools.cache
def short_filename(filename: str) -> str:
    """The package part of a library path (``torch/distributed/distributed_c10d.py``,
    ``threading.py``), the base name of anything else (``train.py``)."""
    path = filename.replace("\\", "/")
    cut = _CUT.sub("", path)
    if cut != path:
        return cut
    if not path.startswith("/") and ":" not in path[:3]:  # already short (py-spy text)
        return path if _is_library_path(path) else path.rsplit("/", 1)[-1]
    return path.rsplit("/", 1)[-1]


@functools.cache
def _install_dirs() -> tuple[str, ...]:
    """This Python's standard library and site-packages folders (``sysconfig``), each ending
    in ``/``: a job run with the same interpreter writes them as they are."""
    dirs: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            where = sysconfig.get_path(key)
        except (KeyError, ValueError):  # pragma: no cover - a scheme without it
            continue
        if where:
            dirs.add(where.replace("\\", "/").rstrip("/") + "/")
    return tuple(sorted(dirs))


def is_library_file(filename: str) -> bool:
    """Is this file library code (torch, the standard library, site-packages, frtrace)? See
    :func:`is_library_frame`."""
    return _is_library_path(filename)


@functools.cache
def _is_library_path(filename: str) -> bool:
    path = filename.replace("\\", "/")
    if path.startswith("<frozen ") or path in ("???", "", "<unknown>"):
        return True
    if path.startswith("<"):
        return False  # <string>, <stdin>: code the user passed in
    if _LIB_DIRS.search(path) or _STDLIB_DIR.search(path):
        return True
    if path.startswith(_install_dirs()):
        return True
    parts = [p for p in path.split("/") if p]
    if not parts:
        return True
    if "torch" in parts[:-1]:
        return True
    mods = _frtrace_modules()
    for i, part in enumerate(parts[:-1]):
        if part == "frtrace" and parts[i + 1] in mods:
            return True
    if path.startswith("/") or ":" in path[:3]:
        return os.path.abspath(path).startswith(_frtrace_dir() + os.sep)
    first = parts[0].removesuffix(".py")  # py-spy's short name: threading.py, asyncio/...
    return first in _STDLIB or first == "torch"


@functools.cache
def _frtrace_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_library_frame(frame: Frame, extra_library: Iterable[str] = ()) -> bool:
    """Torch, site-packages, the standard library, frtrace, native code; or a path
    containing one of ``extra_library`` (``"lightning/"``, ``"/opt/framework/"``)."""
    if frame.native:
        return True
    if _is_library_path(frame.filename):
        return True
    path = frame.filename.replace("\\", "/")
    return any(s in path for s in extra_library)


def _file_of(frame: str) -> str | None:
    """The file of a frame written ``name (file:line)`` or ``name (file)``."""
    _, sep, rest = frame.partition(" (")
    if not sep or not rest.endswith(")"):
        return None
    where = rest[:-1]
    path, colon, line = where.rpartition(":")
    return path if colon and line.isdigit() else where


def is_library_text(frame: str) -> bool:
    """Is a frame written ``name (file:line)`` (a Flight Recorder entry's stack) library
    code? A frame that names no file is not taken for one."""
    path = _file_of(frame)
    return path is not None and _is_library_path(path)


def call_site(stack: Sequence[str]) -> str | None:
    """Where the user's code called in: the innermost frame of a stack written ``name
    (file:line)``, innermost first, that is not library code (torch, the standard library,
    site-packages); None when every frame is (they are context, never the call site)."""
    return next((frame for frame in stack if not is_library_text(frame)), None)


def frame_label(frame: Frame) -> str:
    """``all_reduce (torch/distributed/distributed_c10d.py:3252)``; ``step (train.py:120)``."""
    short = short_filename(frame.filename)
    return (
        f"{frame.function} ({short})"
        if frame.line is None
        else (f"{frame.function} ({short}:{frame.line})")
    )


def pick_thread(stacks: ProcessStacks) -> tuple[ThreadStack | None, str]:
    """The thread to read (the main thread when the sample has it), and why that one."""
    main = stacks.main_thread
    if main is not None:
        return main, "main thread"
    with_frames = [t for t in stacks.threads if t.frames]
    for attr, why in (
        ("owns_gil", "holds the GIL"),
        ("active", "is active"),
        ("current", "wrote the dump"),
    ):
        for t in with_frames:
            if getattr(t, attr) is True:
                return t, f"no main thread in the sample; thread {_thread_name(t)} {why}"
    if with_frames:
        t = max(with_frames, key=lambda t: len(t.frames))
        return t, f"no main thread in the sample; thread {_thread_name(t)} has the deepest stack"
    return None, "no thread in the sample has Python frames"


def _thread_name(t: ThreadStack) -> str:
    if t.name:
        return repr(t.name)
    return t.thread_id or "?"


def _thread_of(stack: ProcessStacks | ThreadStack) -> ThreadStack | None:
    return pick_thread(stack)[0] if isinstance(stack, ProcessStacks) else stack


def innermost_user_frame(
    stack: ProcessStacks | ThreadStack, extra_library: Iterable[str] = ()
) -> Frame | None:
    """The innermost frame of the user's code on the main thread (or on the thread
    :func:`pick_thread` chooses when the sample has no main thread); None when every frame
    is library code."""
    thread = _thread_of(stack)
    if thread is None:
        return None
    extra = tuple(extra_library)
    for f in thread.frames:
        if not is_library_frame(f, extra):
            return f
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Where a process is: the thread read and why, the user's frame, the library call."""

    thread: ThreadStack | None
    thread_reason: str
    user_frame: Frame | None
    library_frame: Frame | None  # the innermost Python library frame inside the user's
    # (only native frames inside it: the named native frame nearest it, e.g. time_sleep)
    innermost: Frame | None  # the innermost Python frame of the thread
    summary: str


def where(stack: ProcessStacks | ThreadStack, extra_library: Iterable[str] = ()) -> Where:
    """:func:`innermost_user_frame` with the library call it is in, and a one-line summary."""
    if isinstance(stack, ProcessStacks):
        thread, reason = pick_thread(stack)
    else:
        thread, reason = stack, ("main thread" if stack.is_main else "the thread given")
    extra = tuple(extra_library)
    if thread is None or not thread.frames:
        return Where(
            thread=thread,
            thread_reason=reason,
            user_frame=None,
            library_frame=None,
            innermost=None,
            summary="no Python frames" + ("" if thread is None else " on the thread"),
        )
    py = [f for f in thread.frames if not f.native]
    innermost = py[0] if py else None
    user: Frame | None = None
    library: Frame | None = None
    for i, f in enumerate(thread.frames):
        if not is_library_frame(f, extra):
            user = f
            inside = thread.frames[:i]
            library = next((g for g in inside if not g.native), None)
            if library is None:  # py-spy --native: the C call nearest the user's frame
                library = next(
                    (g for g in reversed(inside) if not g.function.startswith("0x")), None
                )
            break
    if user is None:
        text = "no user frame" + (f"; innermost {frame_label(innermost)}" if innermost else "")
    else:
        text = frame_label(user)
        if library is not None:
            text += f", in {frame_label(library)}"
    if reason != "main thread" and thread.is_main is False:
        text += f" [{reason}]"
    return Where(
        thread=thread,
        thread_reason=reason,
        user_frame=user,
        library_frame=library,
        innermost=innermost,
        summary=text,
    )


def where_summary(stack: ProcessStacks | ThreadStack, extra_library: Iterable[str] = ()) -> str:
    """``load_batch (data.py:88), in Event.wait (threading.py:629)``; says which thread
    was read when the sample has no main thread."""
    return where(stack, extra_library).summary
