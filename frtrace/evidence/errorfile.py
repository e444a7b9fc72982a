"""torchelastic's error files: what ``@record`` wrote when a rank's main raised.

``{"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "Traceback ...",
"timestamp": "1764060000"}}}``, or the older ``{"message": "...", "timestamp": ...}``
(``torch.distributed.elastic.multiprocessing.errors``). The file names no rank: it comes from
the path (``attempt_0/3/error.json`` under torchrun ``--log-dir``, ``error_3.json``).
"""

from __future__ import annotations

from typing import Any

from frtrace.evidence.logs import frames_of, user_frame
from frtrace.evidence.messages import classify
from frtrace.evidence.model import Failure
from frtrace.incident.budget import load_json, seconds_to_ns

__all__ = ["ErrorFileError", "parse_error_file"]


class ErrorFileError(ValueError):
    """Not a torchelastic error file."""


def parse_error_file(text: str, source: str, *, rank: int | None) -> list[Failure]:
    """The failure an error file records (none for an empty one)."""
    try:
        doc: Any = load_json(text)
    except ValueError as exc:
        raise ErrorFileError(f"not JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(doc, dict) or "message" not in doc:
        raise ErrorFileError("no 'message': not a torchelastic error file")
    message, stamp, stack = doc["message"], doc.get("timestamp"), ""
    if isinstance(message, dict):
        extra: Any = message.get("extraInfo")
        if isinstance(extra, dict):
            stamp = extra.get("timestamp", stamp)
            stack = extra["py_callstack"] if isinstance(extra.get("py_callstack"), str) else ""
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return []
    at = seconds_to_ns(stamp)  # (None for "inf", 1e300, thousands of digits)
    frames = frames_of(stack.splitlines())
    line = message.strip()
    found = classify(line, exception=True)
    if found is None:
        return []
    return [
        found.failure(rank=rank, message=line, source=source, at_ns=at, where=user_frame(frames))
    ]
