"""The terminal report: the answer first, then the evidence."""

from __future__ import annotations

from tabulate import tabulate

from frtrace.findings import Report, Severity
from frtrace.ranges import format_ranks

__all__ = ["render_text"]


def render_text(report: Report) -> str:
    """A plain report for people."""
    lines: list[str] = []
    culprits = format_ranks(report.culprit_ranks) if report.culprit_ranks else "none"
    lines.append(f"verdict: {report.verdict}    culprit ranks: {culprits}")
    lines.append(
        f"ranks: {len(report.ranks_loaded)} of {report.world_size} loaded"
        + (f", missing {format_ranks(report.ranks_missing)}" if report.ranks_missing else "")
        + (
            f", unreadable {format_ranks(report.ranks_unreadable)}"
            if report.ranks_unreadable
            else ""
        )
    )
    lines.append("")
    for f in report.findings:
        lines.append(f"[{f.code} {f.severity.name}] {f.summary}")
        lines.append(
            f"    confidence: {f.confidence} ({f.why})"
            if f.why
            else f"    confidence: {f.confidence}"
        )
        for e in f.evidence:
            lines.append(f"    - {e}")
        if f.severity >= Severity.WARNING and f.expected and f.expected.stack:
            lines.append("    stack of the waiting ranks: " + " <- ".join(f.expected.stack[:6]))
        for r, sig in sorted(f.actual.items()):
            if sig.stack:
                lines.append(f"    stack of rank {r}: " + " <- ".join(sig.stack[:6]))
        lines.append("")
    if report.stragglers:
        rows = [
            (
                s.rank,
                s.collectives,
                f"{s.last_share:.0%}",
                f"{s.median_late_ms:.1f}",
                "yes" if s.corroborated else "no",
            )
            for s in report.stragglers
        ]
        lines.append("stragglers:")
        lines.append(
            tabulate(
                rows, headers=("rank", "collectives", "last", "late ms (median)", "corroborated")
            )
        )
        for s in report.stragglers:
            lines.append(f"  rank {s.rank}: {s.note}")
        lines.append("")
    if report.data_notes:
        lines.append("what the dumps could not show:")
        lines.extend(f"  - {n}" for n in report.data_notes)
        lines.append("")
    if not report.findings and not report.stragglers:
        lines.append("No problems found.")
    return "\n".join(lines).rstrip() + "\n"
