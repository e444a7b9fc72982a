"""analyze(directory) -> Report: load, read the rest of the evidence, diagnose, join the
stacks. Wires the steps, decides nothing."""

from __future__ import annotations

from pathlib import Path

from frtrace.analysis.capture import dump_times_from_entries
from frtrace.analysis.diagnose import diagnose
from frtrace.analysis.stackjoin import join_stacks
from frtrace.evidence.discover import load_evidence
from frtrace.evidence.model import JobEvidence
from frtrace.load.tables import DumpSet, load_dumps
from frtrace.model import Report
from frtrace.pystack.discover import StackSet, load_stacks

__all__ = ["analyze", "analyze_dumps", "analyze_loaded"]


def analyze(directory: Path, *, jobs: int | None = None, progress: bool = False) -> Report:
    """Load every dump (and every collected Python stack, log and error file) under
    ``directory``; diagnose."""
    directory = Path(directory)
    dumps = load_dumps(directory, jobs=jobs, progress=progress)
    return analyze_loaded(dumps)


def analyze_loaded(dumps: DumpSet) -> Report:
    """Diagnose a loaded dump set with the stacks, logs and error files beside its dumps (a
    directory's; an archive's dumps are analysed alone)."""
    where = dumps.directory
    if not where.is_dir():
        return analyze_dumps(dumps)
    stacks = load_stacks(where)
    return analyze_dumps(dumps, stacks, load_evidence(where, stacks))


def analyze_dumps(
    dumps: DumpSet, stacks: StackSet | None = None, evidence: JobEvidence | None = None
) -> Report:
    """Diagnose an already loaded dump set; ``stacks`` say where the culprits are,
    ``evidence`` what the job's logs, error files and sidecars reported."""
    times = dump_times_from_entries(dumps)  # NCCL: what the dump itself discovered
    if stacks is None:
        return diagnose(dumps, times, evidence=evidence)
    times |= {r: t for r in stacks.ranks if (t := stacks.taken_at_ns(r)) is not None}
    failed = frozenset(r for r in stacks.ranks if (stacks.trigger(r) or "").startswith("exception"))
    report = diagnose(dumps, times, failed, evidence=evidence, stacks=stacks)
    return join_stacks(report, stacks)
