"""Job-side helper: record collectives, and write this rank's dump where and when you choose.

Call ``enable()`` before ``init_process_group``::

    import frtrace.recorder

    frtrace.recorder.enable("/shared/fr_dumps")   # env for recording + dump triggers
    dist.init_process_group("gloo")                 # any backend, Gloo included
    ...
    frtrace.recorder.dump()                         # on demand, e.g. from your own watchdog

and when the job hangs, ``kill -USR1 <pid of every rank>``: every rank writes
``/shared/fr_dumps/comm_lib_trace_rank_<rank>``; ``frtrace analyze -d`` that folder. ``frtrace
collect DIR`` asks instead; the answer goes beside, never over the rank's own dump, under a
hidden name (``.comm_lib_trace_rank_<rank>.request``: :mod:`frtrace.job.answers`).
``enable(DIR, watch=300)`` (or ``$FRTRACE_WATCH``) does it all itself (:mod:`frtrace.job.watch`).
A rank also dumps on an unhandled exception (a Gloo collective that times out raises one), and
writes its threads' stacks when the launcher stops it (SIGTERM: :mod:`frtrace.job.termstack`).

Next to every dump it writes ``stacks_rank_<rank>.json`` (:mod:`frtrace.job.sidecar`): the
Python stack of every thread, the dump time and its trigger, so the report can say where the
culprit is stuck. While enabled, ``<runtime dir>/recorder-<pid>.json`` says where it dumps and
``recorder-<pid>.sock`` takes ``frtrace collect``'s dump requests (:mod:`frtrace.job.registry`:
collect never signals, so a SIGUSR1 handler installed after ``enable()`` never fires for it).
A runtime directory not the user's own, or others can write, is refused: one warning.

The dump folder must be the user's own too, that group and others cannot write (made 0700
when missing; :func:`dump_folder`): another user's would let them read every dump and replace
the report. ``enable()`` and ``attach()`` refuse any other with one line on stderr naming it
and what to do, and set up nothing (no environment, no trigger, no watch). Dumps are 0600.

A signal is handled by a thread (:mod:`frtrace.job.triggers`): a rank blocked in C dumps too.

torch is imported inside the functions only: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from frtrace.base.files import own_folder, replace_file
from frtrace.errors import UnsafePathError
from frtrace.job import registry as reg
from frtrace.job import termstack, triggers
from frtrace.job import watch as watching
from frtrace.job.answers import ANSWERS_APART, answer_name
from frtrace.job.buffer import trace_bytes as _trace_bytes
from frtrace.job.env import (
    DEFAULT_BUFFER_SIZE,
    DUMP_PREFIX,
    RENAMED,
    STACKS_PREFIX,
    installed_torch,
    job_environment,
)
from frtrace.job.hooks import install_excepthooks
from frtrace.job.phase import phase
from frtrace.job.sidecar import TriggerKind, capture_current_stacks, write_stacks

__all__ = [
    "RecorderState",
    "attach",
    "disable",
    "dump",
    "dump_folder",
    "dump_path",
    "enable",
    "phase",
    "state",
]

MAX_DETAIL_CHARS = 500  # an exception message is cut here in the sidecar

_Written = tuple[Path, Path | None]  # a dump and its stacks sidecar (None: none written)
_Why = tuple[TriggerKind, str | None, FrameType | None]  # the sidecar's trigger, detail, frame
_ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


@dataclass(slots=True, kw_only=True)
class RecorderState:
    """What ``enable()`` set up, so ``disable()`` can undo it."""

    dump_dir: Path
    fmt: str  # "pickle" (with stacks) or "json"
    verbose: bool
    stacks: bool = True  # write the stacks sidecar next to every dump
    registry: Path | None = None  # recorder-<pid>.json, removed by disable()
    registration: reg.Registration | None = None  # the entry and collect's request socket
    stop_r: socket.socket | None = None  # closing stop_w ends the watcher thread
    stop_w: socket.socket | None = None
    env_set: dict[str, str | None] = field(default_factory=dict)  # name -> previous value
    signals: dict[int, Any] = field(default_factory=dict)  # signum -> previous handler
    wakeup_r: socket.socket | None = None
    wakeup_w: socket.socket | None = None
    previous_wakeup_fd: int = -1
    watcher: threading.Thread | None = None
    excepthook: _ExceptHook | None = None
    threading_excepthook: Callable[[threading.ExceptHookArgs], Any] | None = None
    written: list[Path] = field(default_factory=list)
    watch_stop: threading.Event = field(default_factory=threading.Event)  # ends the stall watch


_state: RecorderState | None = None
_lock = threading.Lock()


def state() -> RecorderState | None:
    """The current setup, or None before ``enable()``."""
    return _state


def enable(
    dump_dir: str | os.PathLike[str],
    *,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    timing: bool = False,
    signals: Iterable[int] = (signal.SIGUSR1,),
    on_exception: bool = True,
    fmt: str = "pickle",
    override_env: bool = False,
    verbose: bool = True,
    stacks: bool = True,
    watch: float | None = None,
    on_hang: watching.OnHang | None = None,
    confirm: float | None = None,
    on_term: bool = True,
) -> RecorderState | None:
    """Turn recording on and install the dump triggers; call it before ``init_process_group``.
    None, with one line on stderr and nothing set up (the job runs on, unrecorded), when
    ``dump_dir`` is not the user's own or group or others can write it (:func:`dump_folder`).

    Environment variables already set by the user win unless ``override_env``. ``signals``
    are the signals that make this rank dump (empty: none); they must be installable, so call
    this from the main thread. ``fmt="pickle"`` keeps Python stacks; ``"json"`` has none.
    ``stacks``: write ``stacks_rank_<rank>.json`` (every thread's stack) next to each dump.
    ``watch`` (else ``$FRTRACE_WATCH``), ``on_hang``: the stall watch, :mod:`frtrace.job.watch`;
    ``confirm`` (else ``$FRTRACE_WATCH_CONFIRM``, else half of ``watch``): the seconds between
    its first look at a stall and the second that raises the alarm (0: at the first).
    ``on_term``: every thread's stack written when SIGTERM stops the rank (``termstack``).
    """
    global _state
    if fmt not in ("pickle", "json"):
        raise ValueError(f"fmt must be 'pickle' or 'json', not {fmt!r}")
    watch_s = watching.resolve(watch)
    confirm_s = watching.resolve_confirm(confirm, watch_s)
    directory = dump_folder(dump_dir)
    if directory is None:
        return None  # (an earlier setup, if any, stays as it was)
    if _state is not None:
        disable()
    st = RecorderState(dump_dir=directory, fmt=fmt, verbose=verbose, stacks=stacks)
    # (only the names this torch reads: on 2.8+ an old name makes it warn "deprecated")
    wanted = job_environment(
        directory, buffer_size=buffer_size, timing=timing, torch_version=installed_torch()
    )
    for name, value in wanted.items():
        theirs = name in os.environ or RENAMED.get(name, "") in os.environ
        if override_env or not theirs:
            st.env_set[name] = os.environ.get(name)
            os.environ[name] = value
    _warn_if_late()
    sigs = list(signals)
    if sigs:
        _install_signals(st, sigs)
    if on_term:
        termstack.arm(directory, _rank())
    setup = (watch_s, confirm_s)
    _state = _attach(st, sigs, on_exception=on_exception, watch=setup, on_hang=on_hang)
    return st


def attach(dump_dir: str | os.PathLike[str], watch_s: float) -> RecorderState | None:
    """``enable()`` for a job already running, from any thread, when nothing enabled the
    recorder yet (None when something did: that setup wins): no environment set (the job's
    own was read when its groups were made), no signal handler (only the main thread can
    install one; ``frtrace collect`` asks through the registry instead), a dump on an
    unhandled exception, the stall watch, and the stacks on SIGTERM.
    :mod:`frtrace.job.autowatch` calls it. None too, with one line on stderr, when
    ``dump_dir`` is refused (:func:`dump_folder`)."""
    global _state
    with _lock:
        if _state is not None:
            return None
        directory = dump_folder(dump_dir)
        if directory is None:
            return None
        st = RecorderState(dump_dir=directory, fmt="pickle", verbose=True)
        watch = (watch_s, watching.resolve_confirm(None, watch_s))  # ($FRTRACE_WATCH_CONFIRM)
        _state = _attach(st, [], on_exception=True, watch=watch, on_hang=None)
        termstack.arm(directory, _rank())  # (faulthandler's, from C: any thread may arm it)
    return st


def dump_folder(dump_dir: str | os.PathLike[str], *, who: str = "frtrace.recorder") -> Path | None:
    """``dump_dir`` resolved, once it is known to be the user's own folder that group and others
    cannot write (made 0700, with its missing parents, when missing; a link there followed only
    when it is the user's or root's: ``frtrace.base.files.own_folder``). None, with one line on
    stderr naming it and what to do, when it is not: another user could read every dump and
    replace the report (or, in a shared sticky folder, block it). OSError when it cannot be
    made. Anything that writes into a dump folder asks this first (``who``: the line's
    prefix)."""
    try:
        return own_folder(Path(dump_dir))
    except UnsafePathError as exc:
        _say(f"{who}: {exc}; not recording there, no watch")
        return None


def _say(line: str) -> None:
    """One line on stderr; an unwritable stderr (a full disk, a closed pipe, none) costs the
    line, never the job."""
    err = sys.stderr
    if err is not None:  # (print(file=None) would write to stdout)
        with contextlib.suppress(Exception):
            print(line, file=err, flush=True)


def _attach(
    st: RecorderState,
    sigs: list[int],
    *,
    on_exception: bool,
    watch: tuple[float | None, float],
    on_hang: watching.OnHang | None,
) -> RecorderState:
    """The triggers every setup has: the exception hooks, the registry entry and its helper
    thread, the stall watch (``watch``: its threshold, None for none, and confirmation)."""
    if on_exception:
        _install_excepthooks(st)
    _register(st, sigs)
    _start_watcher(st, sigs)
    watch_s, confirm_s = watch
    watching.start(
        st.dump_dir, watch_s, on_hang, confirm_s=confirm_s, stop=st.watch_stop, dump=_dump_on_stall
    )
    return st


def _register(st: RecorderState, sigs: list[int]) -> None:
    """Say where this process dumps and listen for ``frtrace collect``'s requests; a failure
    (one warning when the directory is not safe) costs only that, never the job."""
    st.registration = reg.register(
        {
            "dump_dir": str(st.dump_dir),
            "fmt": st.fmt,
            "stacks": st.stacks,
            "signals": sorted(int(s) for s in sigs),
            ANSWERS_APART: True,  # collect's answer has a name of its own
        }
    )
    st.registry = st.registration.entry if st.registration is not None else None


def disable() -> None:
    """Undo ``enable()``: restore signal handlers, hooks and the environment."""
    global _state
    st = _state
    if st is None:
        return
    _state = None
    st.watch_stop.set()
    termstack.disarm()
    for signum, previous in st.signals.items():
        signal.signal(signum, previous)
    if st.wakeup_w is not None:
        signal.set_wakeup_fd(st.previous_wakeup_fd)
    if st.stop_w is not None:
        st.stop_w.close()  # wakes the watcher, which then exits
    if st.watcher is not None:
        st.watcher.join(timeout=2)
    for sock in (st.wakeup_r, st.wakeup_w, st.stop_r):
        if sock is not None:
            sock.close()
    if st.excepthook is not None:
        sys.excepthook = st.excepthook
    if st.threading_excepthook is not None:
        threading.excepthook = st.threading_excepthook
    if st.registration is not None:
        st.registration.close()
    for name, previous in st.env_set.items():
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _warn_if_late() -> None:
    dist = sys.modules.get("torch.distributed")
    is_initialized = getattr(dist, "is_initialized", None)
    if callable(is_initialized) and is_initialized():
        warnings.warn(
            "frtrace.recorder.enable() was called after init_process_group: the ring buffer "
            "size was already read; call it before, so the settings apply",
            RuntimeWarning,
            stacklevel=3,
        )


def _rank() -> int | None:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return None


def dump_path(rank: int | None = None) -> Path:
    """Where this rank's dump goes: ``<dump_dir>/comm_lib_trace_rank_<rank>``."""
    st = _state
    if st is None:
        raise RuntimeError("frtrace.recorder.enable() has not been called")
    r = _rank() if rank is None else rank
    name = f"{DUMP_PREFIX}{r}" if r is not None else f"{DUMP_PREFIX}unknown_pid{os.getpid()}"
    return st.dump_dir / (name + (".json" if st.fmt == "json" else ""))


def dump(
    reason: str = "on demand",
    *,
    rank: int | None = None,
    trigger: TriggerKind = "on_demand",
    detail: str | None = None,
    frame: FrameType | None = None,
) -> Path:
    """Write this rank's dump now (atomically: a reader never sees half a file), and the
    stacks sidecar ``stacks_rank_<rank>.json`` next to it (``trigger``/``detail``: why;
    ``frame``: where the calling thread's stack starts, e.g. a signal handler's frame)."""
    path = dump_path(rank)
    return _write((path, _sidecar_path(path)), reason, rank, (trigger, detail, frame))[0]


def _write(paths: tuple[Path, Path], reason: str, rank: int | None, why: _Why) -> _Written:
    """The dump written to ``paths[0]``, its stacks sidecar to ``paths[1]`` (None: not)."""
    path, side = paths
    st = _state
    assert st is not None  # dump_path raised otherwise
    wrote = None
    with _lock:
        # The stacks first: they show the moment of the request, before the dump's own work.
        stacks = _capture(st, rank, why)
        data = _trace_bytes(st.fmt)
        replace_file(path, data)  # 0600: stacks, paths, hosts are the user's alone
        st.written.append(path)
        if stacks is not None:
            try:
                write_stacks(side, stacks)
                st.written.append(wrote := side)
            except OSError as exc:
                print(f"frtrace.recorder: could not write {side}: {exc}", file=sys.stderr)
    if st.verbose:
        print(f"frtrace.recorder: wrote {path} ({reason})", file=sys.stderr, flush=True)
    return path, wrote


def _capture(st: RecorderState, rank: int | None, why: _Why) -> dict[str, Any] | None:
    if not st.stacks:
        return None
    trigger, detail, frame = why
    try:
        return capture_current_stacks(
            trigger, detail, rank=_rank() if rank is None else rank, frame=frame
        )
    except Exception as exc:  # the stacks are a bonus: never lose the dump for them
        print(f"frtrace.recorder: could not capture stacks: {exc}", file=sys.stderr, flush=True)
        return None


def _safe_dump(
    reason: str,
    trigger: TriggerKind = "on_demand",
    detail: str | None = None,
    frame: FrameType | None = None,
) -> None:
    try:
        dump(reason, trigger=trigger, detail=detail, frame=frame)
    except Exception as exc:  # a failed dump must never change how the job fails
        print(f"frtrace.recorder: could not dump ({reason}): {exc}", file=sys.stderr, flush=True)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _safe_dump(f"signal {name}", "signal", name, frame)


def _install_signals(st: RecorderState, sigs: list[int]) -> None:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("frtrace.recorder.enable(signals=...) must run in the main thread")
    st.signals, st.wakeup_r, st.wakeup_w, st.previous_wakeup_fd = triggers.install_signals(
        sigs, _on_signal
    )


def _start_watcher(st: RecorderState, sigs: list[int]) -> None:
    listener = st.registration.listener if st.registration is not None else None
    helper = triggers.start_helper(st.wakeup_r, listener, sigs, _on_signal, _dump_on_request)
    if helper is not None:
        st.stop_r, st.stop_w, st.watcher = helper


def _dump_on_request() -> _Written:
    """``frtrace collect`` asked: the dump and the sidecar written (None: no sidecar), each
    under its answer's name (:mod:`frtrace.job.answers`), never over the rank's own dump."""
    own = dump_path()
    path, side = (p.with_name(answer_name(p.name)) for p in (own, _sidecar_path(own)))
    why: _Why = ("on_demand", "frtrace collect", None)
    return _write((path, side), "frtrace collect request", None, why)


def _sidecar_path(path: Path) -> Path:
    side = path.with_name(STACKS_PREFIX + path.name.removeprefix(DUMP_PREFIX))
    return side.with_name(side.name.removesuffix(".json") + ".json")


def _install_excepthooks(st: RecorderState) -> None:
    st.excepthook, st.threading_excepthook = install_excepthooks(
        lambda reason, detail, frame: _safe_dump(reason, "exception", detail, frame),
        MAX_DETAIL_CHARS,
    )


def _dump_on_stall(reason: str, detail: str) -> Path | None:
    """The stall watch's dump: this rank's buffer and stacks sidecar."""
    return dump(reason, trigger="on_demand", detail=detail)
