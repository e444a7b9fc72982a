"""What the stages above may ask of the load beyond its tables: the one way to its memory and
its C parts, so that nothing above ``frtrace.load`` imports one of its rooms.

- ``give_back_memory``: the freed heap handed back to the kernel and the mapped columns'
  resident pages dropped (after the load, and between the analysis's steps);
- ``release_pages``: only the mapped columns' pages dropped (``handover.spill``);
- ``runs_order``: the C counting sort of rows by a small key (``read.native``), None where
  the C reader is not built or the key's values are too many;
- ``c_reader``: whether the C reader is used, where it was loaded from, and why not.
"""

from __future__ import annotations

from frtrace.base.heap import trim
from frtrace.load.handover import spill
from frtrace.load.handover.spill import release_pages
from frtrace.load.read import native
from frtrace.load.read.native import runs_order

__all__ = ["c_reader", "give_back_memory", "release_pages", "runs_order"]


def give_back_memory() -> None:
    """Return freed buffers to the OS (glibc keeps them otherwise: ~40% of RSS after loading,
    ~90 bytes per entry after matching)."""
    trim()
    spill.release_pages()


def c_reader() -> tuple[str | None, str | None]:
    """Why the C reader is not used (None where it is), and the file it was loaded from."""
    return native.inactive_reason(), native.location()
