"""Where a rank's Python stack says it is, in a few words, from its typed place
(``CulpritWhere``): ``in host code at load_batch (data.py:88), in Event.wait
(threading.py:629)``."""

from __future__ import annotations

from frtrace.detail import CulpritWhere

__all__ = ["where_said"]


def where_said(w: CulpritWhere) -> str:
    """The user's innermost frame and the library call it is in (or why there is none), and
    which thread was read when it is known not to be the main one."""
    if w.sampled != "frames":
        return "no Python frames" + (" on the thread" if w.sampled == "empty_thread" else "")
    if w.function is None:
        text = "no user frame" + (f"; innermost {w.innermost}" if w.innermost else "")
    else:
        at = f"{w.function} ({w.file})" if w.line is None else f"{w.function} ({w.file}:{w.line})"
        text = f"in {'a collective' if w.place == 'collective' else 'host code'} at {at}"
        if w.library_call is not None:
            text += f", in {w.library_call}"
    if w.off_main:
        text += f" [{w.thread}]"
    return text
