"""What one untrusted file (a dump's rank, a log, an error file, a manifest, a stack sample) may
cost the analysis: the limits every reader shares. Imports nothing of frtrace.

Every side file is untrusted: anyone who can write beside the dumps can write it. Each is read
within a budget, and what is over it costs that file (or that line), never the analysis:

- time: a log is read for at most ``LOG_SECONDS``; the lines after are not read (one line in
  the problems says so), and every pattern matched against a line runs in linear time;
- size: a log's last ``MAX_LOG_BYTES`` (``frtrace.incident.layout``), a line's first
``MAX_LINE_CHARS``; NCCL RAS's output ``MAX_RAS_BYTES`` (refused whole past it);
- digits: a number is read only when it has at most ``MAX_DIGITS`` digits (``int()`` of a
  number of thousands of digits is slow, and Python refuses over 4,300), a rank only in
  ``[0, MAX_WORLD_SIZE)``;
- nesting: JSON nested deeper than the decoder's recursion limit is refused (``load_json``);
- times: a time that is not a finite number of seconds in the range of a 64-bit nanosecond
  count is no time (``seconds_to_ns``);
- files: a file the listing found is read only as listed (``read_listed``): its listed size
  within a limit first (a dump's: ``MAX_DUMP_BYTES``), then opened so that nothing else is
  (``O_NONBLOCK``: a FIFO swapped in after the listing does not block; ``O_NOFOLLOW``: nor is
  a link swapped in followed), a regular file of the listed size by its ``fstat``, and never
  more than that size read.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "LOG_SECONDS",
    "MAX_DIGITS",
    "MAX_DUMP_BYTES",
    "MAX_LINE_CHARS",
    "MAX_RAS_BYTES",
    "MAX_WORLD_SIZE",
    "Deadline",
    "load_json",
    "number",
    "rank_number",
    "read_listed",
    "seconds_to_ns",
]

# No job has this many ranks (the largest run ~10^5 GPUs). A rank number at or beyond it, in a
# file name, a recorded group or a side file, is damage: taken at face value it would make
# frtrace build per-rank structures for 10^12 ranks.
MAX_WORLD_SIZE = 1 << 20
# A 2,000-entry dump with 20-frame stacks is a few MB; 1 GiB is far beyond any real buffer
# and refuses junk (a core file, a checkpoint) before it is read into memory.
MAX_DUMP_BYTES = 1 << 30
# ``ncclras -f json`` writes ~600 bytes per rank and communicator: 10^5 ranks in one
MAX_RAS_BYTES = 64 << 20
LOG_SECONDS = 10.0  # the time one log (or one RAS file) may take to read
MAX_LINE_CHARS = 8192  # of a log line, matched; a failure message keeps 300
MAX_DIGITS = 18  # an int64 has 19; exit codes, signals, line numbers, sequence numbers
_MAX_NS = 2**63 - 1


def number(text: str | None) -> int | None:
    """``text``'s integer (an optional ``-``, then digits) when it has at most ``MAX_DIGITS``
    digits; None for anything else."""
    if text is None:
        return None
    digits = text.removeprefix("-")
    if not digits.isdecimal() or not digits.isascii() or len(digits) > MAX_DIGITS:
        return None
    return int(text)


def rank_number(text: str | None) -> int | None:
    """A rank read from text: an integer in ``[0, MAX_WORLD_SIZE)``, else None."""
    value = number(text)
    return value if value is not None and 0 <= value < MAX_WORLD_SIZE else None


def seconds_to_ns(value: Any) -> int | None:
    """Seconds since the epoch (a number or its text) as nanoseconds; None when it is none,
    not finite, negative, or past what 64 bits of nanoseconds hold."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and len(value) > 40:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(seconds) or not 0 <= seconds * 1e9 < _MAX_NS:
        return None
    return int(seconds) * 1_000_000_000


def load_json(text: str | bytes) -> Any:
    """``json.loads``, with nesting deeper than the decoder's recursion limit a ValueError
    (json's C decoder stops cleanly there, with a RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


class Deadline:
    """A time budget: ``expired()`` once ``seconds`` have passed since it was made (checked
    every ``every`` calls, so that it costs nothing per line)."""

    __slots__ = ("_calls", "_every", "_until", "seconds", "stopped_at")

    def __init__(self, seconds: float, every: int = 64) -> None:
        self.seconds = seconds
        self._until = time.monotonic() + seconds
        self._every = every
        self._calls = 0
        self.stopped_at: int | None = None  # the line the reader stopped at, if it did

    def expired(self, where: int) -> bool:
        """Whether the time is up (then ``stopped_at`` is ``where``)."""
        self._calls += 1
        if self._calls % self._every or time.monotonic() <= self._until:
            return False
        self.stopped_at = where
        return True


def read_listed(
    path: str | os.PathLike[str], listed: int, limit: int, *, chunk: int = 1 << 20
) -> Iterator[bytes]:
    """The bytes of the file the listing found at ``path`` with ``listed`` bytes, in chunks:
    ``OSError`` (before any is read) where ``listed`` is over ``limit``, or where what is
    there now is not a regular file of ``listed`` bytes (a FIFO, a device, a link: opened with
    ``O_NONBLOCK|O_NOFOLLOW``, so that none blocks nor is followed; a file that changed size);
    never more than ``listed`` bytes read."""
    if listed > limit:
        raise OSError(errno.EFBIG, f"larger than {limit:,} bytes: not read", os.fspath(path))
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if info.st_size != listed:
            raise OSError(errno.ESTALE, "not the size it was listed at", os.fspath(path))
        left = listed
        while left > 0:
            data = os.read(fd, min(left, chunk))
            if not data:
                break
            left -= len(data)
            yield data
    finally:
        os.close(fd)
