"""analyze(directory) -> Report: load, match, diagnose, join the stacks. Wires the steps,
decides nothing."""

from __future__ import annotations

from pathlib import Path

from frtrace.analysis.capture import dump_times_from_entries
from frtrace.analysis.diagnose import diagnose
from frtrace.analysis.stackjoin import join_stacks
from frtrace.load.tables import DumpSet, load_dumps
from frtrace.model import Report
from frtrace.pystack.discover import StackSet, load_stacks

__all__ = ["analyze", "analyze_dumps"]


def analyze(directory: Path, *, jobs: int | None = None, progress: bool = False) -> Report:
    """Load every dump (and every collected Python stack) under ``directory``; diagnose."""
    directory = Path(directory)
    dumps = load_dumps(directory, jobs=jobs, progress=progress)
    return analyze_dumps(dumps, load_stacks(directory))


def analyze_dumps(dumps: DumpSet, stacks: StackSet | None = None) -> Report:
    """Diagnose an already loaded dump set; ``stacks`` say where the culprits are."""
    times = dump_times_from_entries(dumps)  # NCCL: what the dump itself discovered
    if stacks is None:
        return diagnose(dumps, times)
    times |= {r: t for r in stacks.ranks if (t := stacks.taken_at_ns(r)) is not None}
    failed = frozenset(r for r in stacks.ranks if (stacks.trigger(r) or "").startswith("exception"))
    return join_stacks(diagnose(dumps, times, failed), stacks)
