"""A loaded dump set: the five Arrow tables of ``frtrace.load.schema`` and what could not be read.

``load_discovered(discovery, options)`` is the loading step of the pipeline: the incident's
dump files (``frtrace.incident``, listed once) parsed (in worker processes when there are
many), stacks interned across ranks, and which ranks have no usable dump said.
``load_dumps(directory)`` is the public shortcut: the folder discovered, then loaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from frtrace.base.progress import Progress, owned
from frtrace.errors import DumpFormatError, NoReadableDumps
from frtrace.incident.discover import Candidate, Discovery, SkippedFile, discover
from frtrace.incident.fingerprint import Fingerprint
from frtrace.incident.problems import LoadProblem
from frtrace.load import schema
from frtrace.load.cache import TABLES, DirectoryCache, cache_disabled, cache_root
from frtrace.load.dumpset import DumpSet, WorldSize
from frtrace.load.handover import spill
from frtrace.load.handover.gather import Gather
from frtrace.load.handover.members import recorded_groups
from frtrace.load.handover.merging import EntryColumns, local_dictionary, remap_stacks
from frtrace.load.handover.shipped import ColumnWriter, ShippedDump
from frtrace.load.handover.siderows import SideRows
from frtrace.load.handover.spill import spill_directory
from frtrace.load.hooks import give_back_memory
from frtrace.load.lifetimes import one_attempt  # (loaded dump sets: one attempt's ranks)
from frtrace.load.options import LoadOptions
from frtrace.load.read.interning import Stack
from frtrace.load.read.parse import ParsedDump
from frtrace.load.recorders import merge_recorders  # (one rank's several dumps: one rank)
from frtrace.load.workers.bundle import Bundle
from frtrace.load.workers.executors import (
    FileExecutor,
    FuturesExecutor,
    LocalProcesses,
    open_executor,
)

__all__ = [
    "DumpSet",
    "LoadProblem",
    "build_dump_set",
    "give_back_memory",
    "load_discovered",
    "load_dumps",
    "recorded_groups",
]


def load_dumps(
    directory: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: bool | Progress = False,
    only: str | None = None,
    scheduler: str | FileExecutor | None = None,
    cache: bool = False,
) -> DumpSet:
    """Load every dump under ``directory`` (or in the archive); unreadable files become
    problems, not errors. ``only`` keeps one set of several (see ``discover``); ``jobs``,
    ``scheduler`` and ``cache`` as ``LoadOptions`` says. ``progress``: the phases shown
    (``frtrace.base.progress``; True: on stderr): discover, load."""
    with owned(progress) as shown:
        with shown.phase("discover") as phase:
            discovery = discover(Path(directory), only=only)
            phase.describe(discovery.describe())
        options = LoadOptions(jobs=jobs, scheduler=scheduler, cache=cache)
        return load_discovered(discovery, options, shown)


def load_discovered(
    discovery: Discovery,
    options: LoadOptions,
    progress: bool | Progress = False,
    *,
    store: DirectoryCache | None = None,
) -> DumpSet:
    """The dump set of an incident already listed (``frtrace.incident.discover``), loaded as
    ``options`` say. Each file's result is merged into the tables as it arrives (in file
    order) and then dropped, so the parsed files and the merged tables are never all in
    memory at once. ``store``: the directory's cache entry where a caller has it already (the
    diagnosis cache on a miss), so the files are not fingerprinted again."""
    directory = discovery.directory
    with owned(progress) as shown:
        if not (options.cache and directory.is_dir() and not cache_disabled()):  # (archives)
            store = None
        elif store is None:
            store = DirectoryCache(cache_root(), directory, discovery.candidates)
        if store is not None:
            started = time.monotonic()
            cached = store.load()
            if cached is not None:
                said = f"the tables of {len(discovery.candidates):,} files from the cache"
                shown.record("load", said, started)
                return one_attempt(
                    merge_recorders(_from_tables(directory, cached, discovery)), discovery
                )
        # (the executor counts the files in this phase; the tables are assembled and stored)
        with shown.phase("load", total=len(discovery.candidates)):
            dumps, written, cut = _read(directory, discovery, options, shown, store)
            give_back_memory()
            if store is not None and not cut:  # (a cut history's tables are not whole)
                loaded = {name: getattr(dumps, name) for name in TABLES}
                if options.background:
                    store.save_in_background(loaded, written)
                else:
                    store.save(loaded, written)
        return one_attempt(merge_recorders(dumps), discovery)


def _read(
    directory: Path,
    discovery: Discovery,
    options: LoadOptions,
    shown: Progress,
    store: DirectoryCache | None,
) -> tuple[DumpSet, dict[str, int], bool]:
    """Every file read and assembled into one DumpSet; the tables written where they stay
    (name -> bytes); whether a cluster cut the history (``DumpSet.window``)."""
    assembler: _Assembler | None = None
    taken: list[Fingerprint | None] | None = None
    try:
        meanwhile = options.meanwhile
        with open_executor(options.scheduler, jobs=options.jobs, progress=shown) as executor:
            # (a cluster that cuts the history sends a few entries a dump: no spill)
            cuts = isinstance(executor, FuturesExecutor) and executor.cuts(discovery.candidates)
            assembler = _Assembler(directory, discovery.candidates, may_spill=not cuts)
            # each dump's fingerprint for the cache: taken by the worker that reads it, where
            # none was taken to compare with a stored entry (else here, before any is read)
            if store is not None and not store.fingerprinted:
                if isinstance(executor, LocalProcesses):
                    taken = [None] * len(discovery.candidates)
                else:
                    store.fingerprint_now()
            if isinstance(executor, LocalProcesses):
                executor = dataclasses.replace(
                    executor, ship_to=assembler.spill_dir, meanwhile=meanwhile, fingerprints=taken
                )
            elif meanwhile is not None:
                meanwhile()
            executor.parse(discovery.candidates, assembler.add)
            window = getattr(executor, "window", None)
        if store is not None and taken is not None:
            store.taken(taken)
        if window is not None:  # (the tables lack the settled history: not cached)
            store = None
        # a large set's entries written once, where they stay: the cache's file
        at = store.prepare("entries") if store is not None and assembler.gather else None
        dumps = assembler.finish(discovery.skipped, discovery, entries_at=at)
    except BaseException:  # (the workers' files hold the dumps' contents: removed now)
        if assembler is not None and assembler.spill_dir is not None:
            spill.remove_spill_directory(assembler.spill_dir)
        raise
    if window is not None:
        dumps = dataclasses.replace(dumps, window=window)
    return dumps, assembler.written, window is not None


def _from_tables(directory: Path, tables: dict[str, pa.Table], discovery: Discovery) -> DumpSet:
    """A DumpSet from its stored tables (its problems, after the discovery's, read back)."""
    files, stacks = tables["files"], tables["stacks"]
    problems = list(discovery.problems)
    for row in files.select(["rank", "path", "loaded", "error", "problems"]).to_pylist():
        if not row["loaded"]:
            problems.append(
                LoadProblem(rank=row["rank"], path=row["path"], message=row["error"], fatal=True)
            )
            continue
        problems.extend(
            LoadProblem(
                rank=row["rank"], path=row["path"], message=f"{row['path']}: {p}", fatal=False
            )
            for p in row["problems"] or ()
        )
    frames = {
        sid: tuple((f["name"], f["filename"], f["line"]) for f in fs)
        for sid, fs in zip(
            stacks.column("stack_id").to_pylist(), stacks.column("frames").to_pylist(), strict=True
        )
    }
    return DumpSet(
        directory=directory,
        entries=tables["entries"],
        stacks=stacks,
        groups=tables["groups"],
        pg_status=tables["pg_status"],
        files=files,
        world=infer_world_size(files, tables["groups"]),
        problems=tuple(problems),
        skipped=discovery.skipped,
        side_files=discovery.side_files,
        _frames=frames,
    )


def build_dump_set(
    directory: Path,
    candidates: Sequence[Candidate],
    results: Sequence[ParsedDump | DumpFormatError],
    skipped: Iterable[SkippedFile] = (),
) -> DumpSet:
    """Assemble the tables from per-file results (in the candidates' order)."""
    assembler = _Assembler(directory, candidates)
    for index, result in enumerate(results):
        assembler.add(index, result)
    return assembler.finish(skipped)


class _Assembler:
    """Merges per-file results, in file order, into the tables of one DumpSet.

    Each rank's batch arrives with its own small dictionaries (its thread id, its groups...)
    and its own stack ids. Both are mapped to ids shared by every rank as the batch arrives;
    the batch is then dropped. ``finish`` puts each column in one chunk with one dictionary:
    Arrow's own unification would leave every chunk holding a copy of the merged dictionary
    (thread ids x ranks grows with the square of the job) and cannot unify dictionaries of
    lists (sizes, dtypes) at all. Memory stays linear in the number of entries.
    """

    def __init__(
        self, directory: Path, candidates: Sequence[Candidate], *, may_spill: bool = True
    ) -> None:
        self.directory = directory
        self.candidates = candidates
        self.side = SideRows()  # the files, groups and pg_status rows, and the problems
        self.interned: dict[Stack, int] = {}
        # A large set's columns are gathered, at the end, from the files the workers wrote
        # them to (frtrace.load.handover.shipped), into files of their own
        # (frtrace.load.handover.spill)
        total = sum(c.size_bytes for c in candidates)
        large = may_spill and total >= spill.spill_min_bytes()
        where = spill_directory(cache_root()) if large else None
        self.spill_dir = where
        self.gather = Gather(schema.ENTRIES, where) if where is not None else None
        self.writer: ColumnWriter | None = None  # for the results read here, in gather mode
        self.columns = EntryColumns()
        self.stack_column = schema.ENTRIES.get_field_index("stack_id")
        # tables written where they stay (the cache's files): name -> bytes
        self.written: dict[str, int] = {}

    def add(self, index: int, result: ParsedDump | ShippedDump | Bundle | DumpFormatError) -> None:
        """Merge the result of ``candidates[index]`` (a bundle: of the ``count`` from it);
        call in index order."""
        if isinstance(result, DumpFormatError):
            self.side.add_failed(self.candidates[index], str(result))
            return
        if isinstance(result, Bundle):  # (a cluster's cut history: never gathered)
            assert self.gather is None, "a bundle where the entries are gathered"
            self.side.add_part(result.rows, result.lists)
            if result.entries.num_rows:
                self.columns.add(remap_stacks(result.entries, result.stacks, self.interned))
            return
        if self.gather is not None:
            self._gather(self.gather, result)
        elif isinstance(result, ParsedDump) and result.entries.num_rows:
            self.columns.add(remap_stacks(result.entries, result.stacks, self.interned))
        self.side.add_dump(result)

    def _entries_file(self, gather: Gather, at: Path | None) -> pa.Table | None:
        """The entries written as an Arrow IPC file (at ``at``, else in the spill directory,
        unlinked once mapped) and mapped from it; None where that cannot be (the columns are
        then built one by one)."""
        assert self.spill_dir is not None
        path = at if at is not None else self.spill_dir / "entries.arrow"
        values = {
            i: self.columns.coded[i].dictionary(spec.type)
            for i, spec in enumerate(schema.ENTRIES)
            if i in self.columns.coded
        }
        try:
            made = gather.table(path, values)
        except OSError:  # (the disk is full, say)
            return None
        if made is None:
            return None
        entries, size = made
        if at is None:
            with contextlib.suppress(OSError):
                path.unlink()  # (the mapping keeps it)
        else:
            self.written["entries"] = size
        return entries

    def _gather(self, gather: Gather, result: ParsedDump | ShippedDump) -> None:
        """Note where a dump's columns are (written here first where a worker did not) and
        how its dictionary codes and stack ids map to the shared ones."""
        kept = None
        if isinstance(result, ParsedDump):
            assert self.spill_dir is not None
            parsed = result
            try:
                if self.writer is None:
                    self.writer = ColumnWriter(self.spill_dir, "parent.columns")
                result = self.writer.ship(parsed)
            except OSError:  # (disk full, say): kept in memory, in the same layout
                kept = parsed.entries
        remaps = {
            i: merged.remap(local_dictionary(kept, i, result))
            for i, merged in self.columns.coded.items()
        }
        if result.stacks:
            remaps[self.stack_column] = np.fromiter(
                (self.interned.setdefault(s, len(self.interned)) for s in result.stacks),
                dtype=np.int32,
                count=len(result.stacks),
            )
        if kept is not None:
            gather.keep(kept, remaps)
        else:
            assert isinstance(result, ShippedDump)
            gather.add(result.columns, remaps)

    def finish(
        self,
        skipped: Iterable[SkippedFile] = (),
        of: Discovery | None = None,
        entries_at: Path | None = None,
    ) -> DumpSet:
        """The DumpSet. A large set's entries are written as an Arrow IPC file and mapped
        from it: at ``entries_at`` (the cache's file, its size then in ``written``), else in
        the spill directory."""
        if not self.side.loaded:
            if self.spill_dir is not None:
                spill.remove_spill_directory(self.spill_dir)
            problems = self.side.problems
            first = problems[0].message if problems else "no files"
            raise NoReadableDumps(
                f"{self.directory}: none of the {len(self.candidates)} dump files could be "
                f"read (first: {first})"
            )
        columns: list[pa.Array] = []
        entries = None
        if self.gather is not None:
            entries = self._entries_file(self.gather, entries_at)
        gathered = self.gather.columns() if self.gather is not None and not entries else None
        for i, spec in enumerate(schema.ENTRIES if entries is None else ()):
            # Each column's chunks are freed once it is joined. They came from Python's
            # allocator and the joined column from Arrow's, which can reuse that memory only
            # once it is given back to the OS: the peak is then the tables plus one column.
            if gathered is not None:
                column = gathered[i]
                if i in self.columns.coded:
                    values = self.columns.coded.pop(i).dictionary(spec.type)
                    column = pa.DictionaryArray.from_arrays(column, values, safe=False)
                columns.append(column)
                continue
            columns.append(self.columns.column(i))
            give_back_memory()
        if self.gather is not None:
            self.gather.close()
        if self.writer is not None:
            self.writer.close()
        if self.spill_dir is not None:  # (its files are unlinked once mapped)
            spill.remove_spill_directory(self.spill_dir, background=True)
        if entries is None:
            entries = pa.Table.from_arrays(columns, schema=schema.ENTRIES)
        frames = {sid: stack for stack, sid in self.interned.items()}
        stacks = pa.Table.from_pylist(
            [
                {
                    "stack_id": sid,
                    "frames": [{"name": n, "filename": f, "line": ln} for n, f, ln in frames[sid]],
                }
                for sid in sorted(frames)
            ],
            schema=schema.STACKS,
        )
        files, groups, pg_status = self.side.tables()
        return DumpSet(
            directory=self.directory,
            entries=entries,
            stacks=stacks,
            groups=groups,
            pg_status=pg_status,
            files=files,
            world=infer_world_size(files, groups),
            problems=(*(of.problems if of else ()), *self.side.problems),
            skipped=tuple(skipped),
            side_files=of.side_files if of else None,
            _frames=frames,
        )


def infer_world_size(files: pa.Table, groups: pa.Table) -> WorldSize:
    """The job's world size from the default group's recorded members, else from file names."""
    file_ranks = files.column("rank").to_pylist()
    highest = max(file_ranks) + 1 if file_ranks else 0
    rows = recorded_groups(groups)
    # (each distinct member list once: every rank records the default group's thousands)
    lists = {id(r.ranks): r.ranks for r in rows if r.ranks}
    recorded = max((max(ranks) + 1 for ranks in lists.values()), default=0)
    size = max(highest, recorded)
    for row in rows:
        if row.trusted and row.desc == "default_pg" and row.ranks:
            size = max(size, len(row.ranks))
            return WorldSize(size=size, source="pg_config of the default group", certain=True)
    source = "highest rank among the file names and recorded groups"
    return WorldSize(size=size, source=source, certain=False)
