"""The cross-rank timeline: what failed where, and when, from the job's logs, error files and
sidecars, first failure first; in every format (lines for people, objects for JSON)."""

from __future__ import annotations

from typing import Any

from frtrace.evidence.model import Failure, Role
from frtrace.model import Report

__all__ = ["MAX_TIMELINE_LINES", "failure_line", "failure_to_dict", "timeline_lines"]

MAX_TIMELINE_LINES = 8  # in text, markdown and HTML; the JSON has them all
MAX_LINE_MESSAGE = 140  # characters of a message on its timeline line (the JSON has 300)


def failure_line(f: Failure, t0: int | None) -> str:
    """``+1.302 s  rank 3  symptom (peer closed): RuntimeError: ... [stacks_rank_3.json]``."""
    when = "at ?" if f.at_ns is None or t0 is None else f"+{(f.at_ns - t0) / 1e9:.3f} s"
    who = "rank ?" if f.rank is None else f"rank {f.rank}"
    what = str(f.kind).replace("_", " ")
    message = (
        f.message if len(f.message) <= MAX_LINE_MESSAGE else f.message[:MAX_LINE_MESSAGE] + "…"
    )
    text = f"{when}  {who}  {f.role} ({what}): {message}"
    if f.where:
        text += f" — at {f.where}"
    return f"{text} [{f.source}]"


def timeline_lines(report: Report, limit: int = MAX_TIMELINE_LINES) -> list[str]:
    """The first ``limit`` failures in time order, one line each, and how many are left."""
    failures = report.timeline
    if not failures:
        return []
    t0 = next((f.at_ns for f in failures if f.at_ns is not None), None)
    # causes first, then what ranks said, then the launcher's own lines (which name no rank);
    # each in time order (the JSON keeps the plain time order)
    order = sorted(
        range(len(failures)),
        key=lambda i: (failures[i].role != Role.CAUSE, failures[i].rank is None, i),
    )
    lines = [failure_line(failures[i], t0) for i in sorted(order[:limit])]
    if len(failures) > limit:
        lines.append(f"… and {len(failures) - limit} more (the JSON report has them all)")
    return lines


def failure_to_dict(f: Failure) -> dict[str, Any]:
    return {
        "rank": f.rank,
        "kind": str(f.kind),
        "role": str(f.role),
        "message": f.message,
        "source": f.source,
        "at_ns": f.at_ns,
        "exc_type": f.exc_type,
        "named_ranks": list(f.named_ranks),
        "op": f.op,
        "seq": f.seq,
        "where": f.where,
        "signal": f.signal,
    }
