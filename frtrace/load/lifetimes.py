"""The ranks of one process lifetime among a loaded dump set: stale dumps set aside.

A rerun into the same folder, or ``torchrun --max-restarts`` writing every attempt's dumps to
one fixed folder, leaves files of several process lifetimes side by side. After loading, each
rank's entries span a time interval (its oldest entry's creation to the newest time its file
records). Ranks whose intervals chain together (gaps of at most ``GAP_NS``) are one lifetime;
a rank whose whole file lies before the newest lifetime's first entry by more than ``GAP_NS``,
*and* whose file was written before that first entry (its modification time: a copy's new
time, or an archive member's unknown one, keeps it in) or the logs' ``attempt_<N>`` folders
say the job restarted, is from an earlier attempt or run, unless it recorded the newest's
collectives within ``MAX_SKEW_NS`` (another host's clock) and none they never reached. It
is a rank **without a dump of this attempt**: its file (and the recorder's stack sidecar
written with it) is set aside with a warning, never evidence; its rank stays in the job, where
the attempt's own world (its dumps' default group) holds it. A dump that records no op and no
group, of a rank the newest lifetime's groups hold, is a process that died in init: set aside
too, and where it was dumped after that lifetime, an attempt of its own that died in init,
never the one analysed by default (``frtrace.load.inits``). ``--attempt N`` keeps another
lifetime instead, numbered from the newest, which is the attempt the logs' newest
``attempt_<N>`` folder names (``frtrace.incident.attempts``), whichever attempt is asked for;
an attempt of those folders whose dumps were all overwritten is its logs alone (every rank set
aside). The set kept carries the folder's other attempts (``DumpSet.restarts``): the report's
history analyses each (``frtrace.load.restarts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from frtrace.base.ranges import format_ranks
from frtrace.errors import NoSuchAttempt
from frtrace.incident.attempts import attempt_numbers
from frtrace.incident.problems import LoadProblem
from frtrace.load import inits as own  # (an attempt's own: its init deaths, world, ranks)
from frtrace.load.dumpset import DumpSet, Restarts

if TYPE_CHECKING:
    import pyarrow as pa

    from frtrace.incident.discover import Discovery

__all__ = [
    "GAP_NS",
    "MAX_SKEW_NS",
    "Lifetime",
    "lifetimes",
    "one_attempt",
]

# Two process lifetimes of one job are told apart only across a gap this long between the
# older one's newest entry and the newer one's first: more than clocks of one cluster differ
# (NTP keeps them within milliseconds), less than any restart takes (a hang is noticed after
# the collective timeout, minutes by default).
GAP_NS = 5_000_000_000
# Two hosts' clocks without NTP differ by minutes (FORMAT.md, "Clocks"): a rank that recorded
# a collective the newest lifetime's did, created within this of theirs, is of their run.
MAX_SKEW_NS = 1_800_000_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Lifetime:
    """One process lifetime of the job among the loaded dumps: its number (0 the oldest), its
    ranks, and the times its entries span (ns); or an attempt that died in init (its ranks'
    dumps record no op: ``frtrace.load.inits``)."""

    number: int
    ranks: tuple[int, ...]
    first_ns: int
    last_ns: int
    died_in_init: bool = False


def _spans(dumps: DumpSet) -> dict[int, tuple[int, int]]:
    """Each loaded rank's (first entry's creation, newest time recorded), ns: the least
    creation and the greatest of the three times of its entries, nulls aside, taken over each
    run of the rank's rows (the rows lie in file order: a rank's rows are one run, or a few).
    Arrow's group-by took 0.11 s of a first run at 1,024 ranks, 0.02 s of it importing its
    query engine."""
    import numpy as np
    import pyarrow.compute as pc

    entries = dumps.entries
    if entries.num_rows == 0:
        return {}
    rank = entries.column("rank").to_numpy()
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    ends = np.r_[starts[1:], len(rank)]

    def per_run(name: str, reduce: np.ufunc, unset: int) -> np.ndarray:
        column = entries.column(name)
        if column.null_count == 0:  # (the column as it is: no copy)
            return reduce.reduceat(column.to_numpy(), starts)
        # each run's slice reduced by Arrow, nulls skipped: filling the nulls first made a
        # copy of the column (16 MB of new memory at 1,024 ranks, ~30 ms)
        kind = pc.min if reduce is np.minimum else pc.max
        found = [kind(column.slice(a, b - a)).as_py() for a, b in zip(starts, ends, strict=True)]
        return np.array([unset if v is None else v for v in found], dtype=np.int64)

    lowest, highest = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    first = per_run("time_created_ns", np.minimum, lowest)
    newest = per_run("time_created_ns", np.maximum, highest)
    for name in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        newest = np.maximum(newest, per_run(name, np.maximum, highest))
    out: dict[int, tuple[int, int]] = {}
    for r, lo, hi in zip(rank[starts].tolist(), first.tolist(), newest.tolist(), strict=True):
        if r in out:
            lo, hi = min(lo, out[r][0]), max(hi, out[r][1])
        out[r] = (lo, hi)
    # (a rank without a creation time after 0 has no span)
    return {r: (lo, hi) for r, (lo, hi) in out.items() if 0 < lo < lowest and hi > highest}


def lifetimes(spans: dict[int, tuple[int, int]], gap_ns: int = GAP_NS) -> list[Lifetime]:
    """The ranks' intervals chained where they overlap or lie within ``gap_ns`` of each
    other, oldest first: one ``Lifetime`` per chain."""
    chains: list[tuple[int, int, list[int]]] = []
    for rank, (first, last) in sorted(spans.items(), key=lambda kv: (kv[1][0], kv[0])):
        if chains and first <= chains[-1][1] + gap_ns:
            start, end, ranks = chains[-1]
            ranks.append(rank)  # (in place: a copy each time is quadratic in the ranks)
            chains[-1] = (start, max(end, last), ranks)
        else:
            chains.append((first, last, [rank]))
    return [
        Lifetime(number=i, ranks=tuple(sorted(ranks)), first_ns=start, last_ns=end)
        for i, (start, end, ranks) in enumerate(chains)
    ]


def _mtimes(dumps: DumpSet) -> dict[int, float]:
    out: dict[int, float] = {}
    for rank, path in zip(
        dumps.files.column("rank").to_pylist(),
        dumps.files.column("path").to_pylist(),
        strict=True,
    ):
        try:
            out[int(rank)] = Path(path).stat().st_mtime
        except (OSError, ValueError):
            continue  # an archive member, a file gone: its time is unknown
    return out


def one_attempt(dumps: DumpSet, discovery: Discovery) -> DumpSet:
    """The dump set of one process lifetime (the newest with ops, or the discovery's
    ``--attempt``; see the module docstring): the other lifetimes' files set aside with a
    warning each, their ranks left in the job without a dump. Lifetimes are numbered as the
    launcher numbered its attempts where the logs' ``attempt_<N>`` folders say (the newest is
    the newest folder's); an attempt of those folders that left no dump is its logs alone
    (every rank set aside), and one whose dumps record no op died in init
    (``frtrace.load.inits``): its own attempt, never the one analysed by default. Where the
    folder holds other attempts, the set carries them (``DumpSet.restarts``)."""
    attempt, newest_folder = discovery.wanted, discovery.attempt
    restarted = newest_folder is not None and newest_folder >= 1
    spans = _spans(dumps)
    chains, proofs = _proven(dumps, lifetimes(spans), restarted)
    firsts = {r: spans[r][0] for r in chains[-1].ranks} if chains else {}
    inits = own.init_deaths(dumps, firsts, discovery, GAP_NS)
    numbered, folders = _numbered(chains, inits, newest_folder)
    logs_only = set(attempt_numbers(discovery.all_side_files)) if folders else set()
    logs_only -= {c.number for c in numbered}
    chosen = _chosen(dumps, numbered, logs_only, attempt)
    if chosen is None:
        return own.said_world(dumps)
    others = tuple(sorted(({c.number for c in numbered} | logs_only) - {chosen.number}))
    restarts = None
    if others:
        restarts = Restarts(
            attempt=chosen.number,
            others=others,
            whole=dumps,
            lifetimes=tuple((c.number, c.ranks) for c in numbered),
            side_files=discovery.all_side_files or tuple(dumps.side_files or ()),
            folders=folders,
            inits=tuple(c.number for c in numbered if c.died_in_init),
        )
    if len(numbered) == 1 and chosen is numbered[0] and not inits.aside:
        return replace(own.said_world(dumps), restarts=restarts)
    back = numbered[-1].number - chosen.number if attempt is None else 0
    folder = None if newest_folder is None else newest_folder - back
    if back and folder in attempt_numbers(discovery.all_side_files):
        dumps = own.with_side_files_of(dumps, discovery, folder)
    keep = set(chosen.ranks)
    if not chosen.died_in_init:
        keep |= set(dumps.loaded_ranks) - set(spans) - set(inits.aside)
    aside = _aside(dumps, numbered, chosen, spans, proofs, inits, keep)
    return replace(own.keep_ranks(dumps, keep, aside), restarts=restarts)


def _numbered(
    chains: list[Lifetime], inits: own.Inits, newest_folder: int | None
) -> tuple[list[Lifetime], bool]:
    """The lifetimes with ops, then a later attempt that died in init (``inits.later``),
    numbered as the newest attempt folder says where it can be (then True), else from 0."""
    lives = list(chains)
    if inits.later:
        lives.append(
            Lifetime(number=len(lives), ranks=inits.later, first_ns=0, last_ns=0, died_in_init=True)
        )
    offset = 0 if newest_folder is None else newest_folder - (len(lives) - 1)
    folders = bool(lives) and newest_folder is not None and offset >= 0
    return [replace(c, number=c.number + max(0, offset)) for c in lives], folders


def _chosen(
    dumps: DumpSet, numbered: list[Lifetime], logs_only: set[int], attempt: int | None
) -> Lifetime | None:
    """The lifetime analysed: ``attempt``'s, else the newest whose ranks ran ops."""
    if attempt is None:
        ran = [c for c in numbered if not c.died_in_init]
        return (ran or numbered)[-1] if numbered else None
    chosen = next((c for c in numbered if c.number == attempt), None)
    if chosen is None and attempt in logs_only:
        chosen = Lifetime(number=attempt, ranks=(), first_ns=0, last_ns=0)
    if chosen is None:
        said = ", ".join(f"attempt {c.number} (ranks {_ranks(c.ranks)})" for c in numbered)
        raise NoSuchAttempt(
            f"{dumps.directory}: --attempt {attempt}: no dump of that attempt is left "
            f"(the dumps are of {said or 'no attempt that can be told'}); its logs, if "
            "any, are in its attempt folder."
        )
    return chosen


def _aside(
    dumps: DumpSet,
    numbered: list[Lifetime],
    chosen: Lifetime,
    spans: dict[int, tuple[int, int]],
    proofs: dict[int, str],
    inits: own.Inits,
    keep: set[int],
) -> tuple[LoadProblem, ...]:
    """A line per dump set aside (its rank left without a dump of the chosen attempt, or
    outside its world), and one saying a later attempt died in init where it is not chosen."""
    world = own.own_world(dumps, keep) if keep else dumps.world
    number = {r: c.number for c in numbered for r in c.ranks}
    out = []
    for r in sorted(set(dumps.loaded_ranks) - keep):
        if r in inits.aside:
            why = f"not of attempt {chosen.number}: {inits.aside[r]}"
        elif r in spans:
            why = "of " + _why(
                number.get(r, -1) < chosen.number, spans[r], chosen, proofs.get(r, "")
            )
        else:
            why = f"not of attempt {chosen.number}, which recorded ops"
        for path in own.paths_of(dumps, r):
            said = f"{path}: rank {r}'s dump is {why}: set aside; " + own.not_of(
                r, chosen.number, world
            )
            out.append(LoadProblem(rank=r, path=path, message=said, fatal=False))
    for c in numbered:
        if c.died_in_init and c is not chosen and c.number > chosen.number:
            said = (
                f"attempt {c.number} died in init_process_group (rank{'s' * (len(c.ranks) > 1)} "
                f"{_ranks(c.ranks)} recorded no op): attempt {chosen.number}, the newest whose "
                "ranks ran ops, "
                f"is analysed (--attempt {c.number} analyses the other)"
            )
            out.append(LoadProblem(rank=-1, path=str(dumps.directory), message=said, fatal=False))
    return tuple(out)


def _proven(
    dumps: DumpSet, chains: list[Lifetime], restarted: bool
) -> tuple[list[Lifetime], dict[int, str]]:
    """The lifetimes with each one not shown to be older merged into the next, and how each
    older lifetime's rank was shown to be one: where the logs' attempt_<N> folders say the job
    restarted, the entries' gap is proof enough (a copied folder's new file times do not hide
    a restart); else a rank whose file was written before the newest lifetime began, or whose
    entries run past the first op the newest lifetime's ranks recorded in a group
    (``_ahead``: not one run, whatever the file times). A copy or an archive member, whose own
    time is new or unknown, with no such entries, stays in."""
    mtimes = _mtimes(dumps) if len(chains) > 1 and not restarted else {}  # (one stat a file)
    proofs: dict[int, str] = {}
    while len(chains) > 1:
        newest = chains[-1]
        older = [r for c in chains[:-1] for r in c.ranks]
        if restarted:
            proofs = dict.fromkeys(older, "the logs show a restart")
            break
        ahead = _ahead(dumps, newest, older)
        past, shared = _one_run(dumps, newest, older)
        proofs = {  # (the entries' proof first: it holds whatever the file times)
            r: past.get(r)
            or ""  # (the same collectives as the newest's: one run, another host's clock)
            if r in shared
            else ahead.get(r)
            or (
                "the file was written before it"
                if mtimes.get(r, 1e30) * 1e9 < newest.first_ns
                else ""
            )
            for r in older
        }
        if all(proofs.values()):
            break
        merged = chains[-2]
        chains[-2:] = [
            Lifetime(
                number=merged.number,
                ranks=tuple(sorted((*merged.ranks, *newest.ranks))),
                first_ns=merged.first_ns,
                last_ns=max(merged.last_ns, newest.last_ns),
            )
        ]
    return chains, proofs


def _ahead(dumps: DumpSet, newest: Lifetime, older: Sequence[int]) -> dict[int, str]:
    """The ranks of ``older`` (whose entries all end more than ``GAP_NS`` before the newest
    lifetime's first) that recorded an op of a group past the first op the newest lifetime's
    ranks recorded in it (the same group name), and how it reads. In one run a rank cannot
    have gone past op #n of a group before the group's other members even reached #n (a
    collective completes only once every member joined it); only ops issued ``async_op`` and
    never waited on could, and a rank that left a whole run's ops behind is the usual cause:
    a file of an earlier run, whatever its file time (a checkout's or a copy's are new)."""
    import pyarrow.compute as pc

    table = dumps.entries.select(["rank", "group_name", "collective_seq"])
    table = table.filter(pc.is_valid(table.column("collective_seq")))
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(["rank", "group_name"]).aggregate(
        [("collective_seq", "min"), ("collective_seq", "max")]
    )
    rows = list(
        zip(
            grouped.column("rank").to_pylist(),
            grouped.column("group_name").to_pylist(),
            grouped.column("collective_seq_min").to_pylist(),
            grouped.column("collective_seq_max").to_pylist(),
            strict=True,
        )
    )
    first: dict[str, int] = {}
    for rank, group, low, _ in rows:
        if rank in newest.ranks and group is not None:
            first[group] = min(first.get(group, low), low)
    out: dict[int, str] = {}
    for rank, group, _, high in sorted(rows, key=lambda row: (row[0], str(row[1]))):
        if rank in older and rank not in out and group in first and high > first[group]:
            out[rank] = (
                f"its ops of pg {group} run to #{high}, past #{first[group]} where the "
                "others' begin: not one run"
            )
    return out


def _one_run(
    dumps: DumpSet, newest: Lifetime, older: Sequence[int]
) -> tuple[dict[int, str], set[int]]:
    """What the entries say of ``older``'s ranks against the newest lifetime's, clocks aside:
    the ranks shown not to be of one moment with them (a collective of a group done, and
    followed by a later op of it, or completed, where one of the newest's ranks that
    recorded the group stopped short of it: a collective is done only once every member
    joined it, and a member's buffer drops its oldest ops first), and how it reads; and the
    ranks that recorded a collective the newest's ranks recorded too (the same group,
    number, op and sizes), created within ``MAX_SKEW_NS`` of theirs: the same collective,
    whatever the hosts' clocks say (a later run's op of that number is created as far apart
    as the runs are)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["group_name", "collective_seq", "profiling_name", "input_sig", "output_sig"]
    names = ["rank", *keys, "time_created_ns", "time_discovered_completed_ns", "state"]
    t = dumps.entries.select([*names, "retired", "is_p2p"])
    valid = pc.and_(pc.is_valid(t["collective_seq"]), pc.is_valid(t["time_created_ns"]))
    t = t.filter(pc.and_(valid, pc.invert(pc.fill_null(t["is_p2p"], False))))
    t = t.set_column(1, "group_name", pc.cast(t["group_name"], pa.string()))
    t = t.set_column(3, "profiling_name", pc.cast(t["profiling_name"], pa.string()))
    rank = pc.cast(t["rank"], pa.int32())
    mine = t.filter(pc.is_in(rank, value_set=pa.array(sorted(older), pa.int32())))
    theirs = t.filter(pc.is_in(rank, value_set=pa.array(newest.ranks, pa.int32())))
    if mine.num_rows == 0 or theirs.num_rows == 0:
        return {}, set()
    their_ops = theirs.group_by(keys).aggregate(
        [("time_created_ns", "min"), ("time_created_ns", "max")]
    )
    both = mine.select(["rank", *keys, "time_created_ns"]).join(their_ops, keys=keys)
    near = pc.and_(
        pc.greater_equal(
            both["time_created_ns"], pc.subtract(both["time_created_ns_min"], MAX_SKEW_NS)
        ),
        pc.less_equal(both["time_created_ns"], pc.add(both["time_created_ns_max"], MAX_SKEW_NS)),
    )
    shared = set(both.filter(near).column("rank").to_pylist())
    lowest: dict[str, tuple[int, int]] = {}  # group -> (the least newest op, its rank)
    for r, g, top in sorted(_per_group(theirs, None), key=lambda x: (x[2], x[0])):
        lowest.setdefault(g, (top, r))
    tops = mine.group_by(["rank", "group_name"]).aggregate([("collective_seq", "max")])
    mine = mine.join(tops, keys=["rank", "group_name"])  # (each row with its rank's newest)
    done = pc.or_(
        pc.or_(
            pc.is_valid(mine["time_discovered_completed_ns"]),
            pc.equal(pc.fill_null(pc.cast(mine["state"], pa.string()), ""), "completed"),
        ),
        pc.and_(
            pc.fill_null(mine["retired"], False),
            pc.less(mine["collective_seq"], mine["collective_seq_max"]),
        ),
    )
    past: dict[int, str] = {}
    for r, g, n in sorted(_per_group(mine.select(names[:3]), done)):
        if g in lowest and n is not None and n > lowest[g][0] and r not in past:
            past[r] = (
                f"its op #{n} of pg {g} is done, which rank {lowest[g][1]}'s ops stop short of "
                f"(#{lowest[g][0]}): not one run"
            )
    return past, shared


def _per_group(table: pa.Table, where: pa.ChunkedArray | None) -> list[tuple[int, str, int]]:
    """(rank, group, its greatest op number over the rows ``where`` holds) of each group."""
    table = table if where is None else table.filter(where)
    g = table.group_by(["rank", "group_name"]).aggregate([("collective_seq", "max")])
    return list(
        zip(
            *(g.column(c).to_pylist() for c in ("rank", "group_name", "collective_seq_max")),
            strict=True,
        )
    )


def _why(earlier: bool, span: tuple[int, int], chosen: Lifetime, proof: str) -> str:
    """Why a rank's dump is of another attempt: its entries against the chosen attempt's."""
    if not chosen.ranks or chosen.died_in_init:  # (its own logs and dumps are analysed)
        which = "an earlier" if earlier else "a later"
        left = "died in init" if chosen.ranks else "left no dump"
        return f"{which} attempt (attempt {chosen.number} {left})"
    if not earlier:
        gap = _seconds(span[0] - chosen.last_ns)
        return f"a later attempt or run (its entries begin {gap} after attempt {chosen.number}'s)"
    gap = _seconds(chosen.first_ns - span[1])
    return (
        f"an earlier attempt or run (its entries end {gap} before attempt {chosen.number}'s "
        f"first, and {proof or 'the logs show a restart'})"
    )


def _seconds(ns: int) -> str:
    s = abs(ns) / 1e9
    return f"{s:,.0f} s" if s >= 10 else f"{s:.1f} s"


def _ranks(ranks: Sequence[int]) -> str:
    return format_ranks(list(ranks))
