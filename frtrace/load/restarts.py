"""Each other attempt of a restarted job's folder, as a dump set of its own evidence.

A loaded set of a restarted job carries the folder's other attempts (``DumpSet.restarts``,
``frtrace.load.lifetimes``); ``other_attempt`` cuts one of them out of the whole, for the
report's history of the job (each attempt's verdict, in short). Only what is that attempt's
own goes in, stricter than ``--attempt N`` (which keeps the files in no attempt folder):

* its lifetime's dumps, and the recorder's stack sidecars written with them
  (``stacks_rank_<N>.json`` of those ranks);
* the files of its ``attempt_<N>`` folders, where the folders' numbers are the lifetimes'
  (``Restarts.folders``: two reruns of a job each with an ``attempt_0`` folder are not);
* nothing in no attempt folder: a log every attempt appended to (torchrun's console), a stack
  sample of unknown time, ``collect``'s manifest of today's processes cannot be split by
  attempt, and an earlier attempt must never be blamed on this one's lines.

Imports nothing of the analysis: it runs inside ``frtrace.load``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from frtrace.incident.attempts import attempt_of
from frtrace.incident.layout import SideFile
from frtrace.load.dumpset import DumpSet
from frtrace.load.inits import keep_ranks, recorder_stacks_of

__all__ = ["other_attempt", "own_side_files"]


def other_attempt(dumps: DumpSet, attempt: int) -> DumpSet:
    """Attempt ``attempt`` of the folder ``dumps`` was loaded from (one of
    ``dumps.restarts.others``): its own dumps and side files (see the module docstring), its
    other ranks without a dump; the job's world kept. Raises ``ValueError`` for an attempt the
    folder does not hold."""
    restarts = dumps.restarts
    if restarts is None or attempt not in restarts.others:
        raise ValueError(f"attempt {attempt} is not another attempt of this folder")
    ranks = next((r for n, r in restarts.lifetimes if n == attempt), ())
    whole = restarts.whole
    side = own_side_files(restarts.side_files, attempt if restarts.folders else None, ranks)
    fatal = tuple(p for p in whole.problems if p.fatal)  # (unreadable files: of no attempt)
    mine = replace(whole, side_files=side, problems=fatal, restarts=None)
    return keep_ranks(mine, set(ranks), ())


def own_side_files(
    side_files: Sequence[SideFile], folder: int | None, ranks: Sequence[int]
) -> tuple[SideFile, ...]:
    """The side files that are one attempt's own: those of its ``attempt_<folder>`` folders
    (None: none are), and the recorder's stack sidecars of its ``ranks`` in no such folder."""
    mine = set(ranks)
    out = []
    for f in side_files:
        n = attempt_of(f.relative)
        if (n is not None and n == folder) or (n is None and recorder_stacks_of(f, mine)):
            out.append(f)
    return tuple(out)
