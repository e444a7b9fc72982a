"""analyze(directory) -> Report: the incident listed once (stage 0, ``frtrace.incident``), its
dumps loaded, the rest of its evidence read (each file once), diagnosed; the diagnosis cache
keyed on the same listing. Wires the steps, decides nothing."""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from frtrace.base.progress import Progress, owned
from frtrace.diagnosis_cache import Diagnosis, DiagnosisCache
from frtrace.incident.discover import Discovery, SideFile, discover
from frtrace.load.options import LoadOptions
from frtrace.model import Report

# The loader, the side files' readers and the analysis are imported where used: a run that
# finds its diagnosis in the cache (``diagnose_source``) imports none of them (numpy, Arrow,
# pandas: most of what such a run took).
if TYPE_CHECKING:
    from frtrace.evidence.collected import Collected
    from frtrace.evidence.model import JobEvidence
    from frtrace.load.dumpset import DumpSet
    from frtrace.pystack.discover import StackSet

__all__ = ["analyze", "analyze_dumps", "analyze_loaded", "diagnose_source"]


def analyze(
    directory: str | os.PathLike[str], *, jobs: int | None = None, progress: bool | Progress = False
) -> Report:
    """Load every dump (and every collected Python stack, log and error file) under
    ``directory``; diagnose. A directory with no dump but logs that report failures is
    analysed from those alone. ``progress``: the phases shown (``frtrace.base.progress``)."""
    with owned(progress) as shown:
        options = LoadOptions(jobs=jobs, meanwhile=_import_analysis)
        return _diagnosed_source(Path(directory), options, None, None, shown).report


@dataclass(frozen=True, slots=True, kw_only=True)
class SideFiles:
    """What the job left beside its dumps, each file read once: the ranks' Python stacks,
    the failures its logs, error files and sidecars report, ``frtrace collect``'s manifests."""

    stacks: StackSet
    evidence: JobEvidence
    collected: Collected


def read_side_files(
    where: Path, files: Sequence[SideFile] | None, dumps: DumpSet | None = None
) -> SideFiles:
    """The side files of a folder or archive (``files``: those its discovery listed; None:
    list them); with the ``dumps`` loaded, only what lies within the job (``evidence.injob``)."""
    from frtrace.evidence.collected import read_collected
    from frtrace.evidence.discover import load_evidence
    from frtrace.evidence.injob import dump_files, within_job
    from frtrace.pystack import discover as stack_files

    world = None if dumps is None else dumps.world.size
    stacks = stack_files.load_stacks(where, files)
    collected = read_collected(where, files)
    restarts = None if dumps is None else dumps.restarts
    attempt = newest = None
    if restarts is not None:  # (a log spanning attempts is read for this one's lines)
        attempt, newest = restarts.attempt, max(restarts.attempt, *restarts.others)
    evidence = load_evidence(
        where, stacks, files, world, attempt=attempt, newest=newest, job_ns=_job_ns(dumps)
    )
    if dumps is not None:
        evidence, stacks, collected = within_job(
            dumps.world.size, evidence, stacks, collected, dump_files(dumps)
        )
    if collected.files or collected.problems:
        evidence = replace(
            evidence,
            files=evidence.files + collected.files,
            problems=evidence.problems + collected.problems,
        )
    return SideFiles(stacks=stacks, evidence=evidence, collected=collected)


def _job_ns(dumps: DumpSet | None) -> int | None:
    """When the job ran: its dumps' newest entry's creation (ns), where they have one."""
    if dumps is None or dumps.entries.num_rows == 0:
        return None
    import pyarrow.compute as pc

    newest = pc.max(dumps.entries.column("time_created_ns")).as_py()
    return newest if isinstance(newest, int) and newest > 0 else None


def _without_dumps(discovery: Discovery) -> tuple[DumpSet, SideFiles]:
    """The job left no dump (every rank died or exited before writing one, or it records
    nothing ``frtrace collect`` could ask for): an empty set and its side files, if its logs,
    error files or stacks (a folder's or an archive's) name ranks that failed or where ranks
    are; else ``discovery.missing`` stands. The world is the ranks' ``WORLD_SIZE`` where
    ``collect``'s manifests say it, else the highest rank named."""
    from frtrace.evidence.injob import world_named
    from frtrace.load.empty import empty_dump_set

    assert discovery.missing is not None
    directory, listed = discovery.directory, discovery.side_files
    side = read_side_files(directory, listed)
    ranks = {f.rank for f in side.evidence.failures if f.rank is not None}
    world = world_named(ranks | set(side.stacks.ranks))
    if not (side.evidence.failures or side.stacks.ranks) or world is None:
        raise discovery.missing
    told = side.collected.world_size
    if told is not None and told >= world:
        said = "ranks' WORLD_SIZE, in collect's manifest"
        return empty_dump_set(directory, told, said, listed, certain=True), side
    dumps = empty_dump_set(directory, world, "highest rank its logs and stacks name", listed)
    return dumps, side


def analyze_loaded(dumps: DumpSet) -> Report:
    """Diagnose a loaded dump set with the stacks, logs and error files beside its dumps (the
    side files its discovery found: a folder's, or an archive's read in memory)."""
    return _analysed(dumps)


def _import_analysis() -> None:
    """Import the analysis (pandas' and networkx's modules, a second of a first run): done by
    the load while the workers read the dumps (``load_dumps(meanwhile=...)``)."""
    importlib.import_module("frtrace.analysis.diagnose")


def _analysed(dumps: DumpSet, side: SideFiles | None = None) -> Report:
    """The one diagnosis of a dump set and its side files (read here unless already read);
    of a restarted job's folder, with the other attempts' history."""
    if side is None:
        side = read_side_files(dumps.directory, dumps.side_files, dumps)
    from frtrace.analysis.diagnose import diagnose
    from frtrace.analysis.history import with_history
    from frtrace.load.restarts import other_attempt

    report = diagnose(dumps, side.stacks, side.evidence, side.collected)
    restarts = dumps.restarts
    if restarts is None:
        return report
    return with_history(
        report,
        restarts.attempt,
        restarts.others,
        lambda n: _diagnosed(other_attempt(dumps, n)),
        inits=restarts.inits,
    )


def _diagnosed(dumps: DumpSet) -> Report:
    """The diagnosis of one dump set and its own side files, with no history."""
    from frtrace.analysis.diagnose import diagnose

    side = read_side_files(dumps.directory, dumps.side_files, dumps)
    return diagnose(dumps, side.stacks, side.evidence, side.collected)


def analyze_dumps(
    dumps: DumpSet,
    stacks: StackSet | None = None,
    evidence: JobEvidence | None = None,
    collected: Collected | None = None,
) -> Report:
    """Diagnose an already loaded dump set; ``stacks`` say where the culprits are,
    ``evidence`` what the job's logs, error files and sidecars reported, ``collected`` what
    ``frtrace collect`` knew of each rank (its dump time, host and pid)."""
    from frtrace.analysis.diagnose import diagnose

    return diagnose(dumps, stacks, evidence, collected)


def diagnose_source(
    source: Path,
    *,
    jobs: int | None = None,
    only: str | None = None,
    scheduler: str | None = None,
    cache: bool = True,
    progress: bool | Progress = False,
    attempt: int | None = None,
) -> Diagnosis:
    """The report and load problems of a dump directory or archive: from the cache of an
    earlier run on the same, unchanged files (no dump or table is read then), else loaded,
    diagnosed and stored (not with ``cache=False``; archives are not cached). ``progress``:
    the phases shown (``frtrace.base.progress``): discover, load, analyse. ``attempt``: of a
    restarted job, the attempt analysed (default the newest; ``frtrace.incident.attempts``)."""
    options = LoadOptions(
        jobs=jobs,
        scheduler=scheduler,
        cache=cache,
        background=True,  # (the tables stored while the dumps are analysed)
        meanwhile=_import_analysis,
    )
    with owned(progress) as shown:
        return _diagnosed_source(source, options, only, attempt, shown)


def _diagnosed_source(
    source: Path, options: LoadOptions, only: str | None, attempt: int | None, shown: Progress
) -> Diagnosis:
    """The one sequence every entry point runs: the incident listed once (stage 0), its
    diagnosis from the cache, else its dumps loaded (stage 1) and diagnosed with its side
    files (or its side files alone, where it left no dump)."""
    with shown.phase("discover") as phase:
        discovery = discover(source, only=only, attempt=attempt, empty=True)
        phase.describe(discovery.describe())
    if discovery.missing is not None:
        dumps, side = _without_dumps(discovery)  # (nothing to cache: no dump to key it on)
        return Diagnosis(report=_analysed(dumps, side), problems=dumps.problems)
    store = DiagnosisCache.open(discovery, attempt=attempt) if options.cache else None
    if store is not None:
        started = time.monotonic()
        cached = store.load()
        if cached is not None:
            shown.record("analyse", "the diagnosis from the cache (files unchanged)", started)
            return cached
    from frtrace.load import tables

    tables_store = None if store is None else store.tables
    dumps = tables.load_discovered(discovery, options, shown, store=tables_store)
    with shown.phase("analyse") as phase:
        phase.describe(f"{dumps.world.size:,} ranks, {dumps.entries.num_rows:,} entries")
        diagnosis = Diagnosis(report=_analysed(dumps, None), problems=dumps.problems)
        if store is not None and dumps.window is None:  # (a cut history's is not kept)
            store.save(diagnosis)
    return diagnosis
