"""frtrace's ``torch.backends`` entry point, which torch (2.5+) calls at ``import torch``.

A module of its own, outside the ``frtrace`` package, on purpose: torch stops its own import
when an entry point fails to load, so this one must load wherever frtrace's metadata is
installed, even where another ``frtrace`` (an older checkout on ``PYTHONPATH``) shadows the
installed package. It reads one environment variable, and only where ``$FRTRACE_WATCH`` is
set imports :mod:`frtrace.job.autowatch` (whose ``load`` never raises); a ``frtrace`` without
that module (or none at all: a package removed or moved away) means no watch and one line on
stderr, said once; with ``$FRTRACE_WATCH`` unset nothing of ``frtrace`` is imported, so such a
``frtrace`` costs nothing and says nothing.

It never raises an ``Exception``, whatever happens (torch turns one into "Failed to load the
backend extension" and stops ``import torch``): a stderr that cannot take the line (a full
disk, a closed pipe, none at all) costs the line only. ``KeyboardInterrupt`` and
``SystemExit`` are let through, as from any code (torch's loader lets them through too: a
Ctrl-C during ``import torch`` still stops the process). ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
turns every ``torch.backends`` entry point off, this one included.

What it cannot help: torch imports this module before calling it, so where the module itself
is gone (an editable install whose checkout was moved or deleted), torch's own import fails
before any of this runs; reinstall (``pip install -e`` from the new place), uninstall, or set
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (SECURITY.md, "Round 3").
"""

from __future__ import annotations

import os
import sys

__all__ = ["load"]


def load() -> None:
    """Start the watch of a job that set ``$FRTRACE_WATCH`` (nothing otherwise); never raises."""
    try:
        if not os.environ.get("FRTRACE_WATCH"):
            return
        try:
            from frtrace.job.autowatch import load as start
        except Exception as exc:
            _say(f"frtrace: FRTRACE_WATCH: not watching ({type(exc).__name__}: {exc})")
            return
        start()
    except Exception:  # never stop torch's import (not even for an autowatch that broke)
        return


def _say(line: str) -> None:
    """One line on stderr; none where stderr is missing or cannot take it."""
    err = sys.stderr
    if err is not None:  # (print(file=None) would write to stdout)
        try:
            print(line, file=err, flush=True)
        except Exception:
            return
