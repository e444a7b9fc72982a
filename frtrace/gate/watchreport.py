"""The report a stalled job writes about itself (``frtrace.job.watch``'s leader imports this
when the job stalled, never before): the stall's files analysed in-process, the report in
three formats beside the dumps (0600) with what the watch knew (the threshold and the second
look, how long the op had been pending against its group's timeout, the phase a rank was in),
the one line the job's log gets, and, once the op completes, the same files marked superseded
and the one line that says the stall ended."""

from __future__ import annotations

import html as htmlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frtrace.base.files import replace_file
from frtrace.base.printable import printable
from frtrace.base.ranges import format_ranks
from frtrace.incident.kinds import MAX_STACK_BYTES
from frtrace.incident.stall import stall_files
from frtrace.job.env import STACKS_PREFIX
from frtrace.job.phase import MAX_PHASE_CHARS, phase_of_frames, wording
from frtrace.job.stallclock import StallContext
from frtrace.job.watch import REPORT_STEM
from frtrace.model import Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import dumps_compact, report_to_dict
from frtrace.report.text import render_text

__all__ = ["RankPhase", "Written", "analyse_and_report", "hang_line", "supersede"]


@dataclass(frozen=True, slots=True)
class RankPhase:
    """What a rank was doing, as its stacks sidecar says: ``marked`` (the job's
    ``frtrace.recorder.phase``) or ``stack`` (torch's checkpoint writers on its main thread)."""

    rank: int
    phase: str
    basis: str


@dataclass(frozen=True, slots=True)
class Written:
    """A report the watch wrote: where, the analysis's ``Report``, the ranks' phases."""

    directory: Path
    report: Report
    phases: tuple[RankPhase, ...] = ()

    @property
    def html(self) -> Path:
        return self.directory / f"{REPORT_STEM}.html"


def analyse_and_report(
    directory: Path, since_wall: float, context: StallContext | None = None
) -> Written:
    """Analyse this stall's files (a private folder of links to them, removed after) and write
    ``frtrace-report.{txt,json,html}`` into ``directory``, with what the watch knew
    (``context``)."""
    files = stall_files(directory, since_wall, skip=REPORT_STEM)
    staging = Path(tempfile.mkdtemp(prefix=".frtrace-watch-", dir=directory))
    try:
        for path in files:
            (staging / path.name).symlink_to(Path("..") / path.name)
        report = analyze(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    written = Written(directory, report, stall_phases(files))
    _write(written, context)
    return written


def hang_line(written: Written, context: StallContext | None = None) -> str:
    """``job hung: culprit rank 2 in load_batch (train.py:22); all_reduce #4 of pg 0 pending
    31 s on rank 1 (threshold 20 s, ...); report: DIR/frtrace-report.html``: only the report's
    own culprits, where their stacks put them, and the phases the ranks' sidecars say."""
    report = written.report
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
    parts = [head, *([stall_words(context)] if context is not None else [])]
    parts += [text for text, _ in phase_words(written.phases)]
    return "; ".join([*parts, f"report: {written.html}"])


def supersede(written: Written, context: StallContext) -> str:
    """The stall ended (``context.ended_after_s``): the report files rewritten, marked
    superseded; the line for the job's log."""
    _write(written, context)
    return f"{ended_words(context)}; {written.html} marked superseded"


def stall_words(context: StallContext) -> str:
    """``all_reduce #41 of pg 0 pending 31 s on rank 1 (threshold 20 s, confirmed 10 s later;
    the group's timeout 1800 s)``."""
    look = f"confirmed {_s(context.confirm_s)} later" if context.confirm_s > 0 else "one look"
    timeout = context.op.timeout_s
    limit = f"the group's timeout {_s(timeout)}" if timeout else "the group's timeout unknown"
    return (
        f"{context.op.label()} pending {_s(context.pending_s)} on rank {context.rank} "
        f"(threshold {_s(context.threshold_s)}, {look}; {limit})"
    )


def ended_words(context: StallContext) -> str:
    """``the stall of all_reduce #41 ended after 43 s: a slow step, not a hang``."""
    op, bound = context.op, "at most " if context.at_most else ""
    return (
        f"the stall of {op.name or 'op'} #{op.seq} ended after {bound}"
        f"{_s(context.ended_after_s or 0.0)}: a slow step, not a hang"
    )


def phase_words(phases: tuple[RankPhase, ...]) -> list[tuple[str, RankPhase]]:
    """``rank 0 was writing a checkpoint (the job marked it)``, one per phase and basis."""
    groups: dict[tuple[str, str], list[RankPhase]] = {}
    for p in phases:
        groups.setdefault((p.phase, p.basis), []).append(p)
    out = []
    for (name, basis), members in sorted(groups.items()):
        ranks = sorted({p.rank for p in members})
        one = len(ranks) == 1
        who = f"rank {ranks[0]} was" if one else f"ranks {format_ranks(ranks)} were"
        why = "the job marked it" if basis == "marked" else "torch's checkpoint code on its stack"
        out.append((f"{who} {wording(name)} ({why})", members[0]))
    return out


def stall_phases(files: list[Path]) -> tuple[RankPhase, ...]:
    """The phase each rank's stacks sidecar among ``files`` says (marked, else from its main
    thread's stack); a sidecar that cannot be read says nothing."""
    out: dict[int, RankPhase] = {}
    for path in files:
        if not (path.name.startswith(STACKS_PREFIX) and path.name.endswith(".json")):
            continue
        try:
            with path.open("rb") as f:
                doc = json.loads(f.read(MAX_STACK_BYTES + 1)[:MAX_STACK_BYTES])
        except (OSError, ValueError, RecursionError):
            continue
        found = _phase_of(doc)
        if found is not None:
            out[found.rank] = found
    return tuple(out[r] for r in sorted(out))


def _phase_of(doc: Any) -> RankPhase | None:
    if not isinstance(doc, dict) or doc.get("format") != "frtrace-stacks":
        return None
    rank, marked = doc.get("rank"), doc.get("phase")
    if not isinstance(rank, int) or isinstance(rank, bool):
        return None
    if isinstance(marked, str) and marked.strip():
        return RankPhase(rank, printable(marked.strip()[:MAX_PHASE_CHARS]), "marked")
    threads = doc.get("threads")
    for thread in threads if isinstance(threads, list) else ():
        if isinstance(thread, dict) and thread.get("is_main") is True:
            frames = thread.get("frames")
            pairs = [
                (str(f.get("filename")), str(f.get("name")))
                for f in (frames if isinstance(frames, list) else ())
                if isinstance(f, dict)
            ]
            shown = phase_of_frames(pairs)
            return None if shown is None else RankPhase(rank, shown, "stack")
    return None


def _s(seconds: float) -> str:
    return f"{round(seconds, 1):g} s"


def _write(written: Written, context: StallContext | None) -> None:
    """The three files, with the watch's lines (and, once the stall ended, superseded)."""
    report, lines = written.report, _watch_lines(written, context)
    ended = None
    if context is not None and context.ended_after_s is not None:
        ended = f"SUPERSEDED: {ended_words(context)}; this report was written while it lasted."
    text = render_text(report, None)
    head, sep, rest = text.partition("\n\n")
    text = head + "".join(f"\n{label + ':':<10}{words}" for label, words in lines) + sep + rest
    page = render_html(report, None)
    extra = "".join(f"<p><b>{label}</b>: {htmlib.escape(words)}</p>" for label, words in lines)
    page = page.replace("</header>", extra + "</header>", 1)
    if ended is not None:
        text = f"{ended}\n\n{text}"
        style = "background:#ffe;border:2px solid #e6a000;padding:8px"
        banner = f'<p style="{style}">{htmlib.escape(ended)}</p>'
        page = page.replace("<body>\n", f"<body>\n{banner}\n", 1)
    doc = report_to_dict(report, None)
    doc["watch"] = _watch_json(written, context)
    for suffix, content in (("txt", text), ("json", dumps_compact(doc) + "\n"), ("html", page)):
        replace_file(written.directory / f"{REPORT_STEM}.{suffix}", printable(content))


def _watch_lines(written: Written, context: StallContext | None) -> list[tuple[str, str]]:
    lines = [("watch", stall_words(context))] if context is not None else []
    return lines + [("phase", text) for text, _ in phase_words(written.phases)]


def _watch_json(written: Written, context: StallContext | None) -> dict[str, Any]:
    phases = [
        {"rank": p.rank, "phase": p.phase, "basis": p.basis, "summary": text}
        for text, first in phase_words(written.phases)
        for p in written.phases
        if (p.phase, p.basis) == (first.phase, first.basis)
    ]
    if context is None:
        return {"phases": phases}
    op, ended = context.op, context.ended_after_s
    return {
        "threshold_s": context.threshold_s,
        "confirm_s": context.confirm_s,
        "pending_s": round(context.pending_s, 3),
        "noticed_by": context.rank,
        "op": {"group": op.key[1], "seq": op.seq, "name": op.name},
        "group_timeout_s": op.timeout_s,
        "summary": stall_words(context),
        "phases": phases,
        "superseded": None
        if ended is None
        else {
            "ended_after_s": round(ended, 3),
            "at_most": context.at_most,
            "summary": ended_words(context),
        },
    }
