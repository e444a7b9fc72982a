"""Typed records of a time series of stack samples: which ranks moved between the moments."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RankMotion", "StackSeries"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankMotion:
    """One rank across the moments it was sampled at."""

    rank: int
    samples: int  # moments with a stack of this rank
    moved: bool  # its main thread's stack differed between two of them
    place: str  # where it was at the last moment: "load_batch (train.py:27)"
    still_s: float  # how long its stack has been the same, up to the last moment


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSeries:
    """Periodic stack samples of one job (torch's debug server ``dump_dir``): the moments,
    and per rank whether it moved. A rank that moved is progressing; one that did not is
    stuck, or was in the same call at every moment (a slow job sampled in one wait)."""

    moments: int
    first_ns: int
    last_ns: int
    files: tuple[str, ...]  # the files, oldest first
    ranks: tuple[RankMotion, ...]

    @property
    def span_s(self) -> float:
        return (self.last_ns - self.first_ns) / 1e9

    @property
    def moved(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.moved)

    @property
    def still(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if not r.moved and r.samples > 1)
