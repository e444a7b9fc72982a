"""The environment that makes a job record and dump what frtrace needs, per torch version.

``frtrace env`` prints it; ``frtrace.recorder.enable()`` sets it. One list, so the two never
disagree. Facts from ``shared/FORMAT.md`` ("Environment variables", "Where files go"): a torch
version ignores the variables it does not know, but torch 2.8+ warns "Environment variable
TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead" for an old name
it still reads: the recipe for a known version (``--torch``, else the torch installed here)
holds only the names that version reads; the full list only where no version is known.

The default dump folder is the user's own, ``/tmp/frtrace_dumps-<uid>`` (made 0700): one
folder for every user would be whoever made it first's, who would then read every dump and
replace the report (``frtrace.base.files.own_folder`` refuses such a folder job-side).
``/tmp``, not ``$TMPDIR`` (a batch job's own, removed when it ends) nor ``$XDG_RUNTIME_DIR``
(a small tmpfs, emptied at logout): the dumps are read after the job.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import PurePath

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_DUMP_DIR",
    "DUMP_PREFIX",
    "RENAMED",
    "STACKS_PREFIX",
    "TERM_STACKS_PREFIX",
    "WATCH_SINCE",
    "Setting",
    "default_dump_dir",
    "installed_torch",
    "job_environment",
    "parse_version",
    "recipe",
    "render_env",
]

# 20000 entries keep hundreds of steps of a large job's collectives (a few MB per rank);
# torch 2.11+ defaults to 2000, which wraps within a few steps of a job with many groups.
DEFAULT_BUFFER_SIZE = 20000


def default_dump_dir(uid: int | None = None) -> str:
    """This user's default dump folder (``uid``'s: another user's), ``/tmp/frtrace_dumps-<uid>``."""
    uid = uid if uid is not None else os.geteuid() if hasattr(os, "geteuid") else None
    return "/tmp/frtrace_dumps" + ("" if uid is None else f"-{uid}")


# The names torch 2.8 gave two settings, and the older names it still reads after them: a job
# that set the older one keeps its value (frtrace.recorder sets neither then).
RENAMED = {
    "TORCH_FR_BUFFER_SIZE": "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
}
DEFAULT_DUMP_DIR = default_dump_dir()  # (per user: see the module's docstring)
DUMP_PREFIX = "comm_lib_trace_rank_"  # torch 2.9+'s own file name; the rank is appended
STACKS_PREFIX = "stacks_rank_"  # the recorder's sidecar: stacks_rank_<rank>.json
# every thread's stack when SIGTERM stopped the rank: traceback_rank_<rank>.txt (termstack)
TERM_STACKS_PREFIX = "traceback_rank_"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One environment variable: its value, the torch versions that read it, and why."""

    name: str
    value: str
    since: tuple[int, int]  # first torch version that reads it
    why: str  # one line
    until: tuple[int, int] | None = None  # last one that needs it; None: still read
    optional: bool = False  # printed commented out, an informed choice


def parse_version(text: str) -> tuple[int, int]:
    """``"2.4.1+cu121"`` -> (2, 4); raises ValueError."""
    parts = text.strip().split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ValueError(f"{text!r} is not a torch version like 2.4") from None


def installed_torch() -> tuple[int, int] | None:
    """The version of the torch installed in this environment, from its metadata (torch is
    not imported: seconds); None where there is none or it says no version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return parse_version(version("torch"))
    except (PackageNotFoundError, ValueError):
        return None


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def recipe(dump_dir: str | PurePath, *, buffer_size: int = DEFAULT_BUFFER_SIZE) -> list[Setting]:
    """Every setting, oldest variable first within each purpose."""
    prefix = f"{PurePath(dump_dir) / DUMP_PREFIX}"
    size = str(buffer_size)
    return [*_recording(size), *_dumping(prefix, dump_dir)]


def _recording(size: str) -> list[Setting]:
    """What makes every rank record: the buffer, under each name torch reads."""
    return [
        Setting(
            name="TORCH_NCCL_TRACE_BUFFER_SIZE",
            value=size,
            since=(2, 2),
            why="entries each process keeps; 0 (recording off) is the default up to torch 2.10",
            until=(2, 7),  # 2.8+ reads it too, but warns that it is deprecated
        ),
        Setting(
            name="TORCH_FR_BUFFER_SIZE",
            value=size,
            since=(2, 8),
            why="entries each process keeps (was TORCH_NCCL_TRACE_BUFFER_SIZE); 0 is the default "
            "up to torch 2.10",
        ),
    ]


def _dumping(prefix: str, dump_dir: str | PurePath) -> list[Setting]:
    """When and where each rank dumps, what a dump holds, and what helps read it."""
    return [
        Setting(
            name="TORCH_NCCL_DUMP_ON_TIMEOUT",
            value="1",
            since=(2, 2),
            why="NCCL: every rank dumps when a collective times out (on by default in newer torch)",
        ),
        Setting(
            name="TORCH_FR_DUMP_ON_TIMEOUT",
            value="1",
            since=(2, 15),
            why="the same for hook-recorded backends; older Gloo never dumps: use frtrace.recorder",
        ),
        Setting(
            name="TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
            value=prefix,
            since=(2, 2),
            why="dump file prefix, the rank is appended: one file per rank in one directory",
            until=(2, 7),  # 2.8+ reads it too, but warns that it is deprecated
        ),
        Setting(
            name="TORCH_FR_DUMP_TEMP_FILE",
            value=prefix,
            since=(2, 8),
            why="dump file prefix, the rank is appended (was TORCH_NCCL_DEBUG_INFO_TEMP_FILE); "
            "without it dumps go to ~/.cache/torch",
        ),
        Setting(
            name="TORCH_INCLUDE_STACK_TRACE",
            value="1",
            since=(2, 13),
            why="Python stacks in automatic dumps: the report shows each side's call site",
        ),
        Setting(
            name="TORCH_INCLUDE_ONLY_ACTIVE",
            value="0",
            since=(2, 13),
            why="keep finished ops too: frtrace needs the history to see who fell behind",
        ),
        Setting(
            name="TORCH_NCCL_ASYNC_ERROR_HANDLING",
            value="3",
            since=(2, 2),
            why="3 skips cleanup: mode 1 aborts the work before it is dumped (pytorch#121055)",
        ),
        Setting(
            name="TORCH_NCCL_ENABLE_TIMING",
            value="1",
            since=(2, 2),
            why="start times and durations: tells a GPU that never started an op, confirms "
            "stragglers; costs CUDA events per op",
            optional=True,
        ),
        Setting(
            name="TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
            value=f"{PurePath(dump_dir) / 'pipe_rank_'}",
            since=(2, 2),
            why="NCCL: `echo 1 > <prefix><rank>.pipe` dumps that rank while the job runs",
            optional=True,
        ),
    ]


def _applies(s: Setting, version: tuple[int, int] | None) -> bool:
    if version is None:
        return True
    return s.since <= version and (s.until is None or version <= s.until)


def job_environment(
    dump_dir: str | PurePath,
    *,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    timing: bool = False,
    torch_version: tuple[int, int] | None = None,
) -> dict[str, str]:
    """The variables to set in a job (optional ones only when asked for: ``timing``)."""
    out: dict[str, str] = {}
    for s in recipe(dump_dir, buffer_size=buffer_size):
        if not _applies(s, torch_version):
            continue
        if s.optional and not (timing and s.name == "TORCH_NCCL_ENABLE_TIMING"):
            continue
        out[s.name] = s.value
    return out


WATCH_SINCE = (2, 5)  # torch calls the backends' entry points as it is imported: autowatch


def _watch(seconds: int) -> Setting:
    return Setting(
        name="FRTRACE_WATCH",
        value=str(seconds),
        since=WATCH_SINCE,
        why=f"frtrace's own: an op pending {seconds} s is a stall: every rank dumps and "
        "DIR/frtrace-report.html is written (frtrace installed in the job's environment)",
    )


def _watch_confirm(seconds: int) -> Setting:
    return Setting(
        name="FRTRACE_WATCH_CONFIRM",
        value=f"{seconds / 2:g}",
        since=WATCH_SINCE,
        why="frtrace's own: the alarm only if a second look this many seconds after the first "
        "finds the same ops pending and the same stacks (default: half of FRTRACE_WATCH)",
        optional=True,
    )


def _which(version: tuple[int, int] | None, installed: bool) -> str:
    if version is None:
        return (
            "# no torch here and no --torch: every name, torch 2.2 to 2.15 (2.8+ warns that "
            "the old ones are deprecated)."
        )
    if installed:
        v = _v(version)
        return f"# for torch {v}, installed here: only the names it reads (--torch: another)."
    return f"# for torch {_v(version)}: only the names it reads."


def render_env(
    dump_dir: str | PurePath = DEFAULT_DUMP_DIR,
    *,
    torch_version: tuple[int, int] | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    fmt: str = "shell",
    watch: int | None = None,
    installed: bool = False,
) -> str:
    """The recipe as ``export`` lines (``fmt="shell"``) or ``KEY=VALUE`` lines (``"env"``).

    ``torch_version``: only the names that version reads (None: every name); ``installed``:
    it is the torch of this environment (said in the header). ``watch``: FRTRACE_WATCH's
    seconds, set (None: one comment line saying what ``--watch`` adds).
    """
    settings = [s for s in recipe(dump_dir, buffer_size=buffer_size) if _applies(s, torch_version)]
    if watch is not None:
        settings += [_watch(watch), _watch_confirm(watch)]
    quoted = shlex.quote(str(dump_dir))
    lines = [
        "# frtrace env: make every rank record collectives and dump them where frtrace reads them",
        _which(torch_version, installed),
        f'# use: eval "$(frtrace env --dir {quoted})"   then after a hang: '
        f"frtrace analyze -d {quoted}",
        "# the directory: writable by every rank (shared on multi-node jobs), by you alone (0700).",
        "# Gloo has no dump on timeout before torch 2.15: call frtrace.recorder.enable() in the "
        "script.",
    ]
    if fmt == "shell":
        lines += ["", f"mkdir -p -m 700 {quoted}"]
    for s in settings:
        since = f"torch {_v(s.since)}+" + (f" (until {_v(s.until)})" if s.until else "")
        lines.append("")
        lines.append(f"# {since}: {s.why}" + (" [optional]" if s.optional else ""))
        value = shlex.quote(s.value)
        assignment = f"export {s.name}={value}" if fmt == "shell" else f"{s.name}={s.value}"
        lines.append(("# " if s.optional else "") + assignment)
    if watch is None and (torch_version is None or torch_version >= WATCH_SINCE):
        lines += [
            "",
            f"# `frtrace env --dir {quoted} --watch 300` adds FRTRACE_WATCH=300: a stall of 300 s "
            "makes every rank dump and writes DIR/frtrace-report.html, with no code change",
        ]
    return "\n".join(lines) + "\n"
