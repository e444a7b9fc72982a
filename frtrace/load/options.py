"""How a dump set is loaded (``frtrace.load.tables.load_discovered``): one record, not flags.

Nothing here says what is loaded: that is the incident's discovery (``frtrace.incident``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the pipeline imports this before it knows a load is needed)
    from frtrace.load.workers.executors import FileExecutor

__all__ = ["LoadOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadOptions:
    """``jobs``: worker processes reading the files here (default: one per CPU).
    ``scheduler``: a Dask scheduler address (``tcp://host:8786``) or a ``FileExecutor`` reads
    the files elsewhere (``frtrace.load.workers.executors``); default: worker processes here.
    ``cache``: reuse the tables of an earlier run on the same, unchanged files, and store them
    for the next (``frtrace.load.cache``; off when ``FRTRACE_NO_CACHE=1``).
    ``background``: the tables are stored in a thread while the caller goes on
    (``cache.finish_saving`` waits for it). ``meanwhile``: what the caller wants done while
    the files are read (imports for the next step): in a thread beside the local workers
    (``parallel.parse_candidates``), else first; not at all when the cache holds the tables.
    """

    jobs: int | None = None
    scheduler: str | FileExecutor | None = None
    cache: bool = False
    background: bool = False
    meanwhile: Callable[[], None] | None = None
