"""Find what a dump directory (or archive) holds, once, for every command: each rank's dump,
the files the analysis reads beside them, and the one dump set they form.

torch names a dump ``<prefix><global_rank>``: ``nccl_trace_rank_3`` (torch 2.2-2.8),
``comm_lib_trace_rank_3`` (2.9+), torchtitan's ``comm_traces/rank_3``, tutorials' ``trace_3``,
host-qualified ``nccl_trace_rank_node02_5``, optionally with ``.json`` / ``.pkl``. The rank is
the run of digits at the end of the name: the dump's content does not carry it.

``list_files`` sorts every file (or an archive's member: ``frtrace.incident.archive``, read in
memory) by ``frtrace.incident.layout``'s rules into a dump candidate, a *side file* (a rank's Python
stacks, a log, an error file, ``collect``'s manifest: read by ``frtrace.pystack`` and
``frtrace.evidence``), or skipped (and why). ``summary`` says what ``analyze`` reads from that
one listing (``Discovery.side_files``, carried by the loaded ``DumpSet``).

**Dump sets.** A folder can hold several incidents' dumps of the same ranks
(``incident1/rank_0`` and ``incident2/rank_0``, or ``nccl_trace_rank_0`` next to
``comm_lib_trace_rank_0``), and one job's dumps can be spread over folders (``collect`` run
on each host into ``DIR/<host>/``). Sets are formed bottom-up over the folder tree: a folder's
own files make one part per name pattern (the name with ``*`` for the rank), its subfolders
bring theirs, and the parts become one set when no two of them hold the same ranks as two
copies would: a rank may be in both only where both name it the same way and such ranks are
at most half of either (a dump left over on another host). Several sets left at the top are
an error naming each set and the ``--only`` that picks one (the set's name, or a pattern of
paths; the side files of the other sets' folders are left out then); a rank found twice within
one set is read from the first file in path order, the other named in one warning
(``Discovery.problems``); where they are one process's dumps (``frtrace.incident.recorders``)
every one is kept, said in one line: the load makes them one rank (``frtrace.load.recorders``).
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from frtrace.base.ranges import format_ranks
from frtrace.errors import DumpDirNotFound, DuplicateRank, NoDumpsFound, SeveralDumpSets
from frtrace.incident.attempts import (
    attempt_numbers,
    drop_copies,
    drop_side_copies,
    newest_snapshot,
    side_files_of_attempt,
)
from frtrace.incident.layout import SideFile, SkippedFile, parse_dump_name, walk, walk_key
from frtrace.incident.listing import MAX_WORLD_SIZE, Candidate, Listing
from frtrace.incident.problems import LoadProblem
from frtrace.incident.recorders import joined_parts, read_together

__all__ = [
    "MAX_WORLD_SIZE",
    "Candidate",
    "Discovery",
    "Listing",
    "SideFile",
    "SkippedFile",
    "discover",
    "list_files",
    "parse_dump_name",
    "set_name",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What a directory holds: the dump set's files sorted by rank, the side files read with
    them, what was skipped, and the warnings the set itself raised (a rank found twice)."""

    directory: Path
    candidates: tuple[Candidate, ...]
    skipped: tuple[SkippedFile, ...]
    side_files: tuple[SideFile, ...] = ()
    problems: tuple[LoadProblem, ...] = ()
    attempt: int | None = None  # the newest attempt its logs' attempt_<N> folders number, if any
    wanted: int | None = None  # --attempt: the attempt asked for (None: the newest)
    # every attempt's side files, ``side_files`` chosen from them (the other attempts' history)
    all_side_files: tuple[SideFile, ...] = ()
    # where no file can be a dump (``discover(..., empty=True)``): why, as ``NoDumpsFound``
    # says it; ``side_files`` are then every side file listed (the job's failures may be there)
    missing: NoDumpsFound | None = None

    def describe(self) -> str:
        """What was found, for the progress line: ``1,024 dump files (421.0 MB)``."""
        size = sum(c.size_bytes for c in self.candidates) / 1e6
        files = "file" if len(self.candidates) == 1 else "files"
        return f"{len(self.candidates):,} dump {files} ({size:,.1f} MB)"


def list_files(directory: Path) -> Listing:
    """Every file under ``directory`` (recursively) or in the archive, sorted into dump
    candidates, side files and skipped; raises ``DumpDirNotFound`` where there is neither."""
    if directory.is_file():  # (imported only then: the archive reader loads pyarrow)
        from frtrace.incident.archive import is_archive, read_archive

        if is_archive(directory):
            return read_archive(directory)
    return _walk(directory)


def discover(
    directory: Path, *, only: str | None = None, attempt: int | None = None, empty: bool = False
) -> Discovery:
    """List ``directory`` (or the archive) recursively and form its one dump set; raise if
    nothing can be a dump (``empty``: return a set of no dump, saying why in ``missing``), or
    where it holds several sets and ``only`` picks none.

    ``only``: keep the files of one set: a set name as the several-sets error prints it
    (``incident1/rank_*``), else a glob over the path under the directory (``*.json``).
    Copies are read once, the newest of several snapshots of one job is kept, and the logs of
    one attempt (``attempt``, else the newest) are read (``frtrace.incident.attempts``).
    """
    listing = list_files(directory)
    candidates, copies, pairs = drop_copies(listing.candidates)
    chosen = candidates if only is None else _select(candidates, only)
    if not chosen:
        missing = _missing(directory, listing, only)
        if not empty:
            raise missing
        side = listing.side_files
        return Discovery(
            directory=directory,
            candidates=(),
            skipped=listing.skipped,
            side_files=side,
            all_side_files=side,
            missing=missing,
        )
    sets = _form_sets(chosen)
    snapshots: tuple[LoadProblem, ...] = ()
    if len(sets) > 1:
        parts = [(s.name, s.root, s.members) for s in sets]
        newest = newest_snapshot(parts, listing.side_files, pairs)
        if newest is None:
            raise _several_sets(directory, sets)
        sets, snapshots = [sets[newest[0]]], newest[1]
        sets[0].members.extend(newest[2])  # (a rank read once from another snapshot's copy)
    kept, problems = _one_per_rank(directory, sets[0])
    problems += read_together(kept, sets[0].siblings, set_name)
    side_files = drop_side_copies(listing.side_files)
    if len(sets[0].members) < len(candidates):  # (--only, snapshots: their folders' files out)
        side_files = _side_files_of(sets[0], candidates, side_files)
    every = side_files
    side_files, attempts, _ = side_files_of_attempt(every, attempt)
    numbers = attempt_numbers(every)
    return Discovery(
        directory=directory,
        candidates=tuple(sorted(kept, key=lambda c: c.rank)),
        skipped=listing.skipped,
        side_files=side_files,
        problems=(*copies, *snapshots, *attempts, *problems),
        attempt=numbers[-1] if numbers else None,
        wanted=attempt,
        all_side_files=every,
    )


def _missing(directory: Path, listing: Listing, only: str | None) -> NoDumpsFound:
    """Why nothing in the listing can be a dump (of the set ``only`` names)."""
    skipped = len(listing.skipped) + len(listing.side_files)
    hint = f" ({skipped} other files skipped)" if skipped else ""
    if only is not None:
        return NoDumpsFound(
            f"{directory}: no Flight Recorder dumps match --only {only!r}{hint}; give a "
            "set name as the error about several sets prints it (e.g. 'incident1/rank_*') "
            "or a pattern of paths under the directory (e.g. '*.json')."
        )
    return NoDumpsFound(
        f"{directory}: no Flight Recorder dumps found{hint}. Dumps are named "
        "<prefix><rank> (e.g. comm_lib_trace_rank_3); check TORCH_FR_DUMP_TEMP_FILE of the "
        "job, or run `frtrace env` to see how to make a job write them."
    )


def _walk(directory: Path) -> Listing:
    if not directory.exists():
        raise DumpDirNotFound(
            f"{directory}: no such directory. Pass the folder that holds the per-rank dump "
            "files (e.g. -d ~/.cache/torch or the TORCH_FR_DUMP_TEMP_FILE folder)."
        )
    if not directory.is_dir():
        raise DumpDirNotFound(
            f"{directory}: is a file, not a directory or an archive (.tar, .tar.gz, .tgz, "
            ".zip). Pass the folder or the archive that holds the per-rank dump files."
        )
    dumps, side, skipped = walk(directory)
    candidates: list[Candidate] = []
    for dump in dumps:
        if dump.rank >= MAX_WORLD_SIZE:
            reason = f"rank {dump.rank} is beyond any job's world size"
            skipped.append(SkippedFile(path=dump.path, reason=reason))
            continue
        candidates.append(
            Candidate(
                path=dump.path,
                rank=dump.rank,
                prefix=dump.prefix,
                encoding=dump.encoding,
                size_bytes=dump.size_bytes,
                relative=dump.relative,
                data=dump.data,  # (a compressed file's, unpacked in the walk)
                refused=dump.refused,
            )
        )
    return Listing(candidates=tuple(candidates), side_files=tuple(side), skipped=tuple(skipped))


def set_name(relative: str) -> str:
    """The set a file belongs to: its path with ``*`` for the rank (``incident1/rank_*.json``)."""
    folder, _, name = relative.rpartition("/")  # (the walk's relative paths: "/" between)
    parsed = parse_dump_name(name)
    if parsed is None:
        return relative
    prefix, rank, _ = parsed
    digits = re.match(r"\d+", name[len(prefix) :])
    rest = name[len(prefix) + (digits.end() if digits else len(str(rank))) :]
    return f"{folder}/{prefix}*{rest}" if folder else f"{prefix}*{rest}"


def _folder(relative: str) -> str:
    """The folder of a "/"-separated path, "" at the top."""
    return relative.rpartition("/")[0]


def _under(relative: str, folder: str) -> bool:
    """Whether ``relative`` is ``folder`` or lies below it ("" is the top: everything)."""
    return not folder or relative == folder or relative.startswith(folder + "/")


@dataclass(slots=True)
class _Set:
    """Files that form one dump set so far: where it was formed, its files, their name
    patterns (``rank_*``) and ranks, and the name ``--only`` picks it by."""

    root: str
    members: list[Candidate]
    patterns: frozenset[str]
    ranks: frozenset[int]
    name: str
    # (relative paths) one process's several dumps a rank in their folder: read together
    siblings: frozenset[str] = frozenset()


def _form_sets(candidates: Sequence[Candidate]) -> list[_Set]:
    """The dump sets the files form, bottom-up over their folders (see the module docstring);
    the top folder's parts, in path order."""
    own: dict[str, list[Candidate]] = defaultdict(list)
    children: dict[str, set[str]] = defaultdict(set)
    for cand in sorted(candidates, key=lambda c: walk_key(c.relative)):
        folder = _folder(cand.relative)
        own[folder].append(cand)
        while folder and folder not in children[_folder(folder)]:
            children[_folder(folder)].add(folder)
            folder = _folder(folder)
    folders = set(own) | set(children) | {""}
    formed: dict[str, list[_Set]] = {}
    # (deepest first, so each folder's subfolders are done: no recursion on deep archives)
    for folder in sorted(folders, key=lambda f: (-f.count("/") - bool(f), f)):
        parts = _parts_of(folder, own.get(folder, ()))
        for child in sorted(children.get(folder, ()), key=walk_key):
            parts.extend(formed.pop(child))
        formed[folder] = [_merged(folder, parts)] if _one_job(parts) else parts
    return formed[""]


def _parts_of(folder: str, files: Iterable[Candidate]) -> list[_Set]:
    """A folder's own files: one part per name pattern; patterns whose files of each rank
    they share are one process's several dumps make one part."""
    by_pattern: dict[str, list[Candidate]] = defaultdict(list)
    for cand in files:
        by_pattern[set_name(cand.relative).rpartition("/")[2]].append(cand)
    parts = [
        _Set(
            root=folder,
            members=members,
            patterns=frozenset({pattern}),
            ranks=frozenset(c.rank for c in members),
            name=f"{folder}/{pattern}" if folder else pattern,
        )
        for pattern, members in sorted(by_pattern.items())
    ]
    if len(parts) < 2:
        return parts
    groups = joined_parts([p.members for p in parts])  # (``frtrace.incident.recorders``)
    return [
        _merged(folder, [parts[i] for i in g], one=True) if g[1:] else parts[g[0]] for g in groups
    ]


def _one_job(parts: Sequence[_Set]) -> bool:
    """Whether the parts are one job's files: no two hold the same ranks as two copies would."""
    if len(parts) < 2:
        return False
    holders: dict[int, list[int]] = defaultdict(list)
    pairs: set[tuple[int, int]] = set()
    for i, part in enumerate(parts):
        for rank in part.ranks:
            pairs.update((j, i) for j in holders[rank])
            holders[rank].append(i)
    return all(_can_share(parts[a], parts[b]) for a, b in pairs)


def _can_share(a: _Set, b: _Set) -> bool:
    """Two parts with ranks in common are one job's only where both name their files the same
    way and the ranks in common are at most half of either (a dump left over in a second
    host's folder); the same ranks again, or a prefix of another torch version, are not."""
    common = len(a.ranks & b.ranks)
    return (
        len(a.patterns) == 1
        and a.patterns == b.patterns
        and 2 * common <= min(len(a.ranks), len(b.ranks))
    )


def _merged(folder: str, parts: Sequence[_Set], *, one: bool = False) -> _Set:
    """``one``: the parts are one process's several dumps a rank (``_parts_of``)."""
    members = sorted((c for p in parts for c in p.members), key=lambda c: walk_key(c.relative))
    count = Counter(c.rank for c in members) if one else Counter[int]()
    patterns = frozenset().union(*(p.patterns for p in parts))
    below = any(_folder(c.relative) != folder for c in members)
    name = (
        (f"{folder}/" if folder else "")
        + ("*/" if below else "")
        + (next(iter(patterns)) if len(patterns) == 1 else "*")
    )
    return _Set(
        root=folder,
        members=members,
        patterns=patterns,
        ranks=frozenset().union(*(p.ranks for p in parts)),
        name=name,
        siblings=frozenset().union(
            *(p.siblings for p in parts), (c.relative for c in members if count[c.rank] > 1)
        ),
    )


def _select(candidates: list[Candidate], only: str) -> list[Candidate]:
    for found in _form_sets(candidates):
        if found.name == only:
            return found.members
    by_set = [c for c in candidates if set_name(c.relative) == only]
    if by_set:
        return by_set
    return [c for c in candidates if fnmatch.fnmatchcase(c.relative, only)]


def _side_files_of(
    chosen: _Set, candidates: Sequence[Candidate], side_files: Sequence[SideFile]
) -> tuple[SideFile, ...]:
    """The side files of the set ``--only`` chose: those in the other sets' folders are left
    out (``incident2/pyspy_rank_0.txt`` with ``--only 'incident1/*'``). A file belongs to the
    deepest folder above it that holds dumps or where a set was formed: kept where that holds
    the chosen set's (or there is none: a job's log above every set)."""
    picked = {id(c) for c in chosen.members}
    mine: dict[str, bool] = {}

    def mark(folder: str, chosen_here: bool) -> None:
        mine[folder] = mine.get(folder, False) or chosen_here

    for cand in candidates:
        mark(_folder(cand.relative), id(cand) in picked)
    for found in _form_sets(candidates):
        mark(found.root, any(id(c) in picked for c in found.members))
    mark(chosen.root, True)
    deepest = sorted(mine, key=len, reverse=True)

    def kept(relative: str) -> bool:
        owner = next((r for r in deepest if _under(relative, r)), None)
        return owner is None or mine[owner]

    return tuple(f for f in side_files if kept(f.relative))


def _one_per_rank(directory: Path, found: _Set) -> tuple[list[Candidate], tuple[LoadProblem, ...]]:
    """One file per rank: where a rank has files in two folders of the set, the first in path
    order is read and the others named in one warning; two in one folder is an error, unless
    they are one process's several dumps (``_parts_of``: all kept)."""
    by_rank: dict[int, list[Candidate]] = defaultdict(list)
    for cand in found.members:  # (in path order)
        by_rank[cand.rank].append(cand)
    kept: list[Candidate] = []
    problems: list[LoadProblem] = []
    for rank, files in by_rank.items():
        first = files[0]
        here = [f for f in files if _folder(f.relative) == _folder(first.relative)]
        if len(here) > 1 and all(f.relative in found.siblings for f in here):
            kept.extend(here)  # one process's several dumps (``_parts_of``): all read
            files = [first, *(f for f in files if all(f is not h for h in here))]
        else:
            kept.append(first)
        if len(files) == 1:
            continue
        again = [f for f in files[1:] if _folder(f.relative) == _folder(first.relative)]
        if again:  # rank_3 and rank_03 in one folder: the same set twice
            raise DuplicateRank(
                f"{directory}: two files claim rank {rank}: {first.path} and {again[0].path}. "
                "Keep one file per rank (move the other elsewhere) and run again."
            )
        others = " and ".join(str(f.path) for f in files[1:])
        problems.append(
            LoadProblem(
                rank=rank,
                path=str(files[1].path),
                message=f"rank {rank} has a dump in {len(files)} folders: {first.path} and "
                f"{others}; read from {first.relative} (the first in path order), "
                f"{'the others' if len(files) > 2 else 'the other'} left out",
                fatal=False,
            )
        )
    return kept, tuple(problems)


def _several_sets(directory: Path, sets: Sequence[_Set]) -> SeveralDumpSets:
    """The error for several sets: each named with its ranks, a rank they share, how to pick."""
    shown = sorted(sets, key=lambda s: s.name)
    listed = ", ".join(f"{s.name} (ranks {format_ranks(sorted(s.ranks))})" for s in shown[:6])
    if len(shown) > 6:
        listed += f", and {len(shown) - 6} more"
    first, second = _a_shared_rank(shown)
    pick = shown[0]
    hint = f"select one with --only {pick.name!r}"
    roots = {s.root for s in shown}
    if directory.is_dir() and len(roots) == len(shown) and "" not in roots:
        hint += f" or point at its folder ({directory / pick.root})"
    return SeveralDumpSets(
        f"{directory}: holds {len(shown)} dump sets for the same ranks (several incidents, "
        f"or copies): {listed}; rank {second.rank} is both {first.relative} and "
        f"{second.relative}. Analyse one set at a time: {hint}."
    )


def _a_shared_rank(sets: Sequence[_Set]) -> tuple[Candidate, Candidate]:
    """Two files of different sets with one rank (the lowest such rank)."""
    seen: dict[int, Candidate] = {}
    pairs: list[tuple[Candidate, Candidate]] = []
    for found in sets:
        mine = {c.rank: c for c in reversed(found.members)}  # (the first file of each rank)
        for rank, cand in mine.items():
            if rank in seen:
                pairs.append((seen[rank], cand))
            else:
                seen[rank] = cand
    if not pairs:  # (sets kept apart by their names alone share no rank: not formed so)
        a, b = sets[0].members[0], sets[1].members[0]
        return a, b
    return min(pairs, key=lambda p: p[0].rank)
