"""Ask a rank's ``frtrace.recorder`` for a dump through its registry, never with a signal.

The registry (:mod:`frtrace.job.registry`) is read only from a directory of the rank's user
that nobody else can write, and its entry is believed only when it names this very process:
the same pid, the same start time (``/proc/<pid>/stat`` field 22; a process that reused the
pid of a dead recorder has another), the same ``RANK``. The request goes to the recorder's
socket, once ``SO_PEERCRED`` says the process serving it is the rank; the recorder answers
when the dump and its sidecar are written, and says where; both are copied like any file of
the rank's (``collect/safety.py``). Whenever one of these is not so, nothing is asked and the
table says why: collect sends no signal, so a SIGUSR1 handler the script installed after
``enable()`` (Lightning's SLURM requeue) is never run by it. The recorder writes its answer
beside the rank's own dump (its stall watch's, a signal's, an exception's), never over it
(:mod:`frtrace.job.answers`): the rank's files stay as they were, and collect copies the
answer under the rank's usual names. An older recorder, whose entry does not say so, answers
over its own dump: where that file already holds one, it is not asked, and that dump is taken
as it is (``collect/keep.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from frtrace.base.files import OutDir
from frtrace.collect.keep import answered, own_dump
from frtrace.collect.mechanisms import Outcome, copied
from frtrace.collect.procs import RankProcess
from frtrace.collect.safety import connect_to_process, copy_private
from frtrace.errors import UnsafePathError
from frtrace.job import registry as reg
from frtrace.job.answers import ANSWERS_APART
from frtrace.job.env import DUMP_PREFIX, STACKS_PREFIX

__all__ = ["recorder"]

_MAX_REPLY = 64 * 1024
_CONNECT_S = 5.0


def _no(detail: str, *, skipped: bool = False) -> Outcome:
    return Outcome(mechanism="recorder", kind="dump", ok=False, detail=detail, skipped=skipped)


def _read_entry(dir_fd: int, pid: int, uid: int) -> dict[str, Any]:
    name = reg.entry_name(pid)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise UnsafePathError(f"{name}: cannot read it ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            raise UnsafePathError(f"{name} is not a file of the rank's uid {uid}: not read")
        raw = fh.read(reg.MAX_ENTRY_BYTES + 1)
    try:
        doc = json.loads(raw[: reg.MAX_ENTRY_BYTES])
    except ValueError:
        raise UnsafePathError(f"{name} is not a registry entry: not read") from None
    if not isinstance(doc, dict):
        raise UnsafePathError(f"{name} is not a registry entry: not read")
    return doc


def _find_entry(proc: RankProcess) -> tuple[int, dict[str, Any]] | None:
    """(a descriptor of the checked registry directory, the entry), or None: no entry."""
    name = reg.entry_name(proc.pid)
    folders = reg.candidate_dirs(proc.uid, proc.env)
    if proc.uid == os.geteuid():  # FRTRACE_RUNTIME_DIR set in the script: this shell's, maybe
        folders = list(dict.fromkeys([*folders, reg.registry_dir()]))
    for folder in folders:
        try:
            os.lstat(folder / name)
        except OSError:
            continue
        try:
            dir_fd = reg.open_private_dir(folder, proc.uid, create=False)
        except reg.UnsafeDirectory as exc:
            raise UnsafePathError(
                f"{exc}: not trusted (whoever can write there names the dump); remove it, "
                "the recorder makes it again, 0700"
            ) from None
        try:
            return dir_fd, _read_entry(dir_fd, proc.pid, proc.uid)
        except BaseException:
            os.close(dir_fd)
            raise
    return None


def _not_this_process(doc: dict[str, Any], proc: RankProcess) -> str | None:
    version = doc.get("version")
    if doc.get("format") != reg.REGISTRY_FORMAT or not isinstance(version, int) or version < 2:
        return "written by an older frtrace.recorder (signals only, no start time)"
    if version != reg.REGISTRY_VERSION:
        return f"written by a newer frtrace.recorder (version {version})"
    if doc.get("pid") != proc.pid:
        return f"names pid {doc.get('pid')}"
    if proc.start_time is None:
        return "names a process that is gone"
    if doc.get("start_time") != proc.start_time:
        return "left by an earlier process with this pid (its start time differs)"
    if doc.get("rank_env") != proc.env.get("RANK"):
        return f"is for RANK {doc.get('rank_env')}, the process has RANK {proc.env.get('RANK')}"
    return None


def _request(dir_fd: int, proc: RankProcess, timeout_s: float) -> dict[str, Any] | str:
    """The recorder's answer, or why there is none."""
    name = reg.socket_name(proc.pid)
    try:
        sock = connect_to_process(reg.at(dir_fd, name), proc.pid, min(_CONNECT_S, timeout_s))
    except UnsafePathError as exc:
        return f"{exc}: not asked"
    except OSError as exc:
        return f"no answer on {name} ({exc.strerror or exc}): recorder gone or busy?"
    reply = b""
    with sock:
        sock.settimeout(timeout_s)
        try:
            sock.sendall(reg.REQUEST)
            while not reply.endswith(b"\n") and len(reply) <= _MAX_REPLY:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:
            return f"asked, no answer within {timeout_s:g} s"
        except OSError as exc:
            return f"asked, then {exc.strerror or exc}"
    try:
        doc = json.loads(reply[:_MAX_REPLY])
    except ValueError:
        return "asked, the answer is not the recorder's"
    if not isinstance(doc, dict):
        return "asked, the answer is not the recorder's"
    if doc.get("ok") is not True or not isinstance(doc.get("dump"), str):
        return f"asked; it could not dump: {str(doc.get('error'))[:120]}"
    return doc


def _its_own(doc: dict[str, Any], proc: RankProcess, out_dir: OutDir) -> Outcome | None:
    """An older recorder's (it answers over its own dump): the dump the rank wrote by itself
    where it would answer (its registry entry's ``dump_dir``), copied as it is with its
    sidecar; None: ask (the recorder answers apart, or there is none)."""
    folder = doc.get("dump_dir")
    if doc.get(ANSWERS_APART) is True or not isinstance(folder, str) or not folder:
        return None
    name = f"{DUMP_PREFIX}{proc.rank}" + (".json" if doc.get("fmt") == "json" else "")
    side = Path(folder) / f"{STACKS_PREFIX}{proc.rank}.json"
    kept = own_dump(Path(folder) / name, proc, side)
    return None if kept is None else copied("recorder", kept, proc, out_dir, name)


def recorder(proc: RankProcess, out_dir: OutDir, timeout_s: float) -> Outcome:
    """Ask ``frtrace.recorder`` in the process for a dump; fetch dump and sidecar."""
    try:
        found = _find_entry(proc)
    except UnsafePathError as exc:
        return _no(str(exc))
    except OSError as exc:
        return _no(f"registry: {exc.strerror or exc}")
    if found is None:
        return _no("frtrace.recorder not enabled in it", skipped=True)
    dir_fd, doc = found
    try:
        why = _not_this_process(doc, proc)
        if why is not None:
            return _no(f"{reg.entry_name(proc.pid)} {why}: not asked (no signal sent)")
        kept = _its_own(doc, proc, out_dir)
        if kept is not None:
            return kept
        reply = _request(dir_fd, proc, timeout_s)
    finally:
        os.close(dir_fd)
    if isinstance(reply, str):
        return _no(reply)
    dump = Path(reply["dump"])
    answered(dump)
    name = f"{DUMP_PREFIX}{proc.rank}" + (".json" if dump.name.endswith(".json") else "")
    try:
        paths = [copy_private(dump, proc.uid, out_dir, name)]
    except UnsafePathError as exc:
        return _no(f"{exc}: not copied")
    except OSError as exc:
        return _no(f"{dump.name}: {exc.strerror or exc}")
    side = reply.get("stacks")
    if isinstance(side, str):
        # the dump is what counts; py-spy may still give the stack
        with contextlib.suppress(UnsafePathError, OSError):
            side_name = f"{STACKS_PREFIX}{proc.rank}.json"
            paths.append(copy_private(Path(side), proc.uid, out_dir, side_name))
    return Outcome(
        mechanism="recorder",
        kind="dump",
        ok=True,
        detail="request" + (" (+ stacks sidecar)" if len(paths) > 1 else ""),
        paths=tuple(str(p) for p in paths),
    )
