"""Find a job's logs and error files beside its dumps, read them and the sidecars' triggers.

Taken by name, never by following a link (``lstat``: regular files only): ``*.log``, ``*.out``,
``*.err``, names that say stdout, stderr, log, slurm or torchrun, and torchelastic's
``error*.json``. Dumps and stack files are left to their readers. A log's rank is the number
ending its name (``rank_3.log``) or its folder (torchrun's ``attempt_0/3/stderr.log``), unless
its lines carry their own. Only the last ``MAX_LOG_BYTES`` of a log are read (a failure is
at its end). A file that cannot be read is one line in ``JobEvidence.problems``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from frtrace.evidence.errorfile import ErrorFileError, parse_error_file
from frtrace.evidence.logs import parse_log
from frtrace.evidence.messages import classify
from frtrace.evidence.model import Failure, FailureKind, JobEvidence, Role
from frtrace.pystack.discover import StackSet, is_stack_file_name
from frtrace.pystack.where import frame_label, where

__all__ = ["MAX_LOG_BYTES", "find_evidence_files", "load_evidence"]

MAX_LOG_BYTES = 16 * 1024 * 1024
_LOG_SUFFIXES = frozenset({".log", ".out", ".err"})
_LOG_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?:std(?:out|err)|logs?|slurm|torchrun|console|output)(?:[-_.\d]|$)"
)
_ERROR_FILE = re.compile(r"(?i)^(?:.*[-_])?error(?:[-_]?\d+)?\.json$")
_TRAILING = re.compile(r"(\d{1,7})$")
# Symptom failures that explain a crash on the same rank (the abort was done to it).
_EXPLAINS_CRASH = frozenset(
    {FailureKind.SIZE_CHECK, FailureKind.WATCHDOG_ABORT, FailureKind.TERMINATED}
)


def find_evidence_files(directory: Path) -> list[tuple[Path, str]]:
    """(path, "log" | "error_file") under ``directory``, in path order."""
    found: list[tuple[Path, str]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or not name.isprintable() or is_stack_file_name(name):
                continue
            path = Path(root) / name
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # a link, a pipe: never followed, never opened
            except OSError:
                continue
            if _ERROR_FILE.match(name):
                found.append((path, "error_file"))
            elif os.path.splitext(name)[1].lower() in _LOG_SUFFIXES or _LOG_NAME.search(name):
                found.append((path, "log"))
    return found


def _rank_of(path: Path, directory: Path) -> int | None:
    stem = path.name.split(".", 1)[0]
    if (m := _TRAILING.search(stem)) is not None and not _LOG_NAME.fullmatch(stem):
        return int(m[1])
    parent = path.parent
    if parent != directory and parent.name.isdigit() and len(parent.name) <= 7:
        return int(parent.name)  # torchrun --log-dir: attempt_0/<local rank>/stderr.log
    return None


def _read_tail(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_LOG_BYTES:
            fh.seek(size - MAX_LOG_BYTES)
        data = fh.read(MAX_LOG_BYTES)
    return data.decode("utf-8", errors="replace")


def _year(path: Path) -> int | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime).year
    except (OSError, OverflowError, ValueError):
        return None


def _from_stacks(stacks: StackSet | None) -> list[Failure]:
    """The recorder sidecars whose trigger was an exception: what the rank raised, and when."""
    out: list[Failure] = []
    for sample in () if stacks is None else stacks.samples:
        trigger = sample.trigger or ""
        if sample.source != "recorder" or not trigger.startswith("exception"):
            continue
        detail = trigger.partition(":")[2].strip()
        found = classify(detail or "Exception", exception=True)
        if found is None:
            continue
        user = where(sample).user_frame
        place = None if user is None else frame_label(user)
        out.append(
            found.failure(
                rank=sample.rank,
                message=detail or trigger,
                source=f"{os.path.basename(sample.path)} (trigger)",
                at_ns=sample.taken_at_ns,
                where=place,
            )
        )
    return out


def _settle(failures: Iterable[Failure]) -> tuple[Failure, ...]:
    """One failure per (rank, kind, message), the earliest known time kept; a crash whose
    rank also says why it was aborted (size check, watchdog, launcher) is a symptom; sorted
    by time, unknown times last."""
    seen: dict[tuple[int | None, FailureKind, str], Failure] = {}
    for f in failures:
        key = (f.rank, f.kind, f.message[:160])
        have = seen.get(key)
        if have is None or (f.at_ns is not None and (have.at_ns is None or f.at_ns < have.at_ns)):
            seen[key] = f if have is None or f.where else replace(f, where=have.where)
    explained = {f.rank for f in seen.values() if f.kind in _EXPLAINS_CRASH}
    settled = []
    for f in seen.values():
        if f.kind == FailureKind.CRASH and f.rank in explained:
            f = replace(f, role=Role.SYMPTOM)
        settled.append(f)
    return tuple(
        sorted(
            settled,
            key=lambda f: (
                f.at_ns is None,
                f.at_ns or 0,
                -1 if f.rank is None else f.rank,
                f.source,
            ),
        )
    )


def load_evidence(directory: Path, stacks: StackSet | None = None) -> JobEvidence:
    """Every failure the directory's logs, error files and recorder sidecars report."""
    failures = _from_stacks(stacks)
    files: list[str] = []
    problems: list[str] = []
    if directory.is_dir():
        for path, kind in find_evidence_files(directory):
            rel = str(path.relative_to(directory))
            try:
                text = _read_tail(path)
            except OSError as exc:
                problems.append(f"{rel}: cannot read ({exc.strerror or exc}); skipped")
                continue
            rank = _rank_of(path, directory)
            try:
                if kind == "error_file":
                    failures += parse_error_file(text, rel, rank=rank)
                else:
                    failures += parse_log(text, rel, rank=rank, year=_year(path))
            except ErrorFileError as exc:
                problems.append(f"{rel}: {exc}; skipped")
                continue
            files.append(rel)
    return JobEvidence(failures=_settle(failures), files=tuple(files), problems=tuple(problems))
