"""frtrace's ``torch.backends`` entry point, which torch (2.5+) calls at ``import torch``.

A module of its own, outside the ``frtrace`` package, on purpose: torch stops its own import
when an entry point fails to load, so this one must load wherever frtrace's metadata is
installed, even where another ``frtrace`` (an older checkout on ``PYTHONPATH``) shadows the
installed package. It reads one environment variable, and only where ``$FRTRACE_WATCH`` is
set imports :mod:`frtrace.job.autowatch` (whose ``load`` never raises); a ``frtrace`` without
that module means no watch and one line on stderr.
"""

from __future__ import annotations

import os
import sys

__all__ = ["load"]


def load() -> None:
    """Start the watch of a job that set ``$FRTRACE_WATCH`` (nothing otherwise)."""
    if not os.environ.get("FRTRACE_WATCH"):
        return
    try:
        from frtrace.job.autowatch import load as start
    except Exception as exc:  # never stop torch's import
        print(f"frtrace: FRTRACE_WATCH: not watching ({exc})", file=sys.stderr, flush=True)
        return
    start()
