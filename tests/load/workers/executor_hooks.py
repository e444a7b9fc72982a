"""Remote tasks for the executor tests: importable by Dask workers (PYTHONPATH = the repo root)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from frtrace.errors import DumpFormatError
from frtrace.incident.discover import Candidate
from frtrace.load.read.parse import ParsedDump
from frtrace.load.workers.bundle import Bundle, bundle
from frtrace.load.workers.executors import Result, parse_files


@dataclass(frozen=True)
class SlowOnce:
    """The first task that holds ``target`` writes its pid to ``marker`` and sleeps (to be
    killed); every later one, and every other task, reads its files normally."""

    target: str
    marker: str
    sleep_s: float = 60.0

    def __call__(self, candidates: Sequence[Candidate]) -> list[Result]:
        marker = Path(self.marker)
        if any(c.path.name == self.target for c in candidates) and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(self.sleep_s)
        return parse_files(candidates)


@dataclass(frozen=True)
class KillsItsWorker:
    """Any task holding ``target`` kills the process it runs in, every time."""

    target: str

    def __call__(self, candidates: Sequence[Candidate]) -> list[Result]:
        if any(c.path.name == self.target for c in candidates):
            os.kill(os.getpid(), signal.SIGKILL)
        return parse_files(candidates)


@dataclass(frozen=True)
class RaisesOn:
    """Any task holding ``target`` raises (a bug or a lost connection, as seen by the client)."""

    target: str

    def __call__(self, candidates: Sequence[Candidate]) -> list[Result]:
        if any(c.path.name == self.target for c in candidates):
            raise ConnectionError(f"lost while reading {self.target}")
        return parse_files(candidates)


@dataclass(frozen=True)
class Stalls:
    """Any task holding ``target`` sleeps far past its time limit."""

    target: str
    sleep_s: float = 30.0

    def __call__(self, candidates: Sequence[Candidate]) -> list[Result]:
        if any(c.path.name == self.target for c in candidates):
            time.sleep(self.sleep_s)
        return parse_files(candidates)


@dataclass(frozen=True)
class Bundled:
    """Reads its files as a cluster's cut history does, into one bundle a task
    (``load.workers.bundle``); any task holding ``raises_on`` raises."""

    raises_on: str = ""

    def __call__(self, candidates: Sequence[Candidate]) -> Bundle:
        if self.raises_on and any(c.path.name == self.raises_on for c in candidates):
            raise ConnectionError(f"lost while reading {self.raises_on}")
        results = parse_files(candidates)
        read = [r for r in results if isinstance(r, ParsedDump | DumpFormatError)]
        assert len(read) == len(results)  # (nothing shipped: no ship_to)
        return bundle(candidates, read)
