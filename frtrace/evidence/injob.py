"""Only the job's ranks: what the side files say of a rank outside ``[0, world)`` is not used.

A log line, a stack sample or a manifest can name any number (``[rank1000000000]:``, a
sidecar's ``"rank": -5``); the readers already refuse ranks outside ``[0, MAX_WORLD_SIZE)``.
Here, once the dumps have said how many ranks the job had, what names a rank outside the job
is dropped, one problem line per file saying so: no such rank is ever named, suspected or
counted. (A log line whose prefix names a rank outside the job is left out by the log reader
itself, before any rank is known of it, and said in the same words: :func:`outside_line`.)
``collect``'s manifests are checked against the dump files here too (``collected.checked``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from frtrace.evidence.collected import Collected, checked
from frtrace.evidence.model import Failure, JobEvidence
from frtrace.incident.compressed import compressed_name
from frtrace.pystack.discover import StackSet


class LoadedSet(Protocol):
    """What is read here of a loaded dump set (``frtrace.load.dumpset.DumpSet``)."""

    @property
    def directory(self) -> Path: ...

    @property
    def files(self) -> Any: ...  # the files table: rank, path, size_bytes, ...


__all__ = ["LoadedSet", "dump_files", "outside_line", "within_job", "world_named"]

# Without dumps, the world is the highest rank the side files name, plus one, only while that
# is at most this many ranks per rank named (plus a floor): one line naming rank 1,000,000 does
# not make an analysis of a million missing ranks (memory follows the evidence, not a number).
_RANKS_PER_NAMED = 16
_WORLD_FLOOR = 4096


def world_named(ranks: set[int]) -> int | None:
    """The world size the ranks named by the side files of a job without dumps support (the
    ranks above it are then outside the job), None where they name none."""
    cap = _RANKS_PER_NAMED * len(ranks) + _WORLD_FLOOR
    kept = [r for r in ranks if 0 <= r < cap]
    return max(kept) + 1 if kept else None


def dump_files(dumps: LoadedSet) -> dict[str, tuple[int, int]]:
    """Each dump file read: its path under the set's directory ("/"-separated; an archive's
    member path; a file compressed on its own named as it was before, ``rank_1.gz`` as
    ``rank_1``) and its (rank, size in bytes)."""
    base = str(dumps.directory)
    out: dict[str, tuple[int, int]] = {}
    for row in dumps.files.select(["rank", "path", "size_bytes"]).to_pylist():
        path = str(row["path"])
        for sep in ("/", ":"):  # a folder's files; an archive's members ("a.tgz:host/x")
            if path.startswith(base + sep):
                path = path[len(base) + 1 :]
                break
        posix = PurePosixPath(path.replace("\\", "/"))
        packed = compressed_name(posix.name)
        if packed is not None:
            posix = posix.with_name(packed[0])
        out[posix.as_posix()] = (row["rank"], row["size_bytes"])
    return out


def _outside(rank: int | None, world: int) -> bool:
    return rank is not None and not 0 <= rank < world


def _file_of(source: str) -> str:
    """``train.log`` of ``train.log:12``; ``stacks_rank_5.json`` of ``... (trigger)``."""
    return source.removesuffix(" (trigger)").rpartition(":")[0] or source


def within_job(
    world: int,
    evidence: JobEvidence,
    stacks: StackSet,
    collected: Collected,
    dumps: Mapping[str, tuple[int, int]],
) -> tuple[JobEvidence, StackSet, Collected]:
    """The evidence, stacks and manifests with every rank outside ``[0, world)`` dropped (one
    problem line per file), and the manifests' claims checked against ``dumps``."""
    dropped: dict[str, set[int]] = {}
    failures: list[Failure] = []
    for f in evidence.failures:
        if f.rank is not None and _outside(f.rank, world):
            dropped.setdefault(_file_of(f.source), set()).add(f.rank)
            continue
        named = tuple(r for r in f.named_ranks if not _outside(r, world))
        if len(named) != len(f.named_ranks):
            dropped.setdefault(_file_of(f.source), set()).update(
                r for r in f.named_ranks if _outside(r, world)
            )
            f = replace(f, named_ranks=named)
        if outside := {c.rank for c in f.calls if _outside(c.rank, world)}:
            # (a process group's ranks: one at or past the job's size is in no group of it)
            dropped.setdefault(_file_of(f.source), set()).update(outside)
            f = replace(f, calls=(), as_rank=None)
        failures.append(f)
    samples = tuple(s for s in stacks.samples if not _outside(s.rank, world))
    for s in stacks.samples:
        if _outside(s.rank, world):
            where = s.path.removeprefix(stacks.directory.rstrip("/") + "/")
            dropped.setdefault(where, set()).add(s.rank or 0)
    problems = [outside_line(where, ranks, world) for where, ranks in sorted(dropped.items())]
    if problems or len(samples) != len(stacks.samples):
        stacks = replace(
            stacks,
            samples=samples,
            by_rank={r: s for r, s in stacks.by_rank.items() if not _outside(r, world)},
        )
    evidence = replace(
        evidence, failures=tuple(failures), problems=evidence.problems + tuple(problems)
    )
    return evidence, stacks, checked(collected, dumps, world)


def outside_line(where: str, ranks: set[int] | set[str], world: int | None) -> str:
    """The one problem line of a file that names ``ranks`` outside the job (of ``world``
    ranks; None: not known, outside ``[0, MAX_WORLD_SIZE)``): what it said is not used."""
    from frtrace.incident.budget import MAX_WORLD_SIZE

    job = f"the job's {world:,} ranks" if world is not None else f"any job's {MAX_WORLD_SIZE:,}"
    return f"{where}: names {_ranks(ranks)}, outside {job}; not used"


def _ranks(ranks: set[int] | set[str]) -> str:
    shown = sorted(ranks, key=_order)[:3]
    more = f" and {len(ranks) - 3:,} more" if len(ranks) > 3 else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, shown)) + more


def _order(rank: int | str) -> tuple[int, int | str]:
    """Ranks in numeric order, also as written (a number's text: shorter ones first)."""
    return (len(rank), rank) if isinstance(rank, str) else (0, rank)
