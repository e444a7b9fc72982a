"""What ``frtrace collect`` knew about each rank it collected: its manifests, read.

``collect`` writes one ``frtrace-collect.json`` into every folder it fills (one per host:
``DIR/<host>/``), so the analysis of the folder, of the union of several hosts' folders, or of
an archive of them, knows what the dumps alone do not say: which host and process each rank
was, and when its dump was taken::

    {"format": "frtrace-collect", "version": 1,
     "host": "node-7",                 # the host the folder is about
     "collector": {"host": "login-1", "pid": 4242, "how": "store" | "local"},
     "clock": "collector",             # whose clock "dumped_at_ns" is read from
     "world_size": 8,                  # the ranks' WORLD_SIZE, where they agree (optional)
     "ranks": [{"rank": 5, "host": "node-7", "pid": 1234, "dumped_at_ns": 17000...,
                "dump": "comm_lib_trace_rank_5.json", "how": "debug server ..."}]}

``dumped_at_ns`` is when the dump arrived (``collect``'s clock: the rank's own host for a local
collect; the collector's for ``--store``, which differs from the ranks' hosts by their clock
skew). Unknown keys are ignored; a manifest that cannot be read is one line in the problems,
never a failed analysis.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from frtrace.incident.budget import MAX_WORLD_SIZE, load_json
from frtrace.incident.layout import SideFile, side_files
from frtrace.job.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    CollectedRank,
    manifest_document,
)

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "Collected",
    "CollectedRank",
    "checked",
    "manifest_document",
    "manifest_times",
    "read_collected",
]

_MAX_BYTES = 64 * 1024 * 1024  # 10^5 ranks of ~300 bytes each


@dataclass(frozen=True, slots=True, kw_only=True)
class Collected:
    """Every manifest under a directory, merged: one entry per rank (a rank in two manifests:
    the later dump wins, and the other is a problem line)."""

    ranks: tuple[CollectedRank, ...] = ()
    files: tuple[str, ...] = ()  # the manifests read (relative paths)
    problems: tuple[str, ...] = ()
    sources: Mapping[int, str] = field(default_factory=dict)  # rank -> the manifest it is from
    # rank -> its manifest's folder, as the dump set's file paths name it (an archive's members
    # from the archive's top; a folder's from the folder)
    folders: Mapping[int, str] = field(default_factory=dict)
    world_size: int | None = None  # the ranks' WORLD_SIZE, as the manifests say (the largest)

    def dumped_at_ns(self) -> dict[int, int]:
        return {r.rank: r.dumped_at_ns for r in self.ranks if r.dumped_at_ns is not None}

    def __bool__(self) -> bool:
        return bool(self.ranks)


def _size_of(item: Any) -> int | None:
    return _typed(item.get("size_bytes"), int) if isinstance(item, dict) else None


def _typed(value: Any, kind: type) -> Any:
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        return None
    return value if isinstance(value, kind) else None


def _ranks_of(doc: Any) -> list[CollectedRank]:
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"not a {MANIFEST_FORMAT} manifest")
    if _typed(doc.get("version"), int) != MANIFEST_VERSION:
        raise ValueError(f"version {doc.get('version')!r}, this frtrace reads {MANIFEST_VERSION}")
    items = doc.get("ranks")
    if not isinstance(items, list):
        raise ValueError('"ranks" is not a list')
    out = []
    for item in items:
        rank = _typed(item.get("rank"), int) if isinstance(item, dict) else None
        if rank is None or not 0 <= rank < MAX_WORLD_SIZE:
            raise ValueError(f"a rank entry without a rank number: {str(item)[:60]}")
        out.append(
            CollectedRank(
                rank=rank,
                host=_typed(item.get("host"), str),
                pid=_typed(item.get("pid"), int),
                dumped_at_ns=_typed(item.get("dumped_at_ns"), int),
                dump=_typed(item.get("dump"), str),
                how=_typed(item.get("how"), str),
                size_bytes=_size_of(item),
            )
        )
    return out


def _read(path: Path) -> Any:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > _MAX_BYTES:
            raise ValueError(f"{info.st_size} bytes, more than a manifest holds")
        return load_json(fh.read(_MAX_BYTES))


def read_collected(directory: Path, files: Sequence[SideFile] | None = None) -> Collected:
    """Every ``frtrace-collect.json`` of ``directory`` (links never followed): ``files``, the
    side files its discovery found (``Discovery.side_files``: an archive's in memory), else
    the directory is listed."""
    if files is None:
        files = side_files(directory)
    by_rank: dict[int, CollectedRank] = {}
    sources: dict[int, str] = {}
    folders: dict[int, str] = {}
    found: list[str] = []
    problems: list[str] = []
    worlds: list[int] = []
    for file in files:
        if file.kind != "manifest":
            continue
        rel = file.relative
        try:
            if file.refused is not None:
                raise ValueError(file.refused)
            doc = load_json(file.data) if file.data is not None else _read(file.path)
            ranks = _ranks_of(doc)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            problems.append(f"{rel}: {why}; its ranks' hosts, pids and dump times are not used")
            continue
        found.append(rel)
        world = _typed(doc.get("world_size"), int)
        if world is not None and 0 < world <= MAX_WORLD_SIZE:
            worlds.append(world)
        full, base = str(file.path), str(directory)
        inside = full[len(base) + 1 :] if full.startswith(base) and len(full) > len(base) else rel
        for r in ranks:
            have = by_rank.get(r.rank)
            if have is not None:
                keep = max((have, r), key=lambda x: x.dumped_at_ns or 0)
                problems.append(
                    f"{rel}: rank {r.rank} is also in another manifest (hosts {have.host}, "
                    f"{r.host}); the later dump's is used ({keep.host})"
                )
                if keep is have:
                    continue
            by_rank[r.rank] = r
            sources[r.rank] = rel
            folders[r.rank] = inside.rpartition("/")[0]
    return Collected(
        ranks=tuple(by_rank[k] for k in sorted(by_rank)),
        files=tuple(found),
        problems=tuple(problems),
        sources=sources,
        folders=folders,
        world_size=max(worlds, default=None),
    )


def checked(collected: Collected, dumps: Mapping[str, tuple[int, int]], world: int) -> Collected:
    """The manifests' claims that the files bear out. ``dumps``: each loaded dump's path
    (relative, "/"-separated) and its (rank, size in bytes). A rank outside ``[0, world)`` is
    dropped; a rank's dump time is kept only where its ``"dump"`` names that rank's dump in
    the manifest's own folder (and its ``"size_bytes"``, where given, is that file's size):
    else its host and pid are kept, its time is not, and a problem line says why."""
    ranks: list[CollectedRank] = []
    problems = list(collected.problems)
    for r in collected.ranks:
        rel = collected.sources.get(r.rank, MANIFEST_NAME)
        if r.rank >= world:
            problems.append(
                f"{rel}: rank {r.rank} is outside the job's {world:,} ranks; its entry is not used"
            )
            continue
        if r.dumped_at_ns is not None:
            why = _unlike_the_files(r, collected.folders.get(r.rank, ""), dumps)
            if why is not None:
                problems.append(f"{rel}: rank {r.rank}'s {why}; its dump time is not used")
                r = replace(r, dumped_at_ns=None)
        ranks.append(r)
    return replace(collected, ranks=tuple(ranks), problems=tuple(problems))


def _unlike_the_files(
    r: CollectedRank, folder: str, dumps: Mapping[str, tuple[int, int]]
) -> str | None:
    """Why the entry's dump is not a file in the manifest's ``folder``, or None where it is."""
    if not r.dump or "/" in r.dump or r.dump in (".", ".."):
        return "entry names no dump file"
    path = f"{folder}/{r.dump}" if folder else r.dump
    have = dumps.get(path)
    if have is None:
        return f"dump {r.dump[:80]!r} is not a dump file beside the manifest"
    rank, size = have
    if rank != r.rank:
        return f"dump {r.dump[:80]!r} is rank {rank}'s"
    if r.size_bytes is not None and r.size_bytes != size:
        return f"dump {r.dump[:80]!r} has {size:,} bytes, not the {r.size_bytes:,} it says"
    return None


def manifest_times(
    collected: Collected | None, own: Mapping[int, int]
) -> tuple[dict[int, int], tuple[tuple[str, tuple[int, ...]], ...]]:
    """The dump times the manifests give for ranks whose dumps (and sidecars) say none (the
    dumps' own times win), and which manifest gave them to which ranks."""
    if collected is None:
        return {}, ()
    used: dict[int, int] = {}
    by_file: dict[str, list[int]] = {}
    for r in collected.ranks:
        if r.dumped_at_ns is not None and r.rank not in own:
            used[r.rank] = r.dumped_at_ns
            by_file.setdefault(collected.sources.get(r.rank, MANIFEST_NAME), []).append(r.rank)
    return used, tuple((rel, tuple(ranks)) for rel, ranks in sorted(by_file.items()))
