"""analyze(directory) -> Report: load, read the rest of the evidence, diagnose, join the
stacks. Wires the steps, decides nothing."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from frtrace.analysis.capture import dump_times_from_entries
from frtrace.analysis.diagnose import diagnose
from frtrace.analysis.processes import seen_in_collected, seen_in_stacks, with_processes
from frtrace.analysis.stackjoin import join_stacks
from frtrace.diagnosis_cache import Diagnosis, DiagnosisCache
from frtrace.errors import FrtraceError, NoDumpsFound
from frtrace.evidence.collected import Collected, read_collected
from frtrace.evidence.discover import load_evidence
from frtrace.evidence.model import JobEvidence
from frtrace.load import tables
from frtrace.load.discover import Discovery, discover, list_files
from frtrace.load.empty import empty_dump_set
from frtrace.load.tables import DumpSet
from frtrace.model import Report
from frtrace.progress import Progress, owned
from frtrace.pystack import discover as stack_files
from frtrace.pystack.discover import StackSet

__all__ = ["analyze", "analyze_dumps", "analyze_loaded", "diagnose_source"]


def analyze(
    directory: Path, *, jobs: int | None = None, progress: bool | Progress = False
) -> Report:
    """Load every dump (and every collected Python stack, log and error file) under
    ``directory``; diagnose. A directory with no dump but logs that report failures is
    analysed from those alone. ``progress``: the phases shown (``frtrace.progress``)."""
    directory = Path(directory)
    with owned(progress) as shown:
        try:
            dumps = tables.load_dumps(directory, jobs=jobs, progress=shown)
        except NoDumpsFound as exc:
            dumps = _without_dumps(directory, exc)
        with shown.phase("analyse") as phase:
            phase.describe(f"{dumps.world.size:,} ranks, {dumps.entries.num_rows:,} entries")
            return analyze_loaded(dumps)


def _without_dumps(directory: Path, missing: NoDumpsFound) -> DumpSet:
    """The job left no dump (every rank died or exited before writing one): an empty set, if
    its logs, error files or stacks (a folder's or an archive's) name ranks that failed; else
    the error stands."""
    try:
        side_files = list_files(directory).side_files
    except FrtraceError:
        raise missing from None
    stacks = stack_files.load_stacks(directory, side_files)
    evidence = load_evidence(directory, stacks, side_files)
    ranks = {f.rank for f in evidence.failures if f.rank is not None} | set(stacks.ranks)
    if not evidence.failures or not ranks:
        raise missing
    return empty_dump_set(
        directory, max(ranks) + 1, "the highest rank its logs and stacks name", side_files
    )


def analyze_loaded(dumps: DumpSet) -> Report:
    """Diagnose a loaded dump set with the stacks, logs and error files beside its dumps (the
    side files its discovery found: a folder's, or an archive's read in memory)."""
    where = dumps.directory
    stacks = stack_files.load_stacks(where, dumps.side_files)
    collected = read_collected(where, dumps.side_files)
    evidence = load_evidence(where, stacks, dumps.side_files, dumps.world.size)
    if collected.files or collected.problems:
        evidence = replace(
            evidence,
            files=evidence.files + collected.files,
            problems=evidence.problems + collected.problems,
        )
    return analyze_dumps(dumps, stacks, evidence, collected)


def analyze_dumps(
    dumps: DumpSet,
    stacks: StackSet | None = None,
    evidence: JobEvidence | None = None,
    collected: Collected | None = None,
) -> Report:
    """Diagnose an already loaded dump set; ``stacks`` say where the culprits are,
    ``evidence`` what the job's logs, error files and sidecars reported, ``collected`` what
    ``frtrace collect`` knew of each rank (its dump time, host and pid)."""
    times = dump_times_from_entries(dumps)  # NCCL: what the dump itself discovered
    if collected is not None:
        times |= collected.dumped_at_ns()  # when collect got the dump
    seen = seen_in_stacks(stacks) + seen_in_collected(collected)  # each rank's host and pid
    if stacks is None:
        return with_processes(diagnose(dumps, times, evidence=evidence), seen)
    times |= {r: t for r in stacks.ranks if (t := stacks.taken_at_ns(r)) is not None}
    failed = frozenset(r for r in stacks.ranks if (stacks.trigger(r) or "").startswith("exception"))
    report = diagnose(dumps, times, failed, evidence=evidence, stacks=stacks)
    return with_processes(join_stacks(report, stacks), seen)


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
    the phases shown (``frtrace.progress``): discover, load, analyse. ``attempt``: of a
    restarted job, the attempt analysed (default the newest; ``frtrace.load.attempts``)."""
    with owned(progress) as shown:
        return _diagnose_source(source, jobs, only, scheduler, cache, shown, attempt)


def _listed(source: Path, only: str | None, attempt: int | None) -> Discovery | None:
    """The listing ``--attempt`` needs where there is no cache entry to carry it."""
    return None if attempt is None else discover(source, only=only, attempt=attempt)


def _diagnose_source(
    source: Path,
    jobs: int | None,
    only: str | None,
    scheduler: str | None,
    cache: bool,
    shown: Progress,
    attempt: int | None = None,
) -> Diagnosis:
    started = time.monotonic()
    try:
        store = DiagnosisCache.open(source, only=only, attempt=attempt) if cache else None
    except NoDumpsFound as exc:
        dumps = _without_dumps(source, exc)  # (nothing to cache: no dump to key it on)
        return Diagnosis(report=analyze_loaded(dumps), problems=dumps.problems)
    cached = None if store is None else store.load()
    if store is not None:  # (listed and fingerprinted here; else load_dumps lists them)
        shown.record("discover", store.discovery.describe(), started)
    if cached is not None:
        shown.record("analyse", "the diagnosis from the cache (files unchanged)", started)
        return cached
    try:
        dumps = tables.load_dumps(
            source if store is None else store.directory,
            jobs=jobs,
            progress=shown,
            only=only,
            scheduler=scheduler,
            cache=cache,
            discovery=store.discovery if store else _listed(source, only, attempt),
            store=None if store is None else store.tables,
        )
    except NoDumpsFound as exc:
        dumps = _without_dumps(source, exc)
    with shown.phase("analyse") as phase:
        phase.describe(f"{dumps.world.size:,} ranks, {dumps.entries.num_rows:,} entries")
        diagnosis = Diagnosis(report=analyze_loaded(dumps), problems=dumps.problems)
        if store is not None:
            store.save(diagnosis)
    return diagnosis
