"""An attempt's own dump set: the dumps of processes that never got through
``init_process_group`` sorted to their own attempt, and each attempt's world from its own dumps.

A restarted job's attempt can die in ``init_process_group`` (a rendezvous that times out,
Gloo's ``connectFullMesh ... Connection refused`` on an address an earlier attempt left in the
job's store). Its ranks that dump on the exception (``frtrace.recorder``) leave a file with no
op and no process group, beside the earlier attempt's dumps of the ranks it did not overwrite.
Such a dump (``group_less``: no entry, no group recorded, in a format that records groups) is
never evidence of a lifetime whose ranks completed a collective (``init_deaths``):

* **Not of that lifetime**, whatever the clocks: a collective completes only once every
  member joined it, so that lifetime's job was through ``init_process_group`` (Gloo's connects
  every rank of the world), and each of its processes recorded the groups it made; a rank
  outside its world is not of it at all. Only a lifetime whose ranks completed nothing (stuck
  in their first collective, NCCL's lazy init) keeps such a dump: its rank may be the one
  that never got through init.
* **Nor of a lifetime that began after it**: dumped (its recorder sidecar's time, or
  ``collect``'s manifest's) before that lifetime's first op on the same host, one clock, by
  more than a restart's gap; where no sidecar says, its file written before that first op
  (as ``frtrace.load.lifetimes`` reads file times: a copy's new time keeps it in).
* **Which attempt**: its dump time against the lifetime's ranks' on the same host: after all
  of them, a later attempt that died in init; before their first op, an earlier one; else
  unknown. Set aside in every case.

A later one is an attempt of its own, with no op: the newest lifetime with ops is analysed
(``frtrace.load.lifetimes``; ``--attempt N`` picks the other), and its dumps are never
another attempt's. An attempt's world is its own (``keep_ranks``): worked out from its own
dumps' groups where they record the default group, else the folder's.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from frtrace.base.ranges import format_ranks
from frtrace.incident.attempts import dump_records, side_files_of_attempt
from frtrace.incident.layout import STACKS_PREFIX, SideFile
from frtrace.incident.problems import LoadProblem

if TYPE_CHECKING:
    import pyarrow as pa

    from frtrace.incident.discover import Discovery
    from frtrace.load.dumpset import DumpSet, WorldSize

__all__ = [
    "Inits",
    "group_less",
    "init_deaths",
    "keep_ranks",
    "not_of",
    "own_world",
    "paths_of",
    "recorder_stacks_of",
    "said_world",
    "with_side_files_of",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Inits:
    """The dumps of processes that never got through ``init_process_group``, shown not to be
    of the newest lifetime with ops: each rank's reason, and those dumped after it (a later
    attempt that died in init)."""

    aside: dict[int, str] = field(default_factory=dict)
    later: tuple[int, ...] = ()


def group_less(dumps: DumpSet) -> list[int]:
    """The loaded ranks whose dump records no op and no process group, in a format that
    records its groups (torch 2.3 and later: a torch 2.2 dump is a bare list of entries)."""
    files = dumps.files
    with_groups = set(dumps.groups.column("rank").to_pylist())
    rows = zip(
        files.column("rank").to_pylist(),
        files.column("loaded").to_pylist(),
        files.column("entry_count").to_pylist(),
        files.column("layout").to_pylist(),
        strict=True,
    )
    return sorted(
        r
        for r, loaded, count, layout in rows
        if loaded and not count and layout not in (None, "list") and r not in with_groups
    )


def init_deaths(dumps: DumpSet, firsts: dict[int, int], discovery: Discovery, gap_ns: int) -> Inits:
    """The group-less dumps that are not of the lifetime whose ranks' first entries were
    created at ``firsts`` (the newest with ops), why, and which of them were written after it
    (see the module docstring)."""
    found = group_less(dumps)
    if not firsts or not found:
        return Inits()
    ranks = tuple(sorted(firsts))
    times = _dump_times(discovery)
    began: dict[str, int] = {}  # host -> the lifetime's first op there
    dumped: dict[str, list[int]] = defaultdict(list)  # host -> its ranks' dump times
    for r in ranks:
        if r in times:
            host, at = times[r]
            began[host] = min(began.get(host, firsts[r]), firsts[r])
            dumped[host].append(at)
    ran = None  # (whether the lifetime completed an op: asked only where needed)
    aside, later = {}, []
    said = format_ranks(list(ranks))
    mtimes = _mtimes(dumps, found)
    for r in found:
        host, at = times.get(r, ("", 0))
        if host in began and at < began[host] - gap_ns:
            when = f"dumped before ranks {said}' first op on {host}: an earlier attempt"
        elif r not in times and mtimes.get(r, 1e30) * 1e9 < min(firsts.values()) - gap_ns:
            when = f"its file written before ranks {said}' first op: an earlier attempt"
        else:
            ran = _completed_ops(dumps, ranks) if ran is None else ran
            if not ran:
                continue  # (it may be the rank the lifetime's ranks wait on in init)
            if host in dumped and at > max(dumped[host]):
                later.append(r)
                when = f"dumped after ranks {said} on {host}: a later attempt"
            else:
                when = "of another attempt or run"
        aside[r] = (
            f"it records no op and no process group, while ranks {said} ran ops: a process "
            f"that never got through init_process_group, {when}"
        )
    return Inits(aside=aside, later=tuple(later))


def _mtimes(dumps: DumpSet, ranks: list[int]) -> dict[int, float]:
    """The modification times of ``ranks``' files (an archive member's, unknown: left out)."""
    out: dict[int, float] = {}
    wanted = set(ranks)
    for rank, path in zip(
        dumps.files.column("rank").to_pylist(), dumps.files.column("path").to_pylist(), strict=True
    ):
        if rank in wanted:
            try:
                out[rank] = Path(path).stat().st_mtime
            except (OSError, ValueError):
                continue
    return out


def _completed_ops(dumps: DumpSet, ranks: tuple[int, ...]) -> bool:
    """Whether a rank of ``ranks`` recorded an op done: completed, or retired and followed by
    a later one of its group (Gloo marks no completion), or a group's collectives completed
    short of its last enqueued one (``pg_status``: an onlyActive dump keeps no done entry); an
    op is done only once its peers joined it, so the job was through its init."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(ranks, pa.int32())
    status = dumps.pg_status
    status = status.filter(pc.is_in(pc.cast(status.column("rank"), pa.int32()), wanted))
    done, queued = status.column("last_completed"), status.column("last_enqueued")
    short = pc.and_(pc.greater(done, 0), pc.less(done, queued))
    if pc.any(pc.fill_null(short, False)).as_py():
        return True
    names = ["rank", "group_name", "collective_seq", "p2p_seq", "state", "retired"]
    t = dumps.entries.select([*names, "time_discovered_completed_ns"])
    t = t.filter(pc.is_in(pc.cast(t.column("rank"), pa.int32()), wanted))
    state = pc.fill_null(pc.cast(t.column("state"), pa.string()), "")
    completed = pc.or_(
        pc.is_valid(t.column("time_discovered_completed_ns")), pc.equal(state, "completed")
    )
    if t.num_rows == 0 or pc.any(completed).as_py():
        return bool(t.num_rows)
    t = t.filter(pc.fill_null(t.column("retired"), False))
    for seq in ("collective_seq", "p2p_seq"):
        part = t.filter(pc.is_valid(t.column(seq)))
        spread = part.group_by(["rank", "group_name"]).aggregate([(seq, "min"), (seq, "max")])
        if pc.any(pc.less(spread.column(f"{seq}_min"), spread.column(f"{seq}_max"))).as_py():
            return True
    return False


def _dump_times(discovery: Discovery) -> dict[int, tuple[str, int]]:
    """Each dumped rank's (host, dump time in ns) as the sidecars and the manifest in its
    dump's folder give them."""
    out: dict[int, tuple[str, int]] = {}
    folders: dict[str, list[int]] = defaultdict(list)
    for cand in discovery.candidates:
        folders[cand.relative.rpartition("/")[0]].append(cand.rank)
    for folder, ranks in folders.items():
        records = dump_records(folder, discovery.all_side_files)
        for r in ranks:
            if r in records:
                out[r] = (records[r].host, records[r].dumped_at_ns)
    return out


def with_side_files_of(dumps: DumpSet, discovery: Discovery, attempt: int) -> DumpSet:
    """``dumps`` with the side files of ``attempt``'s ``attempt_<N>`` folders instead of the
    newest's (and the lines that said which were set aside, said anew)."""
    every = discovery.all_side_files
    _, was, _ = side_files_of_attempt(every, None)
    kept, said, _ = side_files_of_attempt(every, attempt)
    problems = tuple(p for p in dumps.problems if p not in was)
    return replace(dumps, side_files=kept, problems=(*problems, *said))


def own_world(dumps: DumpSet, keep: set[int]) -> WorldSize:
    """The world of the attempt whose ranks are ``keep``: from their own dumps' groups where
    those record the default group, else the one world their recorder sidecars give (at least
    their highest rank's: a Gloo dump records no group's members), else from every dump's rank
    and groups but those set aside whose own world is said (another attempt's) or that died in
    init (no op, no group): a stale dump that says nothing of its world says the job had its
    rank, as the folder's world does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from frtrace.load.dumpset import WorldSize

    def of(ranks: set[int]) -> tuple[pa.Table, pa.Table]:
        wanted = pa.array(sorted(ranks), type=pa.int32())
        files, groups = dumps.files, dumps.groups
        mask = pc.is_in(pc.cast(files.column("rank"), pa.int32()), value_set=wanted)
        members = pc.is_in(pc.cast(groups.column("rank"), pa.int32()), value_set=wanted)
        return files.filter(mask), groups.filter(members)

    own = _world_of(*of(keep))
    if own.certain:
        return own
    said = _said_worlds(dumps)
    kept = {said.get(r) for r in keep}
    if len(kept) == 1 and (size := kept.pop()) is not None and size >= own.size:
        return WorldSize(size=size, source="the recorder's sidecars of its dumps", certain=True)
    aside = set(dumps.files.column("rank").to_pylist()) - keep
    known = {r for r in aside if said.get(r) is not None} | (_with_default_group(dumps) & aside)
    dead = set(group_less(dumps)) & aside
    if not known and not dead:
        return dumps.world
    return _world_of(*of(keep | (aside - known - dead)))


def said_world(dumps: DumpSet) -> DumpSet:
    """The set of one attempt with its world as its ranks' recorder sidecars say it, where
    its dumps do not record the default group's members (a Gloo dump: the highest rank, dead
    or frozen with no dump, is not counted out)."""
    if dumps.world.certain or not dumps.loaded_ranks:
        return dumps
    world = own_world(dumps, set(dumps.loaded_ranks))
    return dumps if world == dumps.world else replace(dumps, world=world)


def _world_of(files: pa.Table, groups: pa.Table) -> WorldSize:
    """The world the files and groups give, as ``frtrace.load.tables.infer_world_size``
    works it out (the default group's members, else the highest rank recorded or dumped)."""
    from frtrace.load.dumpset import WorldSize
    from frtrace.load.handover.members import recorded_groups

    ranks = files.column("rank").to_pylist()
    rows = recorded_groups(groups)
    lists = {id(g.ranks): g.ranks for g in rows if g.ranks}  # (each shared list once)
    size = max([r + 1 for r in ranks] + [max(m) + 1 for m in lists.values()] + [0])
    for g in rows:
        if g.trusted and g.desc == "default_pg" and g.ranks:
            size = max(size, len(g.ranks))
            return WorldSize(size=size, source="pg_config of the default group", certain=True)
    source = "highest rank among the file names and recorded groups"
    return WorldSize(size=size, source=source, certain=False)


def _said_worlds(dumps: DumpSet) -> dict[int, int | None]:
    """Each dumped rank's world as its recorder sidecar (or collect's manifest) in its dump's
    folder says it (each folder's read once)."""
    folders: dict[str, list[int]] = defaultdict(list)
    files = dumps.files
    for rank, path in zip(
        files.column("rank").to_pylist(), files.column("path").to_pylist(), strict=True
    ):
        folders[_shown(dumps.directory, path).rpartition("/")[0]].append(rank)
    out: dict[int, int | None] = {}
    for folder, ranks in folders.items():
        records = dump_records(folder, dumps.side_files or ())
        out |= {rank: None if (r := records.get(rank)) is None else r.world_size for rank in ranks}
    return out


def _with_default_group(dumps: DumpSet) -> set[int]:
    """The ranks whose dumps record their default group's members (their own world)."""
    from frtrace.load.handover.members import recorded_groups

    return {
        g.rank
        for g in recorded_groups(dumps.groups)
        if g.trusted and g.desc == "default_pg" and g.ranks
    }


def keep_ranks(dumps: DumpSet, keep: set[int], problems: tuple[LoadProblem, ...]) -> DumpSet:
    """The dump set with only ``keep``'s rows (its stacks and other files kept), its world
    its own (``own_world``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(sorted(keep), type=pa.int32())

    def only(table: pa.Table) -> pa.Table:
        if not keep:  # (an attempt that left no dump: no pass over a large set's columns)
            return table.slice(0, 0)
        mask = pc.is_in(pc.cast(table.column("rank"), pa.int32()), value_set=wanted)
        return table.filter(mask)

    aside = {r for r in dumps.loaded_ranks if r not in keep}
    side = dumps.side_files
    if side is not None:
        side = tuple(f for f in side if not recorder_stacks_of(f, aside))
    return replace(
        dumps,
        entries=only(dumps.entries),
        groups=only(dumps.groups),
        pg_status=only(dumps.pg_status),
        files=only(dumps.files),
        world=own_world(dumps, keep) if keep else dumps.world,
        problems=(*dumps.problems, *problems),
        side_files=side,
    )


_STACK_RANK = re.compile(r"(\d{1,7})(?:\.\w+)?$")


def recorder_stacks_of(f: SideFile, ranks: set[int]) -> bool:
    """Whether ``f`` is the recorder's stack sidecar of one of ``ranks`` (written with the
    dump set aside: ``stacks_rank_3.json``, in the same lifetime)."""
    name = PurePosixPath(f.relative).name
    if f.kind != "stacks" or not name.startswith(STACKS_PREFIX):
        return False
    m = _STACK_RANK.search(name)
    return m is not None and int(m[1]) in ranks


def not_of(rank: int, attempt: int, world: WorldSize) -> str:
    """What a rank whose dump was set aside is to ``attempt`` (of ``world``)."""
    if rank >= world.size:
        return f"rank {rank} is not of attempt {attempt} (its world: {world.size} ranks)"
    return f"rank {rank} has no dump of attempt {attempt}"


def paths_of(dumps: DumpSet, rank: int) -> list[str]:
    """The rank's files, as paths under the directory where they are below it."""
    return [
        _shown(dumps.directory, p)
        for r, p in zip(
            dumps.files.column("rank").to_pylist(),
            dumps.files.column("path").to_pylist(),
            strict=True,
        )
        if r == rank
    ]


def _shown(directory: Path, path: str) -> str:
    try:
        return Path(path).relative_to(directory).as_posix()
    except ValueError:
        return path
