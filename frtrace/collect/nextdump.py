"""Where ``collect`` got no rank's dump: the one line that makes the next ``collect`` get
every rank's dump from this job, for its backend and its torch.

``collect`` asks a rank for its dump through ``frtrace.recorder`` (any backend), the NCCL debug
pipe or torch's worker server. A job started with ``frtrace env`` alone (the README's step 1)
records, but offers none of them, and Gloo never dumps by itself before torch 2.15. The line:

* NCCL (a rank has a GPU open: ``procs.gpu_open``), torch 2.2+: the environment
  for the job's torch and the debug pipe, ``eval "$(frtrace env --dir DIR --torch X.Y)";
  export TORCH_NCCL_DEBUG_INFO_PIPE_FILE=DIR/pipe_rank_``, in the shell that starts the job;
* otherwise (Gloo, or a backend not known), torch 2.5+: ``eval "$(frtrace env --dir DIR
  --torch X.Y --watch 300)"``: ``FRTRACE_WATCH`` starts ``frtrace.recorder`` in every rank with
  no code change (torch's backend entry point; the job's Python able to import frtrace),
  and collect asks it; torch 2.2-2.4: ``frtrace.recorder.enable(DIR)`` in the script;
* torch before 2.2 has no Flight Recorder: no line.

The job's torch is read from a rank process (``__version__`` in the ``torch/version.py`` beside
the torch library it mapped, ``/proc/<pid>/maps``; a file of at most 64 KiB, never through a
link, of which only a version number is kept), else the torch installed here (the line then
leaves ``--torch`` to ``frtrace env``), else none is known (the watch's line, said to need 2.5+).
DIR is the job's dump folder (its ``TORCH_FR_DUMP_TEMP_FILE``), else its user's default.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from frtrace.collect.procs import PROC, RankProcess, gpu_open
from frtrace.job.env import WATCH_SINCE, default_dump_dir, installed_torch, parse_version, recipe

__all__ = ["WATCH_S", "NextTime", "next_time"]

WATCH_S = 300  # FRTRACE_WATCH in the line: the README's
_FIRST = (2, 2)  # the first torch with a Flight Recorder frtrace reads
_VERSION = re.compile(rb"^__version__\s*=\s*['\"]([0-9][^'\"]{0,39})['\"]", re.MULTILINE)
_MAX_VERSION_FILE = 64 * 1024
_IN_SHELL = "in the shell that starts the job (before torchrun or srun)"
_IMPORTS = "the job's Python able to import frtrace (pip install frtrace)"


@dataclass(frozen=True, slots=True, kw_only=True)
class NextTime:
    """What makes the next collect get dumps: the line as it runs, where it goes, what it is
    for (the backend and torch it was chosen by), and what else it needs."""

    line: str | None  # None: no line makes this torch dump
    where: str
    job: str  # "Gloo, torch 2.13 (the ranks' own)"
    needs: str | None = None


def _torch_of(pid: int) -> tuple[int, int] | None:
    """The torch version the process mapped, from its ``torch/version.py``."""
    try:
        maps = (PROC / str(pid) / "maps").read_text(errors="replace")
    except OSError:
        return None
    lib = next((line for line in maps.splitlines() if "/torch/lib/" in line), None)
    path = None if lib is None else lib[lib.find("/") :].split("/torch/lib/")[0]
    if not path:
        return None
    try:
        fd = os.open(f"{path}/torch/version.py", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        found = _VERSION.search(fh.read(_MAX_VERSION_FILE))
    try:
        return None if found is None else parse_version(found[1].decode("ascii", "replace"))
    except ValueError:
        return None


def _dump_dir(proc: RankProcess) -> str:
    """The job's dump folder: where its prefix points, else its user's default."""
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        prefix = proc.env.get(key)
        if prefix and "/" in prefix:
            return str(PurePath(prefix).parent)
    return default_dump_dir(proc.uid if proc.uid >= 0 else None)


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _env_line(folder: str, torch: str | None, watch: bool) -> str:
    args = ["frtrace", "env", "--dir", folder, *(["--torch", torch] if torch else [])]
    return f'eval "$({shlex.join([*args, *(["--watch", str(WATCH_S)] if watch else [])])})"'


def next_time(procs: Sequence[RankProcess], recorders: Sequence[bool] = ()) -> NextTime | None:
    """The line for this job (``procs``: its ranks here); None where there is no rank, or
    where a rank runs ``frtrace.recorder`` (``recorders``: per rank, one was found: the table
    says why it gave no dump, and no setting would change that)."""
    if not procs or any(recorders):
        return None
    mine = next((v for v in map(_torch_of, (p.pid for p in procs)) if v is not None), None)
    here = installed_torch() if mine is None else None
    version = mine or here
    gpu = any(gpu_open(p.pid) for p in procs)
    folder = _dump_dir(procs[0])
    whose = "the ranks' own" if mine else "installed here"
    said = "not known" if version is None else f"{_v(version)} ({whose})"
    job = f"{'NCCL (a GPU is open)' if gpu else 'Gloo (no GPU open)'}, torch {said}"
    torch = _v(mine) if mine else None
    if version is not None and version < _FIRST:
        return NextTime(line=None, where="", job=job, needs="torch 2.2+: it has no Flight Recorder")
    if gpu:
        pipe = next(s for s in recipe(folder) if s.name == "TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        line = f"{_env_line(folder, torch, False)}; export {pipe.name}={shlex.quote(pipe.value)}"
        return NextTime(line=line, where=_IN_SHELL, job=job)
    if version is None or version >= WATCH_SINCE:
        needs = _IMPORTS
        if "FRTRACE_WATCH" in procs[0].env:
            needs += ": FRTRACE_WATCH is set, and no rank runs it"
        if version is None:
            needs += "; torch 2.5+ (older: frtrace.recorder.enable(DIR) in the script)"
        return NextTime(line=_env_line(folder, torch, True), where=_IN_SHELL, job=job, needs=needs)
    line = f"import frtrace.recorder; frtrace.recorder.enable({folder!r})"
    where = "in the training script, before init_process_group"
    return NextTime(line=line, where=where, job=job, needs=_IMPORTS)
