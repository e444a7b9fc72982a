"""Failures in a job's text logs: per-rank files, ``--tee`` and ``srun -l`` output.

A line's rank comes from its prefix where it has one (``[rank3]:`` from c10d,
``[default3]:`` from torchrun ``--tee``, ``3: `` from ``srun -l`` when most lines of the file
start so), else from the file (torchrun ``--log-dir``'s ``attempt_0/<rank>/stderr.log``).
Each rank's lines are read as a stream: a Python traceback becomes one failure (its
exception line, the innermost frame of the job's own code); an error line that names a known
failure (a watchdog timeout, Gloo's size check, ``terminate called``...) becomes one; so do
the failures in torchelastic's ``ChildFailedError`` summary (``rank : 3 (local_rank: 3)``,
its time, exit code and traceback). Times: glog's ``[E1125 10:00:00.123456 ...]`` (the year is
taken from ``year``), Python logging's ``2026-11-25 10:00:00,123``, torchelastic's
``2026-11-25_10:00:00``, all read as this machine's local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from frtrace.evidence.launchers import LineRanks, inside
from frtrace.evidence.messages import classify, exception_line, short
from frtrace.evidence.model import Failure, FailureKind, Role
from frtrace.evidence.retries import RetryWatch
from frtrace.incident.budget import LOG_SECONDS, MAX_LINE_CHARS, Deadline, number, rank_number

__all__ = ["TEE", "frames_of", "parse_log", "user_frame"]

_TEE = re.compile(r"^\[(?P<who>[A-Za-z_]+?)(?P<n>\d{1,7})\]:\s?")
TEE = _TEE  # (the launchers' conventions read a file's local ranks with it)
_SRUN = re.compile(r"^\s{0,6}(?P<n>\d{1,7}): ")
_GLOG = re.compile(r"\[?[IWEF](?P<mo>\d\d)(?P<d>\d\d) (?P<t>\d\d:\d\d:\d\d)(?:\.(?P<f>\d{1,9}))?")
_ISO = re.compile(r"(?P<date>\d{4}-\d\d-\d\d)[ T_](?P<t>\d\d:\d\d:\d\d)(?:[,.](?P<f>\d{1,9}))?")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d{1,9}), in (?P<fn>.+)$')
_ERRORISH = re.compile(
    r"\b(?:error|fatal|failed|failure|exception|terminate|watchdog|abort|signal|segmentation|"
    r"killed|timed out|timeout|closed|reset|skip(?:ping|ped|s)?|leav(?:e|es|ing))\b|"
    r"^\[?[EF]\d{4} ",
    re.IGNORECASE,
)
_CHILD_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_CHILD_FIELD = re.compile(r"^\s*(time|host|exitcode|error_file|traceback)\s*:\s?(.*)$")
_AGENT_EXIT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d{1,10}\)")
_C10D_RANK = re.compile(r"^\[rank(\d+)\]:\s?")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/torch/")


@dataclass(slots=True)
class _Stream:
    """One rank's lines in one file, read in order."""

    rank: int | None
    traceback: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, fn)
    in_traceback: bool = False
    last_at_ns: int | None = None
    retries: RetryWatch = field(default_factory=RetryWatch)


def _time_of(line: str, year: int | None) -> int | None:
    if m := _ISO.search(line):
        return _ns(f"{m['date']} {m['t']}", m["f"])
    if year is not None and (m := _GLOG.match(line.lstrip("[")) or _GLOG.search(line[:40])):
        return _ns(f"{year}-{m['mo']}-{m['d']} {m['t']}", m["f"])
    return None


def _ns(stamp: str, frac: str | None) -> int | None:
    try:
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return int(at.timestamp()) * 1_000_000_000 + int(((frac or "0") + "000000000")[:9])


def frames_of(lines: list[str]) -> list[tuple[str, int, str]]:
    """The (file, line, function) of each ``File "...", line N, in f`` line."""
    return [(f["file"], int(f["line"]), f["fn"].strip()) for ln in lines if (f := _FRAME.match(ln))]


def user_frame(frames: list[tuple[str, int, str]]) -> str | None:
    """The innermost frame that is the job's code: ``forward (model.py:42)``."""
    for file, line, fn in reversed(frames):  # a traceback lists the innermost last
        if not any(part in file for part in _LIBRARY):
            return f"{fn} ({file.rsplit('/', 1)[-1]}:{line})"
    return None


def _prefix_style(lines: list[str]) -> str:
    sample = [ln for ln in lines[:400] if ln.strip()]
    if not sample:
        return "none"
    tee = sum(1 for ln in sample if _TEE.match(ln))
    srun = sum(1 for ln in sample if _SRUN.match(ln))
    if tee * 2 >= len(sample):
        return "tee"
    if srun * 2 >= len(sample):
        return "srun"
    return "none"


def parse_log(
    text: str,
    source: str,
    *,
    rank: int | None,
    year: int | None,
    ranks: LineRanks | None = None,
    deadline: Deadline | None = None,
    outside: set[str] | None = None,
) -> list[Failure]:
    """Every failure the log's lines report; ``rank``: the file's own rank, if it has one;
    ``ranks``: which prefixes name which of the job's ranks (``frtrace.evidence.launchers``).
    Lines are read until ``deadline`` (``LOG_SECONDS`` by default) expires; each line's first
    ``MAX_LINE_CHARS``; a line naming a rank outside the job: ``outside`` (see ``_who``)."""
    deadline = Deadline(LOG_SECONDS) if deadline is None else deadline
    lines = text.splitlines()
    style = _prefix_style(lines)
    said = ranks if ranks is not None else LineRanks.of_file(lines, _TEE, None, {})
    streams: dict[int | None, _Stream] = {}
    out: list[Failure] = []
    child: dict[str, str] | None = None  # a ChildFailedError summary entry being read
    child_at = source
    for lineno, raw in enumerate(lines, start=1):
        if deadline.expired(lineno):
            break
        who, line = _who(raw[:MAX_LINE_CHARS].rstrip(), rank, said, style, outside)
        if line is None:  # a line of a rank outside the job
            continue
        where = f"{source}:{lineno}"
        # torchelastic's failure summary, one block per failed rank
        if (m := _CHILD_RANK.match(line)) is not None and child is not None:
            child["rank"] = m[1][:20]
            continue
        if child is not None and "traceback" in child:
            if line.startswith("  ") and not line.strip().startswith("="):
                child["traceback"] += "\n" + line[2:]
                continue
            out.extend(_child_failure(child, child_at, said.world, outside))
            child = None
        if (m := _CHILD_FIELD.match(line)) is not None and child is not None:
            child[m[1]] = m[2]
            child_at = where
            continue
        if re.match(r"^\s*\[\d+\]:\s*$", line):
            child = {}
            continue
        stream = streams.setdefault(who, _Stream(rank=who))
        at = _time_of(line, year)
        if at is not None:
            stream.last_at_ns = at
        if (m := _AGENT_EXIT.search(line)) is not None and (code := number(m[1])) is not None:
            kind, role = _exit_kind(code)
            # the agent's time is when it noticed, not when the rank died: unknown
            # (the agent's local rank: the job's where its file shows the whole job)
            local = rank_number(m[2])
            agent = None if local is None else said.tee(local)
            out.append(_failure(agent, kind, role, line, where, None, signal_of=code))
            continue
        if line.lstrip().startswith("Traceback (most recent call last)"):
            stream.in_traceback, stream.traceback = True, []
            continue
        if stream.in_traceback:
            out.extend(_in_traceback(stream, line, who, where, at))
            continue
        if "terminate called after throwing" in line and lineno < len(lines):
            nxt = lines[lineno][:MAX_LINE_CHARS].strip()
            if nxt.startswith("what():") or "what():" in nxt:
                line = f"{line} {nxt}"
        is_exception = exception_line(line) is not None
        errorish = is_exception or _ERRORISH.search(line) is not None
        stream.retries.see(line, where, at, errorish=errorish)
        if not errorish:
            continue
        found = classify(line, exception=is_exception)
        if found is not None:
            out.append(found.failure(rank=who, message=line, source=where, at_ns=at))
    if child is not None and "traceback" in child:
        out.extend(_child_failure(child, child_at, said.world, outside))
    out.extend(f for s in streams.values() if (f := s.retries.failure(s.rank)) is not None)
    return out


def _failure(
    rank: int | None,
    kind: FailureKind,
    role: Role,
    message: str,
    source: str,
    at: int | None,
    *,
    signal_of: int | None = None,
) -> Failure:
    sig = None
    if signal_of is not None and signal_of < 0:
        found = classify(f"Signal {-signal_of}")
        sig = found.signal if found else None
    return Failure(
        rank=rank,
        kind=kind,
        role=role,
        message=short(message),
        source=source,
        at_ns=at,
        signal=sig,
    )


def _who(
    line: str, rank: int | None, said: LineRanks, style: str, outside: set[str] | None = None
) -> tuple[int | None, str | None]:
    """The rank a line's prefix names (``rank``, the file's own, where none does), and the
    line without it: Ray's and Open MPI's prefixes, torchrun's --tee prefix (unmistakable
    wherever it is), srun's "3: " (only where most lines of the file carry one), c10d's.

    A prefix that names a rank outside the job (``[rank9]:``, ``9: ``, a ``[default9]:`` of
    the job's ranks; outside ``[0, MAX_WORLD_SIZE)``, and ``[0, world)`` where the job's size
    is known) names no rank. Given ``outside`` (as the analysis gives it), such a line is not
    used at all (None, not the line): its rank, as written, is added there for the caller to
    say so. (A failure of no rank would turn a healthy job into "cannot tell".)"""
    who = rank
    named: str | None = None  # a job's rank, as written, where a prefix says which
    tagged, tag, line = said.prefix(line)
    if tagged:
        who = tag
    if (m := _TEE.match(line)) is not None and m["who"] != "rank":  # ([rank3]: is c10d's)
        n = rank_number(m["n"])
        who, line = (None if n is None else said.tee(n)), line[m.end() :]
        named = m["n"] if said.local_is_global else None  # (a node's local rank: no job's)
    elif style == "srun" and (m := _SRUN.match(line)) is not None:
        who, line, named = inside(rank_number(m["n"]), said.world), line[m.end() :], m["n"]
    if (m := _C10D_RANK.match(line)) is not None:
        who, line, named = inside(rank_number(m[1]), said.world), line[m.end() :], m[1]
    if outside is not None and named is not None and who is None:
        outside.add(_shown(named))
        return None, None
    return who, line


def _in_traceback(
    stream: _Stream, line: str, who: int | None, where: str, at: int | None
) -> list[Failure]:
    """A line of a traceback being read: a frame kept, or the exception line that ends it
    (its failure, where it says one)."""
    if (f := _FRAME.match(line)) is not None:
        stream.traceback.append((f["file"], int(f["line"]), f["fn"].strip()))
        return []
    if line.startswith((" ", "\t")) or not line.strip():
        return []  # the source line under a frame, a caret line
    stream.in_traceback = False
    found = classify(line, exception=exception_line(line) is not None)
    if found is None:
        return []
    at_ns = at if at is not None else stream.last_at_ns
    return [
        found.failure(
            rank=who, message=line, source=where, at_ns=at_ns, where=user_frame(stream.traceback)
        )
    ]


def _child_failure(
    child: dict[str, str], where: str, world: int | None, outside: set[str] | None
) -> list[Failure]:
    """One entry of torchelastic's summary: its rank (global), time, exit code and message;
    given ``outside``, none where that rank is not one of the job's (it is added there)."""
    named = rank_number(child.get("rank"))
    rank = inside(named, world)
    if rank is None:
        if outside is not None and child.get("rank"):
            outside.add(_shown(child["rank"]))
        if named is None or outside is not None:
            return []
    # with no error file the summary's time is when torchelastic noticed the exit: unknown
    noticed = child.get("error_file", "").strip() in ("", "<N/A>")
    at = None if noticed else _time_of(child.get("time", ""), None)
    text = child.get("traceback", "").strip()
    lines = text.splitlines()
    frames = frames_of(lines)
    ends = [ln for ln in lines if exception_line(ln) is not None]
    message = ends[-1].strip() if ends else (lines[0].strip() if lines else "")
    code_text = child.get("exitcode", "")
    code = number(m[0]) if (m := re.match(r"-?\d+", code_text.strip())) else None
    found = classify(message, exception=bool(ends)) if message else None
    if found is not None and not message.startswith("To enable traceback"):
        return [
            found.failure(
                rank=rank, message=message, source=where, at_ns=at, where=user_frame(frames)
            )
        ]
    if code is None or code == 0:
        return []
    kind, role = _exit_kind(code)
    text = f"exit code {code}" + (f" ({message})" if message else "")
    return [_failure(rank, kind, role, text, where, at, signal_of=code)]


def _shown(rank: str) -> str:
    """A rank as a line wrote it, cut to 20 characters for a problem line."""
    return rank if len(rank) <= 20 else f"{rank[:17]}..."


# Signals another process sends to stop a rank (the launcher, a scheduler, a person)
_STOPPED_BY_OTHERS = frozenset({1, 2, 3, 10, 12, 13, 15})  # HUP INT QUIT USR1 USR2 PIPE TERM


def _exit_kind(code: int) -> tuple[FailureKind, Role]:
    """An exit code alone says the rank ended, not why (a symptom); a signal of its own
    making (segfault, abort, bus error, SIGKILL of the OOM killer) is a crash: a cause."""
    if code >= 0:
        return FailureKind.EXITED, Role.SYMPTOM
    if -code in _STOPPED_BY_OTHERS:
        return FailureKind.TERMINATED, Role.SYMPTOM
    return FailureKind.CRASH, Role.CAUSE
