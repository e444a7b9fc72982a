"""One incident out of the folder a real job leaves: copies, snapshots, restarts, reruns.

A job's dump folder is rarely one moment of one job. ``torchrun --max-restarts`` (a SLURM
requeue, an elastic agent) runs attempt 0, which hangs and is killed, then attempt 1: dumps go
to one fixed folder, so some ranks' files are attempt 1's and some are left over from attempt
0, and torchrun's ``--log-dir`` holds ``attempt_0/`` and ``attempt_1/``. A rerun into the same
folder leaves the previous run's ``rank_3`` where today's rank 3 wrote nothing. ``collect``
into the recorder's own folder leaves each dump twice. This module sorts those files before
anything is analysed, from what they carry, and says in one line each what it set aside
(``LoadProblem`` warnings, which ``analyze`` prints and ``summary`` lists):

* **Copies.** Files of one rank with the same bytes are one file (the first in path order is
  read): ``frtrace.recorder.enable(DIR)`` then ``frtrace collect DIR`` is one dump set.
* **Snapshots.** Dump sets of the same ranks whose ranks ran as the same processes (the pids
  that ``collect``'s manifests and the recorder's sidecars in their folders give agree, on the
  same hosts) are snapshots of one job: the newest (by the dump times they record; by its
  files' times only where a set records none: a checkout's or a copy's are new) is the
  incident, the others are said (``frtrace compare`` tells stuck from slow between two).
  Sets without that proof stay several jobs: refused with the ``--only`` that picks one.
* **Attempts in folders.** Files under an ``attempt_<N>`` folder (torchrun's ``--log-dir``,
  a launcher's requeue folders) belong to attempt N; the newest attempt is analysed and the
  other attempts' files are set aside, a line per attempt (``--attempt N`` picks one).
* **Stale ranks.** After loading, a rank whose dump is of an earlier attempt or run (by its
  entries' times against the others', and its file's) is a rank without a dump of this
  attempt: ``frtrace.load.lifetimes``.

Imports nothing of the analysis: it runs in stage 0 (``frtrace.incident``), before any dump is read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from frtrace.base.ranges import format_ranks
from frtrace.errors import NoSuchAttempt
from frtrace.incident.budget import MAX_DUMP_BYTES, MAX_WORLD_SIZE, read_listed
from frtrace.incident.layout import SideFile
from frtrace.incident.problems import LoadProblem

if TYPE_CHECKING:
    from frtrace.incident.listing import Candidate

__all__ = [
    "DumpRecord",
    "attempt_numbers",
    "attempt_of",
    "drop_copies",
    "drop_side_copies",
    "dump_records",
    "newest_snapshot",
    "side_files_of_attempt",
]

_ATTEMPT = re.compile(r"^attempt_(\d{1,6})$")
_HASH_CHUNK = 1 << 20
_MAX_SIDECAR_BYTES = 1 << 20  # a sidecar or manifest larger than this is not read for pids
# a folder of one rank's files (torchrun's <local_rank>/, rank_3/): its files are that rank's
_RANK_FOLDER = re.compile(r"(?:rank[_-]?)?\d{1,7}", re.IGNORECASE)
_MAX_SIDE_COPY_BYTES = 64 << 20  # (a stack sample's limit: larger ones are never copies)


def attempt_of(relative: str) -> int | None:
    """The attempt a file's folder says (``logs/run/attempt_1/3/stderr.log``: 1), else None;
    the deepest such folder counts."""
    found = None
    for part in PurePosixPath(relative).parts[:-1]:
        if (m := _ATTEMPT.match(part)) is not None:
            found = int(m[1])
    return found


def attempt_numbers(side_files: Iterable[SideFile]) -> tuple[int, ...]:
    """The attempts the side files' ``attempt_<N>`` folders number, ascending."""
    return tuple(sorted({n for f in side_files if (n := attempt_of(f.relative)) is not None}))


def side_files_of_attempt(
    side_files: Sequence[SideFile], attempt: int | None
) -> tuple[tuple[SideFile, ...], tuple[LoadProblem, ...], int | None]:
    """The side files of one attempt (``attempt``, else the newest in an ``attempt_<N>``
    folder), those in no such folder kept; a warning per attempt set aside; the attempt kept
    (None where no file is in such a folder)."""
    numbers = attempt_numbers(side_files)
    if not numbers:
        return tuple(side_files), (), None
    chosen = numbers[-1] if attempt is None else attempt
    if chosen not in numbers:
        raise NoSuchAttempt(
            f"--attempt {attempt}: the folder's attempt folders are "
            + ", ".join(f"attempt_{n}" for n in numbers)
            + f"; give one of {', '.join(map(str, numbers))} (or leave --attempt out for the "
            "newest)."
        )
    aside: dict[int, list[SideFile]] = defaultdict(list)
    kept: list[SideFile] = []
    for f in side_files:
        n = attempt_of(f.relative)
        (kept if n is None or n == chosen else aside[n]).append(f)
    problems = []
    for n, files in sorted(aside.items()):
        folders = sorted({_attempt_folder(f.relative) for f in files})
        where = folders[0] + ("/" if len(folders) == 1 else f"/ and {len(folders) - 1} more")
        newer = "an earlier" if n < chosen else "a later"
        problems.append(
            LoadProblem(
                rank=-1,
                path=folders[0],
                message=f"{where}: {len(files)} logs and error files of {newer} attempt "
                f"(attempt {n}; attempt {chosen} is analysed): set aside, never evidence "
                f"(--attempt {n} analyses it)",
                fatal=False,
            )
        )
    return tuple(kept), tuple(problems), chosen


def _attempt_folder(relative: str) -> str:
    parts = PurePosixPath(relative).parts[:-1]
    last = max(i for i, p in enumerate(parts) if _ATTEMPT.match(p))
    return "/".join(parts[: last + 1])


# --------------------------------------------------------------------------------------------
# Copies
# --------------------------------------------------------------------------------------------


def _digest(cand: Candidate) -> bytes | None:
    """The file's content hash (an archive member's from its bytes); None where it is not read
    (then it is never taken for a copy): refused, listed larger than a dump may be
    (``MAX_DUMP_BYTES``: never hashed, as it is never read), or not the regular file of the
    listed size that was listed (``read_listed``: a FIFO or a link swapped in, a file that
    changed), or unreadable."""
    h = hashlib.blake2b(digest_size=16)
    if cand.data is not None:
        h.update(cand.data)
        return h.digest()
    if cand.refused is not None or cand.size_bytes > MAX_DUMP_BYTES:
        return None
    try:
        for chunk in read_listed(cand.path, cand.size_bytes, MAX_DUMP_BYTES, chunk=_HASH_CHUNK):
            h.update(chunk)
    except OSError:
        return None
    return h.digest()


def drop_copies(
    candidates: Sequence[Candidate],
) -> tuple[list[Candidate], tuple[LoadProblem, ...], list[tuple[Candidate, Candidate]]]:
    """One file per set of byte-identical files of one rank (the first in path order kept);
    one warning per folder of copies and the folder of their originals (a single copy is
    named with its original); the (copy, original) pairs. Only files of one rank and one size
    are read, each within a dump's budget (``_digest``): one that is not read is no copy."""
    by_key: dict[tuple[int, int], list[Candidate]] = defaultdict(list)
    for cand in candidates:
        by_key[(cand.rank, cand.size_bytes)].append(cand)
    dropped: set[int] = set()
    pairs: dict[tuple[str, str], list[tuple[Candidate, Candidate]]] = defaultdict(list)
    for same in by_key.values():
        if len(same) < 2:
            continue
        first_of: dict[bytes, Candidate] = {}
        for cand in same:
            digest = _digest(cand)
            if digest is None:
                continue
            if digest in first_of:
                dropped.add(id(cand))
                original = first_of[digest]
                pairs[(_folder(cand.relative), _folder(original.relative))].append((cand, original))
            else:
                first_of[digest] = cand
    problems = []
    for (copies, originals), found in pairs.items():
        copy, original = found[0]
        if len(found) == 1:
            said = f"{copy.relative}: the same bytes as {original.relative} (a copy): read once"
        else:
            ranks = format_ranks(sorted({c.rank for c, _ in found}))
            said = (
                f"{copies or '.'}/: {len(found)} dumps (ranks {ranks}) have the same bytes as "
                f"those in {originals or '.'}/ (copies): each read once"
            )
        problems.append(LoadProblem(rank=copy.rank, path=str(copy.path), message=said, fatal=False))
    kept = [c for c in candidates if id(c) not in dropped]
    return kept, tuple(problems), [pair for found in pairs.values() for pair in found]


def drop_side_copies(side_files: Sequence[SideFile]) -> tuple[SideFile, ...]:
    """The side files with byte-identical copies of one kind and name read once (the
    recorder's ``stacks_rank_3.json`` and ``collect``'s copy of it beside). Files in folders
    of different ranks are never copies, whatever their bytes (torchrun's
    ``attempt_0/2/error.json`` and ``attempt_0/3/error.json`` of two ranks that timed out
    alike, in the same second)."""
    by_key: dict[tuple[str, str, int, str | None], list[SideFile]] = defaultdict(list)
    for f in side_files:
        path = PurePosixPath(f.relative)
        folder = path.parent.name if _RANK_FOLDER.fullmatch(path.parent.name) else None
        by_key[(f.kind, path.name, f.size_bytes, folder)].append(f)
    dropped: set[int] = set()
    for same in by_key.values():
        if len(same) < 2:
            continue
        seen: set[bytes] = set()
        for f in same:
            digest = _side_digest(f)
            if digest is None:
                continue
            if digest in seen:
                dropped.add(id(f))
            seen.add(digest)
    return tuple(f for f in side_files if id(f) not in dropped)


def _side_digest(f: SideFile) -> bytes | None:
    if f.refused is not None or f.size_bytes > _MAX_SIDE_COPY_BYTES:
        return None
    try:
        raw = f.data if f.data is not None else _read_side(f, _MAX_SIDE_COPY_BYTES)
    except OSError:
        return None
    return hashlib.blake2b(raw, digest_size=16).digest()


def _read_side(f: SideFile, limit: int) -> bytes:
    """A side file's bytes as listed, within ``limit`` (``read_listed``: never a FIFO or a
    link swapped in after the listing, never more than its listed size)."""
    return b"".join(read_listed(f.path, f.size_bytes, limit))


# --------------------------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------------------------


def _folder(relative: str) -> str:
    return relative.rpartition("/")[0]


def _pids_in(folder: str, side_files: Sequence[SideFile]) -> dict[int, tuple[str, int]]:
    """Each rank's (host, pid) as the manifest and the recorder's sidecars in ``folder`` (not
    below) give them; a rank given two different ones is left out."""
    seen: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for item in _rank_records(folder, side_files):
        _note(seen, item)
    return {r: next(iter(v)) for r, v in seen.items() if len(v) == 1}


class DumpRecord(NamedTuple):
    """What a rank's sidecar (or ``collect``'s manifest) says of its dump's process."""

    host: str
    pid: int
    dumped_at_ns: int
    world_size: int | None  # the job's world as the recorder saw it (None: not said)


def dump_records(folder: str, side_files: Sequence[SideFile]) -> dict[int, DumpRecord]:
    """Each rank's ``DumpRecord`` as the manifest and the recorder's sidecars in ``folder``
    (not below) give it; a rank given two different ones is left out."""
    seen: dict[int, set[DumpRecord]] = defaultdict(set)
    for item in _rank_records(folder, side_files):
        if not isinstance(item, dict):
            continue
        rank, pid, host, at = (item.get(k) for k in ("rank", "pid", "host", "dumped_at_ns"))
        world = item.get("world_size")
        world = world if type(world) is int and 0 < world <= MAX_WORLD_SIZE else None
        if type(rank) is int and type(pid) is int and isinstance(host, str) and type(at) is int:
            seen[rank].add(DumpRecord(host, pid, at, world))
    return {r: next(iter(v)) for r, v in seen.items() if len(v) == 1}


def _dumped_at(folder: str, side_files: Sequence[SideFile]) -> int | None:
    """The newest dump time (ns) the manifest and the recorder's sidecars in ``folder`` (not
    below) give its ranks, else None."""
    times: list[int] = []
    for item in _rank_records(folder, side_files):
        at = item.get("dumped_at_ns") if isinstance(item, dict) else None
        if type(at) is int and at > 0:
            times.append(at)
    return max(times) if times else None


def _rank_records(folder: str, side_files: Sequence[SideFile]) -> Iterator[Any]:
    """What collect's manifest (an item a rank) and the recorder's sidecars (one each) in
    ``folder`` (not below) say of their ranks, unchecked: the callers take what they need."""
    for f in side_files:
        if _folder(f.relative) != folder or f.refused is not None:
            continue
        if f.kind == "manifest":
            doc = _json_of(f)
            ranks = doc.get("ranks") if isinstance(doc, dict) else None
            yield from ranks if isinstance(ranks, list) else ()
        elif f.kind == "stacks" and f.relative.endswith(".json"):
            yield _json_of(f)


def _note(seen: dict[int, set[tuple[str, int]]], item: Any) -> None:
    if not isinstance(item, dict):
        return
    rank, pid, host = item.get("rank"), item.get("pid"), item.get("host")
    if type(rank) is int and type(pid) is int and isinstance(host, str):
        seen[rank].add((host, pid))


def _json_of(f: SideFile) -> Any:
    if f.size_bytes > _MAX_SIDECAR_BYTES:
        return None
    try:
        raw = f.data if f.data is not None else _read_side(f, _MAX_SIDECAR_BYTES)
        return json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None


def _newest_mtime(files: Iterable[Candidate]) -> float | None:
    times = []
    for cand in files:
        try:
            times.append(Path(cand.path).stat().st_mtime)
        except OSError:
            return None
    return max(times) if times else None


def newest_snapshot(
    sets: Sequence[tuple[str, str, Sequence[Candidate]]],
    side_files: Sequence[SideFile],
    copies: Sequence[tuple[Candidate, Candidate]] = (),
) -> tuple[int, tuple[LoadProblem, ...], list[Candidate]] | None:
    """Of several dump sets ``(name, folder, files)`` holding the same ranks, the index of the
    newest where all are snapshots of one job (see the module docstring), a line per set left
    out, and the files to add to it: a rank whose file in its folders was read once as a copy
    of another set's (``copies``: (copy, original)) has that original. None where that is not
    shown (then they are several jobs)."""
    if len(sets) < 2:
        return None
    folders = [{folder} | {_folder(c.relative) for c in files} for _, folder, files in sets]
    gone = [[(c, o) for c, o in copies if _folder(c.relative) in f] for f in folders]
    ranks = [
        frozenset(c.rank for c in files) | {c.rank for c, _ in g}
        for (_, _, files), g in zip(sets, gone, strict=True)
    ]
    if len(set(ranks)) != 1:
        return None
    pids = [
        {k: v for f in sorted(fs) for k, v in _pids_in(f, side_files).items()} for fs in folders
    ]
    common = ranks[0]
    for rank in common:
        seen = {p.get(rank) for p in pids}
        if None in seen or len(seen) != 1:
            return None  # a rank whose process is unknown somewhere, or differs: not shown
    # which is newest: by the dump times the manifests and the recorder's sidecars record
    # (a checkout's or a copy's file times are new), by the files' times only where a set has
    # none (then said)
    dumped = [
        max((t for f in fs if (t := _dumped_at(f, side_files))), default=None) for fs in folders
    ]
    by = "its dump times"
    times: list[float | None] = [None if t is None else t / 1e9 for t in dumped]
    if any(t is None for t in times):
        times, by = [_newest_mtime(files) for _, _, files in sets], "its files' times"
    if any(t is None for t in times):
        return None
    newest = max(range(len(sets)), key=lambda i: (times[i] or 0.0, sets[i][0]))
    problems = tuple(
        LoadProblem(
            rank=min(common),
            path=name,
            message=f"{name}: an earlier snapshot of the same ranks (the same processes as "
            f"{sets[newest][0]}): the newest snapshot (by {by}) is analysed; `frtrace "
            "compare` on the two tells stuck from slow",
            fatal=False,
        )
        for i, (name, _, _) in enumerate(sets)
        if i != newest
    )
    have = {c.rank for c in sets[newest][2]}
    return newest, problems, [o for c, o in gone[newest] if c.rank not in have]
