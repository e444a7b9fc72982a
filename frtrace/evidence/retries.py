"""A rank that retried a failing step to the end of its log: stuck in its own host code.

A data loader that cannot reach its storage, a checkpoint write to a full disk, a fetch that
is refused: the rank logs ``... failed ...; retrying`` again and again and never reaches its
next collective, while every other rank waits there. Retries that stop (the step succeeded,
the rank went on) are no failure: only a rank whose last lines of its own are still retries
(at least ``MIN_RETRIES`` of them; the launcher's stop, torch's own log lines, tracebacks
and other failure lines after them do not count as going on) is read as failing, a cause,
at the time of its first retry where the log says one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from frtrace.evidence.messages import short
from frtrace.evidence.model import Failure, FailureKind, Role

__all__ = ["MIN_RETRIES", "RetryWatch"]

MIN_RETRIES = 3  # fewer is a hiccup, not a rank stuck retrying
_RETRY = re.compile(r"\b(?:retry(?:ing)?|retries|re-trying|trying again)\b", re.IGNORECASE)
_FAILED = re.compile(
    r"\b(?:fail(?:ed|ing|ure)?|error|refused|unreachable|unavailable|timed out|timeout|denied|"
    r"not found|no space)\b",
    re.IGNORECASE,
)
# torch's and the launcher's own glog lines ("W1127 03:59:15.345000 ... api.py:753] ..."): not
# the rank going on
_LIBRARY_LINE = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d")


def is_retry(line: str) -> bool:
    """A line that says a step failed and is being retried."""
    return _RETRY.search(line) is not None and _FAILED.search(line) is not None


@dataclass(slots=True)
class RetryWatch:
    """One rank's retries in one file, read in order: ``see`` each of its lines (``errorish``:
    the line reports a failure of some kind), then ``failure`` once the file is read."""

    count: int = 0
    first: str = ""
    first_at: str = ""
    first_ns: int | None = None
    went_on: bool = False  # a line of its own after the retries: it got past them

    def see(self, line: str, where: str, at_ns: int | None, *, errorish: bool) -> None:
        if is_retry(line):
            if self.count == 0:
                self.first, self.first_at, self.first_ns = line, where, at_ns
            self.count += 1
            self.went_on = False
        elif self.count and not errorish and line.strip() and not _LIBRARY_LINE.match(line):
            self.went_on = True

    def failure(self, rank: int | None) -> Failure | None:
        """The rank's failure: still retrying when its log ends; None otherwise."""
        if self.count < MIN_RETRIES or self.went_on:
            return None
        return Failure(
            rank=rank,
            kind=FailureKind.RETRYING,
            role=Role.CAUSE,
            message=short(f"{self.first} (retried {self.count} times, to the end of its log)"),
            source=self.first_at,
            at_ns=self.first_ns,
        )
