"""What could not be read: one ``LoadProblem`` per file (in a module of its own, without
pyarrow, so that a cached diagnosis can print them without loading any table)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LoadProblem"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadProblem:
    """Something wrong with one file: ``fatal`` ones kept the file out of the analysis."""

    rank: int
    path: str
    message: str  # one line, already naming the file
    fatal: bool
