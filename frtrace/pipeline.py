"""analyze(directory) -> Report: load, match, diagnose. Wires the steps, decides nothing."""

from __future__ import annotations

from pathlib import Path

from frtrace.analysis.diagnose import diagnose
from frtrace.analysis.findings import Report
from frtrace.load.tables import DumpSet, load_dumps

__all__ = ["analyze", "analyze_dumps"]


def analyze(directory: Path, *, jobs: int | None = None, progress: bool = False) -> Report:
    """Load every dump under ``directory`` and diagnose the job."""
    return analyze_dumps(load_dumps(directory, jobs=jobs, progress=progress))


def analyze_dumps(dumps: DumpSet) -> Report:
    """Diagnose an already loaded dump set."""
    return diagnose(dumps)
