"""Stuck or slow: two dump sets of one job, taken some seconds apart.

One snapshot cannot tell a rank that is stuck from one that is slow: both sit in the same
place when dumped. Two can. Per rank, it *moved* when its newest record id changed (it
recorded any op at all in between), or when the highest sequence number it entered or
finished in any group changed. Per group, the members that moved and those that did not;
for the job, ``hung`` when no rank moved, ``slow`` when some did (the others are named: they
are where to look), ``progressing`` when every rank moved (``detail.motion``; its words:
``report.compare``).
"""

from __future__ import annotations

from frtrace.detail.motion import GroupMotion, Motion, SnapshotComparison
from frtrace.load.dumpset import DumpSet
from frtrace.model import Report

__all__ = ["compare_snapshots"]


def _record_ids(dumps: DumpSet) -> dict[int, int | None]:
    files = dumps.files
    ranks = files.column("rank").to_pylist()
    ids = files.column("record_id_max").to_pylist()
    loaded = files.column("loaded").to_pylist()
    return {r: i for r, i, ok in zip(ranks, ids, loaded, strict=True) if ok}


_Seqs = tuple[int | None, int | None]  # (highest entered, highest finished)


def _progress(report: Report) -> dict[tuple[str, tuple[int, ...]], dict[int, _Seqs]]:
    out: dict[tuple[str, tuple[int, ...]], dict[int, _Seqs]] = {}
    for p in report.progress:
        key = (p.group.name, p.group.members)
        out[key] = {
            m: (e, f) for m, e, f in zip(p.group.members, p.entered, p.finished, strict=True)
        }
    return out


def _newest_ns(dumps: DumpSet) -> int | None:
    col = dumps.entries.column("time_created_ns")
    values = [v for v in col.to_pylist() if v is not None]
    return max(values) if values else None


def compare_snapshots(
    first: DumpSet, first_report: Report, second: DumpSet, second_report: Report
) -> SnapshotComparison:
    """Which ranks moved from the first snapshot to the second."""
    ids_a, ids_b = _record_ids(first), _record_ids(second)
    prog_a, prog_b = _progress(first_report), _progress(second_report)
    compared = sorted(set(ids_a) & set(ids_b))
    moved: set[int] = {r for r in compared if ids_a[r] != ids_b[r]}
    groups: list[GroupMotion] = []
    for p in second_report.progress:
        key = (p.group.name, p.group.members)
        before = prog_a.get(key, {})
        after = prog_b[key]
        g_moved = []
        for member in p.group.members:
            if member not in compared:
                continue
            if before.get(member) != after.get(member):
                moved.add(member)
            if member in moved:
                g_moved.append(member)
        members = [r for r in p.group.members if r in compared]
        groups.append(
            GroupMotion(
                group=p.group,
                moved=tuple(sorted(g_moved)),
                still=tuple(sorted(set(members) - set(g_moved))),
                before=tuple(before.get(r, (None, None))[0] for r in p.group.members),
                after=tuple(p.entered),
            )
        )
    still = tuple(r for r in compared if r not in moved)
    ta, tb = _newest_ns(first), _newest_ns(second)
    gap = None if ta is None or tb is None else (tb - ta) / 1e9
    if not compared:
        verdict = Motion.CANNOT_TELL
    elif not moved:
        verdict = Motion.HUNG
    elif still:
        verdict = Motion.SLOW
    else:
        verdict = Motion.PROGRESSING
    return SnapshotComparison(
        verdict=verdict,
        moved=tuple(sorted(moved)),
        still=still,
        compared=tuple(compared),
        groups=tuple(groups),
        gap_s=gap,
    )
