"""The report as a list of blocks (headings, tables, lists): built once, drawn by each format.

Text, markdown and HTML say the same things in the same order because they draw this one
document; only the markup differs, and each file is spelled one way in it (``filenames``).
The order is the answer first (headline and one line per root cause), then a restarted job's
history (this attempt's verdict, then one line per other attempt), then the evidence per
finding, stragglers, what the dumps could not show, and what to do next.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from frtrace.base.ranges import format_ranks
from frtrace.evidence.model import Role
from frtrace.model import Finding, Report, Severity
from frtrace.report.common import (
    MAX_DETAILED_FINDINGS,
    MAX_EVIDENCE,
    MAX_STRAGGLERS,
    MISMATCH_KINDS,
    compact_ranks,
    compare_rows,
    culprits_phrase,
    finding_columns,
    headline,
    headlines,
    plural,
    shorten_rank_lists,
    stack_rows,
)
from frtrace.report.filenames import FileNames, file_names
from frtrace.report.nextsteps import next_steps
from frtrace.report.select import Selection
from frtrace.report.stacks import class_lines, series_lines, where_line
from frtrace.report.timeline import timeline_lines
from frtrace.report.wording import disagreement, evidence, summary, why
from frtrace.report.words_history import history_lines, left_out_line, repeat_line
from frtrace.report.words_notes import note, straggler_note
from frtrace.report.words_stacks import stack_statement

__all__ = [
    "Block",
    "Bullets",
    "Figure",
    "Heading",
    "KeyValues",
    "Para",
    "Table",
    "build_document",
]

MAX_OTHER_FINDINGS = 20  # one-line rows after the detailed findings


@dataclass(frozen=True, slots=True)
class Heading:
    level: int  # 1 the headline, 2 a section, 3 a finding
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    strong: bool = False


@dataclass(frozen=True, slots=True)
class KeyValues:
    pairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    code: bool = False  # cells are code (stacks): monospace in HTML and markdown


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]
    ordered: bool = False
    title: str = ""


@dataclass(frozen=True, slots=True)
class Figure:
    """A picture only HTML draws: ``progress`` (ranks x groups) or ``waitgraph``."""

    kind: str


Block = Heading | Para | KeyValues | Table | Bullets | Figure


@dataclass(slots=True)
class _Doc:
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def build_document(report: Report, selection: Selection | None = None) -> list[Block]:
    """Every block of the report, in reading order."""
    doc = _Doc()
    _answer(doc, report, selection or Selection())
    _history(doc, report)
    _timeline(doc, report)
    doc.add(Figure("progress"), Figure("waitgraph"))
    detailed = [f for f in report.findings if f.severity >= Severity.WARNING]
    shown = detailed[:MAX_DETAILED_FINDINGS]
    if shown:
        doc.add(Heading(2, "Findings"))
        for f in shown:
            _finding(doc, f, report)
    shown_ids = {id(f) for f in shown}
    _other_findings(doc, [f for f in report.findings if id(f) not in shown_ids])
    _stragglers(doc, report)
    _stacks(doc, report)
    if report.data_notes:
        notes = tuple(shorten_rank_lists(note(n)) for n in report.data_notes)
        doc.add(Heading(2, "What the dumps could not show"), Bullets(notes))
    steps = next_steps(report)
    if steps:
        doc.add(Heading(2, "Next steps"), Bullets(tuple(steps), ordered=True))
    names = file_names(report)
    return [_spelled(b, names) for b in doc.blocks]


def _spelled(block: Block, names: FileNames) -> Block:
    """The block with every file it names spelled the report's one way."""
    say = names.text
    if isinstance(block, Heading):
        return Heading(block.level, say(block.text))
    if isinstance(block, Para):
        return Para(say(block.text), block.strong)
    if isinstance(block, KeyValues):
        return KeyValues(tuple((k, say(v)) for k, v in block.pairs))
    if isinstance(block, Table):
        rows = tuple(tuple(say(c) for c in row) for row in block.rows)
        return Table(tuple(say(h) for h in block.headers), rows, block.title, block.code)
    if isinstance(block, Bullets):
        return Bullets(tuple(say(i) for i in block.items), block.ordered, say(block.title))
    return block


def _answer(doc: _Doc, report: Report, selection: Selection) -> None:
    doc.add(Heading(1, headline(report)))
    top, cut = headlines(report)
    items = [f"{shorten_rank_lists(summary(f))} [{_tag(f)}]" for f in top]
    if cut:
        items.append(f"… and {plural(cut, 'more finding')} below")
    if items:
        doc.add(Bullets(tuple(items), ordered=True))
    loaded = f"{len(report.ranks_loaded)} of {report.world_size} loaded"
    if report.ranks_missing:
        loaded += f"; no dump: {compact_ranks(report.ranks_missing)}"
    if report.ranks_unreadable:
        loaded += f"; unreadable: {compact_ranks(report.ranks_unreadable)}"
    pairs = [("verdict", str(report.verdict)), ("ranks", loaded)]
    if report.culprit_ranks:
        pairs.append(("culprits", culprits_phrase(report)))
    where = where_line(report)
    if where is not None:
        pairs.append(("where", where))
    if report.victim_ranks:
        pairs.append(
            ("waiting", f"{compact_ranks(report.victim_ranks)} ({len(report.victim_ranks)})")
        )
    if selection.active:
        pairs.append(
            (
                "showing",
                f"{selection.describe()} only; verdict, culprits and exit code are for the "
                "whole job",
            )
        )
    doc.add(KeyValues(tuple(pairs)))


def _tag(f: Finding) -> str:
    """``FR001; pg 2 = ranks 4-7``: the code, and who the group is when it is small to say."""
    if f.group is None or f.group.desc == "default_pg":
        return f.code
    members = format_ranks(f.group.members)
    who = f"ranks {members}" if len(members) <= 24 else plural(len(f.group.members), "rank")
    return f"{f.code}; {f.group.label} = {who}"


def _finding(doc: _Doc, f: Finding, report: Report) -> None:
    title = f"{f.code} {f.kind} · {f.severity.name.lower()} · confidence {f.confidence}"
    doc.add(Heading(3, title), Para(shorten_rank_lists(summary(f)), strong=True))
    pairs: list[tuple[str, str]] = []
    if f.group is not None:
        how = ", inferred from the entries" if f.group.inferred else ""
        pairs.append(
            (
                "group",
                f"{f.group.label}: members {compact_ranks(f.group.members)} "
                f"({len(f.group.members)}{how})",
            )
        )
    if f.seq is not None or f.op:
        pairs.append(("op", f"{f.op or '?'}" + (f" #{f.seq}" if f.seq is not None else "")))
    if f.culprit_ranks:
        pairs.append(("culprit", compact_ranks(f.culprit_ranks)))
    if f.waiting_ranks:
        pairs.append(("waiting", f"{compact_ranks(f.waiting_ranks)} ({len(f.waiting_ranks)})"))
    if f.cycle:
        pairs.append(("cycle", " → ".join(str(r) for r in (*f.cycle, f.cycle[0]))))
    because = why(f)
    if because:
        pairs.append(("because", because))
    doc.add(KeyValues(tuple(pairs)))
    columns, cut = finding_columns(f, report.processes, report.stacks)
    if columns:
        headers = ("", *(c.title for c in columns))
        rows = tuple(tuple(r) for r in compare_rows(columns, mark=f.kind in MISMATCH_KINDS))
        doc.add(Table(headers, rows))
        if cut:
            doc.add(Para(f"(+{plural(cut, 'more culprit behaviour')}; see the JSON report)"))
    lines = evidence(f)
    if lines:
        items = [shorten_rank_lists(e) for e in lines[:MAX_EVIDENCE]]
        if len(lines) > MAX_EVIDENCE:
            items.append(f"… +{len(lines) - MAX_EVIDENCE} more (see the JSON report)")
        doc.add(Bullets(tuple(items), title="evidence"))
    stacks = stack_rows(columns)
    if stacks:
        doc.add(
            Table(
                tuple(c.title for c in columns),
                tuple(tuple(r) for r in stacks),
                title="stacks, innermost frame first"
                + (", where each op was called" if any(c.now for c in columns) else ""),
                code=True,
            )
        )


def _other_findings(doc: _Doc, rest: list[Finding]) -> None:
    if not rest:
        return
    rows = [
        (
            f.code,
            f.severity.name.lower(),
            f.group.label if f.group else "-",
            "-" if f.seq is None else str(f.seq),
            compact_ranks(f.culprit_ranks, max_chars=24),
            str(len(f.waiting_ranks)),
            shorten_rank_lists(summary(f), max_chars=32),
        )
        for f in rest[:MAX_OTHER_FINDINGS]
    ]
    doc.add(
        Heading(2, "Other findings"),
        Table(("code", "severity", "group", "seq", "culprits", "waiting", "summary"), tuple(rows)),
    )
    if len(rest) > MAX_OTHER_FINDINGS:
        counts = Counter(f.code for f in rest[MAX_OTHER_FINDINGS:])
        text = ", ".join(f"{code} ×{n}" for code, n in sorted(counts.items()))
        doc.add(Para(f"… +{len(rest) - MAX_OTHER_FINDINGS} more ({text}); see the JSON report"))


def _history(doc: _Doc, report: Report) -> None:
    """A restarted job's attempts: this one's verdict first, then one line per other attempt
    (each from its own files), then the ranks and hosts named in several."""
    history = report.history
    if history is None:
        return
    title = "this attempt first; the others each from its own dumps and attempt_N logs"
    lines = [shorten_rank_lists(line) for line in history_lines(history)]
    left = left_out_line(history)
    doc.add(
        Heading(2, "Restart history"), Bullets(tuple(lines + ([left] if left else [])), title=title)
    )
    for r in history.repeats:
        doc.add(Para(shorten_rank_lists(repeat_line(r, history.this.attempt)), strong=True))


def _timeline(doc: _Doc, report: Report) -> None:
    """What failed where and when (the job's logs, error files, sidecars), and where two kinds
    of evidence disagree: a few lines after the root causes."""
    lines = timeline_lines(report)
    if not lines and not report.disagreements:
        if report.evidence_problems:  # (a file set aside is said even where nothing failed)
            doc.add(Heading(2, "Evidence not used"))
            doc.add(Bullets(report.evidence_problems, title="files not read"))
        return
    doc.add(Heading(2, "What failed, and when"))
    if report.disagreements:
        said = [disagreement(d) for d in report.disagreements]
        doc.add(Para("The evidence disagrees: " + "; ".join(said), strong=True))
    if lines:
        causes = [f for f in report.timeline if f.role == Role.CAUSE and f.rank is not None]
        title = (
            f"first cause: rank {causes[0].rank}, {causes[0].exc_type or causes[0].kind}"
            + (" (at a time no file says)" if causes[0].at_ns is None else "")
            if causes
            else "no rank reported a cause of its own: every failure is a symptom"
        )
        doc.add(Bullets(tuple(lines), title=title))
    if report.evidence_problems:
        doc.add(Bullets(report.evidence_problems, title="files not read"))


def _stacks(doc: _Doc, report: Report) -> None:
    """Every rank's Python stack in classes, and whether they agree with the verdict."""
    ev = report.stacks
    if ev is None:
        return
    title, lines = class_lines(ev)
    doc.add(
        Heading(2, "Where each rank is (Python stacks)"),
        Para(stack_statement(ev.reading), strong=True),
        Bullets(tuple(lines), title=title),
        Figure("stacktree"),
    )
    if ev.series is not None:
        said, moves = series_lines(ev.series)
        doc.add(Para(said, strong=True), Bullets(tuple(moves)))


def _stragglers(doc: _Doc, report: Report) -> None:
    if not report.stragglers:
        return
    ranked = sorted(report.stragglers, key=lambda s: (-s.last_share, s.rank))
    rows = tuple(
        (
            str(s.rank),
            str(s.collectives),
            f"{s.last_share:.0%}",
            f"{s.median_late_ms:.1f}",
            "yes" if s.corroborated else "no",
            ",".join(s.groups[:4]) + (" …" if len(s.groups) > 4 else ""),
        )
        for s in ranked[:MAX_STRAGGLERS]
    )
    doc.add(
        Heading(2, "Stragglers"),
        Table(
            ("rank", "collectives", "arrived last", "late ms (median)", "corroborated", "groups"),
            rows,
        ),
    )
    if len(ranked) > MAX_STRAGGLERS:
        doc.add(Para(f"… +{len(ranked) - MAX_STRAGGLERS} more stragglers; see the JSON report"))
    notes = sorted({straggler_note(s) for s in ranked[:MAX_STRAGGLERS]})[:5]
    if notes:
        doc.add(Bullets(tuple(shorten_rank_lists(n) for n in notes)))
