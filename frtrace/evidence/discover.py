"""Read a job's logs and error files beside its dumps, and the sidecars' triggers.

Which files they are is the one discovery's (``frtrace.incident.layout``, the same for ``summary``
and
``analyze``, a folder's or an archive's): taken by name, never by following a
link (regular files only): ``*.log``, ``*.out``, ``*.err``, names that say stdout, stderr, log,
slurm or torchrun, and torchelastic's ``error*.json``. Dumps and stack files are left to their
readers. A log's rank is read from its name or folder only by a launcher's convention
(``frtrace.evidence.launchers``: torchrun's ``attempt_0/3/stderr.log``, ``rank_3.log``, SLURM
``%t`` files, pod names, Ray's pid table), unless its lines carry their own. Only the last
``MAX_LOG_BYTES`` of a log are read (a failure is at its end). A file that cannot be read is
one line in ``JobEvidence.problems``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from frtrace.evidence.agent import attempt_parts, chosen_part
from frtrace.evidence.errorfile import ErrorFileError, parse_error_file
from frtrace.evidence.injob import outside_line
from frtrace.evidence.launchers import LineRanks, file_ranks, ray_ranks, ray_worker_pid
from frtrace.evidence.logs import TEE, parse_log
from frtrace.evidence.messages import classify
from frtrace.evidence.model import Failure, FailureKind, JobEvidence, Role
from frtrace.evidence.ras import read_ras
from frtrace.incident.budget import LOG_SECONDS, Deadline
from frtrace.incident.layout import MAX_LOG_BYTES, SideFile, read_regular, side_files
from frtrace.pystack.discover import StackSet
from frtrace.pystack.where import frame_label, where

__all__ = ["MAX_LOG_BYTES", "find_evidence_files", "load_evidence"]

_READ_HERE = frozenset({"log", "error_file"})
_TRAILING = re.compile(r"(\d{1,7})$")
# Symptom failures that explain a crash on the same rank (the abort was done to it).
_EXPLAINS_CRASH = frozenset(
    {FailureKind.SIZE_CHECK, FailureKind.WATCHDOG_ABORT, FailureKind.TERMINATED}
)


def find_evidence_files(directory: Path) -> list[tuple[Path, str]]:
    """(path, "log" | "error_file") under ``directory``, in path order."""
    return [(f.path, f.kind) for f in side_files(directory) if f.kind in _READ_HERE]


def _read_tail(path: Path) -> str:
    data = read_regular(path, MAX_LOG_BYTES, follow=False, tail=True)
    return data.decode("utf-8", errors="replace")


def _text(file: SideFile) -> str:
    """The file's last ``MAX_LOG_BYTES``, decoded (an archive's member: its bytes read)."""
    if file.data is not None:
        return file.data[-MAX_LOG_BYTES:].decode("utf-8", errors="replace")
    return _read_tail(file.path)


def _ray_table(files: Sequence[SideFile]) -> tuple[dict[int, int], dict[str, str]]:
    """Where the folder is a Ray session's (a worker log named by its pid): pid -> rank from
    Ray's table of its workers in any log, and the logs' texts read for it (read once)."""
    if not any(ray_worker_pid(f.relative) is not None for f in files):
        return {}, {}
    texts: dict[str, str] = {}
    for f in files:
        if f.kind == "log" and f.refused is None:
            try:
                texts[f.relative] = _text(f)
            except OSError:
                continue  # (said when it is read again)
    return ray_ranks(texts.values()), texts


def _year(mtime: float | None) -> int | None:
    if mtime is None:
        return None
    try:
        return datetime.fromtimestamp(mtime).year
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


def _watchdog(f: Failure) -> bool:
    """NCCL's watchdog timed the rank out waiting in an op (``WorkNCCL(SeqNum=7, ...)``): it
    then takes the process down (SIGABRT), a waiter's end, not a fault of its own."""
    return f.kind == FailureKind.TIMEOUT and f.seq is not None and f.op is not None


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
    explained = {f.rank for f in seen.values() if f.kind in _EXPLAINS_CRASH or _watchdog(f)}
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


def _of_attempt(
    text: str, rel: str, attempt: int | None, newest: int | None
) -> tuple[list[str], str | None]:
    """The log's lines, those of other attempts than ``attempt`` (of a folder whose newest is
    ``newest``) blanked where the elastic agent's lines show restarts
    (``frtrace.evidence.agent``: the line numbers stay the file's), and a line saying what
    was set aside (None where nothing was)."""
    lines = text.splitlines()
    parts = attempt_parts(lines)
    if len(parts) == 1:
        return lines, None
    part = chosen_part(parts, attempt, newest)
    which = "the newest attempt" if attempt is None else f"attempt {attempt}"
    if part is None:
        return [], (
            f"{rel}: {len(parts)} attempts' lines (the elastic agent restarted the workers), "
            f"none of {which}: set aside, never evidence"
        )
    kept = [ln if part.first <= i < part.end else "" for i, ln in enumerate(lines)]
    span = f"lines {part.first + 1}-{part.end}" if part.end > part.first else "no line"
    return kept, (
        f"{rel}: the elastic agent restarted the workers {len(parts) - 1} time(s) in this log: "
        f"only {span} ({which}) read, the other attempts' lines set aside, never evidence"
    )


def load_evidence(
    directory: Path,
    stacks: StackSet | None = None,
    files: Sequence[SideFile] | None = None,
    world: int | None = None,
    *,
    attempt: int | None = None,
    newest: int | None = None,
    job_ns: int | None = None,
) -> JobEvidence:
    """Every failure the directory's logs, error files and recorder sidecars report:
    ``files``, the side files its discovery found (``Discovery.side_files``; the stack files
    among them are not read here), else the directory is listed. ``world``: the job's ranks,
    where known: a file or line names a rank only by a launcher's convention and inside the
    job (``frtrace.evidence.launchers``). ``attempt``: of a restarted job whose newest attempt
    is ``newest``, the one analysed (None: the newest): a log that spans several attempts is
    read for that one's lines only (``frtrace.evidence.agent``). ``job_ns``: when the job ran
    (its dumps' newest entry), whose year log times without one (glog's ``E1127 03:56:46``)
    are read in; else each log's file time says it (a checkout's or a copy's is new). NCCL
    RAS's answers beside them are read too (``JobEvidence.ras``)."""
    failures = _from_stacks(stacks)
    found: list[str] = []
    problems: list[str] = []
    every = side_files(directory) if files is None else files
    listed = [f for f in every if f.kind in _READ_HERE]
    ray, texts = _ray_table(listed)
    ranks = file_ranks([f.relative for f in listed], world, ray)
    for file in listed:
        rel = file.relative
        if file.refused is not None:
            problems.append(f"{rel}: {file.refused}; skipped")
            continue
        try:
            text = texts.pop(rel) if rel in texts else _text(file)
        except OSError as exc:
            problems.append(f"{rel}: cannot read ({exc.strerror or exc}); skipped")
            continue
        rank = ranks.get(rel)
        deadline = Deadline(LOG_SECONDS)
        outside: set[str] = set()  # ranks its lines name outside the job: those lines unused
        try:
            if file.kind == "error_file":
                failures += parse_error_file(text, rel, rank=rank)
            else:
                said = LineRanks.of_file(text.splitlines(), TEE, world, ray)
                lines, aside = _of_attempt(text, rel, attempt, newest)
                if aside is not None:
                    problems.append(aside)
                    text = "\n".join(lines)
                failures += parse_log(
                    text,
                    rel,
                    rank=rank,
                    year=_year(file.mtime if job_ns is None else job_ns / 1e9),
                    ranks=said,
                    deadline=deadline,
                    outside=outside,
                )
        except ErrorFileError as exc:
            problems.append(f"{rel}: {exc}; skipped")
            continue
        if outside:
            problems.append(outside_line(rel, outside, world))
        if deadline.stopped_at is not None:
            problems.append(
                f"{rel}: read for {LOG_SECONDS:.0f} s, up to line {deadline.stopped_at:,}; "
                "the lines after are not read (give the job's logs alone, or cut this one)"
            )
        found.append(rel)
    ras = read_ras(every)  # NCCL RAS's answers (frtrace.evidence.ras)
    return JobEvidence(
        failures=_settle(failures),
        files=tuple(found) + ras.files,
        problems=tuple(problems) + ras.problems,
        ras=ras or None,
    )
