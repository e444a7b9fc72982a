"""A dump the job or its stall watch wrote is never overwritten by collect's request.

``frtrace.recorder`` answers collect under a name of its own beside the rank's own dump
(:mod:`frtrace.job.answers`): it is asked whatever its folder holds. Where torch picks the
name, asking makes the rank write the file it writes when it dumps by itself: NCCL's
``<prefix><rank>`` through its debug pipe, as on a timeout; so does an older recorder, whose
registry entry does not say it answers apart (its ``comm_lib_trace_rank_<rank>`` and stacks
sidecar, as on a signal, an exception, the stall watch or the script's own ``dump()``). Where
that file is already this process's own dump, collect does not ask (the answer would replace
it): it takes that dump as it is, copied like any file of the rank's, and says when it was
written and why; the rank's file stays as it was.

Asked over, as before: a file collect's own request made (the recorder's sidecar says
``frtrace collect``; an answer this collect command got, ``--twice``), and one of an earlier
process (its sidecar names another pid, or it was written before this process started: a run
before this one into the same folder, which this run's first dump replaces anyway). NCCL
writes no sidecar: its file written since the rank started is kept whoever wrote it, an
earlier ``frtrace collect`` command's answer included (``--twice`` asks twice).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frtrace.collect.procs import RankProcess, started_at_ns
from frtrace.collect.safety import open_owned
from frtrace.errors import UnsafePathError

__all__ = ["OwnDump", "answered", "own_dump"]

_MAX_SIDECAR = 16 * 1024 * 1024  # every thread's stack of a large process
_REQUEST_DETAIL = "frtrace collect"  # the recorder's sidecar of an answer to collect's request

Stamp = tuple[int, int, int, int]  # (device, inode, mtime ns, size): one version of a file
_answers: set[Stamp] = set()  # the answers this collect command got (every snapshot's)
_lock = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnDump:
    """A dump the rank's process wrote by itself, where collect's answer would go."""

    path: Path
    sidecar: Path | None  # its stacks sidecar, where it has one of this process
    written_ns: int  # when (the sidecar's time, else the file's)
    why: str  # what made it dump, in a few words

    def said(self) -> str:
        at = time.strftime("%H:%M:%S", time.localtime(self.written_ns / 1e9))
        return f"its own dump of {at} ({self.why}); not asked: the answer would overwrite it"


def _stamp(path: Path) -> tuple[Stamp, os.stat_result] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), st


def answered(path: Path | str) -> None:
    """The file at ``path`` is the answer to collect's request: asking again may replace it."""
    got = _stamp(Path(path))
    if got is not None:
        with _lock:
            _answers.add(got[0])


def _sidecar(path: Path, uid: int) -> dict[str, Any] | None:
    """The recorder's stacks sidecar (a file of the rank's uid, never through a link), None
    where there is none or it cannot be read."""
    try:
        fd = open_owned(path, uid)
    except (OSError, UnsafePathError):
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(_MAX_SIDECAR + 1)
    if len(raw) > _MAX_SIDECAR:
        return None
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        doc = json.loads(raw)
        return doc if isinstance(doc, dict) else None
    return None


def _why(trigger: Any) -> str:
    if not isinstance(trigger, dict):
        return "by itself"
    kind, detail = trigger.get("kind"), trigger.get("detail")
    said = str(detail)[:60] if isinstance(detail, str) and detail else None
    if kind == "signal":
        return f"on {said or 'a signal'}"
    if kind == "exception":
        return "on an exception" + (f": {said}" if said else "")
    return f"on demand: {said}" if said else "on demand (its script's dump())"


def own_dump(path: Path, proc: RankProcess, sidecar: Path | None = None) -> OwnDump | None:
    """The dump at ``path`` (the file collect's request would make the rank write), where it is
    the rank process's own and not an answer to collect; None: asking may replace it."""
    got = _stamp(path)
    if got is None or not stat.S_ISREG(got[1].st_mode):
        return None
    with _lock:
        if got[0] in _answers:
            return None
    started = started_at_ns(proc)
    side = None if sidecar is None else _sidecar(sidecar, proc.uid)
    if side is not None:
        at = side.get("dumped_at_ns")
        at = at if isinstance(at, int) and not isinstance(at, bool) else got[1].st_mtime_ns
        trigger = side.get("trigger")
        if side.get("pid") != proc.pid or (started is not None and at < started):
            return None  # an earlier process's (its sidecar's)
        if isinstance(trigger, dict) and trigger.get("detail") == _REQUEST_DETAIL:
            return None  # an answer to collect (this command's or an earlier one's)
        return OwnDump(path=path, sidecar=sidecar, written_ns=at, why=_why(trigger))
    if started is None or got[1].st_mtime_ns < started:
        return None  # written before this process started: an earlier run's
    why = "written since it started, no sidecar says by what"  # (NCCL's: a timeout, a request)
    return OwnDump(path=path, sidecar=None, written_ns=got[1].st_mtime_ns, why=why)
