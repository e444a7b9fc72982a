"""The report a stalled job writes about itself (``frtrace.job.watch``'s leader imports this
when the job stalled, never before): the stall's files analysed in-process, the report in
three formats beside the dumps (0600), and the one line the job's log gets."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from frtrace.base.files import replace_file
from frtrace.base.printable import printable
from frtrace.incident.stall import stall_files
from frtrace.job.watch import REPORT_STEM
from frtrace.model import Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.text import render_text

__all__ = ["analyse_and_report", "hang_line"]


def hang_line(report: Report, html: Path) -> str:
    """``job hung: culprit rank 2 in load_batch (train.py:22); report: DIR/frtrace-report.html``:
    only the report's own culprits, where their stacks put them."""
    where: dict[int, str] = {}
    for finding in report.findings:
        for cw in finding.where or ():
            if cw.function is not None and cw.rank not in where:
                line = f":{cw.line}" if cw.line is not None else ""
                where[cw.rank] = f"{cw.function} ({cw.file}{line})"
    culprits = report.culprit_ranks
    if report.verdict in (Verdict.HANG, Verdict.DESYNC) and culprits:
        what = "job hung" if report.verdict == Verdict.HANG else "job desynchronized"
        named = [f"rank {r}" + (f" in {where[r]}" if r in where else "") for r in culprits[:4]]
        more = f" and {len(culprits) - 4} more" if len(culprits) > 4 else ""
        head = f"{what}: culprit " + ", ".join(named) + more
    else:
        head = f"job stalled: no culprit named (verdict: {report.verdict.value})"
    return f"{head}; report: {html}"


def analyse_and_report(directory: Path, since_wall: float) -> tuple[Report, Path]:
    """Analyse this stall's files (a private folder of links to them, removed after) and write
    ``frtrace-report.{txt,json,html}`` into ``directory``; returns the report and the HTML's
    path."""
    staging = Path(tempfile.mkdtemp(prefix=".frtrace-watch-", dir=directory))
    try:
        for path in stall_files(directory, since_wall, skip=REPORT_STEM):
            (staging / path.name).symlink_to(Path("..") / path.name)
        report = analyze(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for suffix, render in (("txt", render_text), ("json", render_json), ("html", render_html)):
        replace_file(directory / f"{REPORT_STEM}.{suffix}", printable(render(report, None)))
    return report, directory / f"{REPORT_STEM}.html"
