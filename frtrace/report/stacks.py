"""The collected Python stacks in the report: culprits' places, stack classes, the tree.

Text and markdown show the classes compactly (a few lines at 4,096 ranks, from
``pystack.classes.render_classes``); the JSON has every class and the prefix tree with rank
lists as integers; HTML draws the tree as nested lists, the largest branch first and the
branches that hold culprits marked.
"""

from __future__ import annotations

from html import escape
from typing import Any

from frtrace.detail.series import StackSeries
from frtrace.model import CulpritWhere, Report, StackEvidence
from frtrace.pystack.classes import PrefixNode, render_classes, tree_to_dict
from frtrace.pystack.model import Frame
from frtrace.pystack.where import frame_label as _frame_label
from frtrace.pystack.where import short_filename
from frtrace.report.common import compact_ranks
from frtrace.report.filenames import file_names
from frtrace.report.words_stacks import stack_statement
from frtrace.report.words_where import where_said

__all__ = [
    "MAX_CLASS_LINES",
    "class_lines",
    "render_stack_tree_html",
    "series_lines",
    "series_to_dict",
    "stacks_to_dict",
    "where_line",
    "where_to_dict",
]

MAX_CLASS_LINES = 6  # classes listed in text before the rest are counted on one line
_TREE_MAX_CHILDREN = 6  # branches drawn per node in HTML; the rest counted
_TREE_MAX_NODES = 60  # nodes drawn in all: a 4,096-rank tree stays a small picture


def where_line(report: Report) -> str | None:
    """``rank 4: in host code at load_batch (data.py:88)``, for each culprit with a stack."""
    seen: dict[int, CulpritWhere] = {}
    for f in report.findings:
        for w in f.where:
            seen.setdefault(w.rank, w)
    if not seen:
        return None
    items = [f"rank {r}: {where_said(w)}" for r, w in sorted(seen.items())[:3]]
    if len(seen) > 3:
        items.append(f"+{len(seen) - 3} more culprits")
    return "; ".join(items)


def class_lines(evidence: StackEvidence) -> tuple[str, list[str]]:
    """The classes as a title and a few lines (the largest classes, the rest counted)."""
    text = render_classes(
        evidence.classes,
        max_lines=MAX_CLASS_LINES,
        format_ranks=lambda rs: compact_ranks(rs, max_chars=40),
    )
    head, *lines = text.splitlines()
    sources = ", ".join(f"{name} ×{n}" for name, n in evidence.sources)
    return f"{head}; read from {sources}", [line.strip() for line in lines]


def _ranks(ranks: tuple[int, ...] | list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {compact_ranks(ranks)}"


def series_lines(series: StackSeries) -> tuple[str, list[str]]:
    """One sentence on the periodic samples (stuck or slow), and a line per place the ranks
    that did not move were at."""
    span = f"{series.span_s:.0f} s" if series.span_s >= 10 else f"{series.span_s:.1f} s"
    over = f"{series.moments} periodic stack snapshots over {span}"
    moved, still = series.moved, series.still
    if not moved and still:
        said = (
            f"Over time ({over}): no rank's stack moved: stuck, not slow (or caught in the "
            "same call at every snapshot: the dumps' entries settle which)."
        )
    elif moved and not still:
        said = (
            f"Over time ({over}): every rank's stack moved between snapshots: the job "
            "is progressing (slow, not stuck) as far as the stacks show."
        )
    elif moved:
        said = (
            f"Over time ({over}): {_ranks(moved)} moved (progressing), "
            f"{_ranks(still)} did not (stuck, or in the same call at every snapshot)."
        )
    else:
        said = f"Over time ({over}): no rank was sampled at more than one of them."
    by_place: dict[tuple[str, float], list[int]] = {}
    for r in series.ranks:
        if not r.moved and r.samples > 1:
            by_place.setdefault((r.place, round(r.still_s, 1)), []).append(r.rank)
    lines = [
        f"{_ranks(ranks)}: the same for {still_s:g} s, at {place}"
        for (place, still_s), ranks in sorted(by_place.items(), key=lambda kv: kv[1][0])
    ][:MAX_CLASS_LINES]
    if moved:
        lines.append(f"{_ranks(moved)}: moved between snapshots")
    return said, lines


def series_to_dict(series: StackSeries) -> dict[str, Any]:
    """The periodic samples' time series, JSON-ready."""
    return {
        "moments": series.moments,
        "first_ns": series.first_ns,
        "last_ns": series.last_ns,
        "files": list(series.files),
        "moved": list(series.moved),
        "still": list(series.still),
        "ranks": [
            {
                "rank": r.rank,
                "samples": r.samples,
                "moved": r.moved,
                "place": r.place,
                "still_s": r.still_s,
            }
            for r in series.ranks
        ],
    }


def _frame(f: Frame) -> dict[str, Any]:
    return {"function": f.function, "filename": short_filename(f.filename), "line": f.line}


def where_to_dict(w: CulpritWhere) -> dict[str, Any]:
    return {
        "rank": w.rank,
        "summary": where_said(w),
        "place": w.place,
        "function": w.function,
        "file": w.file,
        "line": w.line,
        "library_call": w.library_call,
        "thread": w.thread,
        "source": w.source,
        "file_name": w.file_name,
        "taken_at_ns": w.taken_at_ns,
        "trigger": w.trigger,
    }


def stacks_to_dict(evidence: StackEvidence) -> dict[str, Any]:
    """Everything about the stacks, JSON-ready; rank lists are lists of integers."""
    res = evidence.classes

    def node(n: PrefixNode) -> dict[str, Any]:
        return {
            "frames": [_frame(f) for f in n.frames],
            "ranks": list(n.ranks),
            "ends": list(n.ends),
            "children": [],
        }

    tree = tree_to_dict(res.tree, node)
    return {
        "agreement": evidence.agreement,
        "statement": stack_statement(evidence.reading),
        "ranks_with_stacks": list(evidence.ranks_with_stacks),
        "sources": dict(evidence.sources),
        "unexplained_ranks": list(evidence.unexplained_ranks),
        "compared_by": "function and file" if res.coarse else "function, file and line",
        "classes": [
            {
                "ranks": list(c.ranks),
                "outlier": c.outlier,
                "description": c.description,
                "user_frame": None if c.user_frame is None else _frame(c.user_frame),
                "frames": [_frame(f) for f in c.frames],
            }
            for c in res.classes
        ],
        "no_stack": list(res.no_stack),
        "tree": tree,
        "problems": list(evidence.problems),
        **({} if evidence.series is None else {"series": series_to_dict(evidence.series)}),
    }


def render_stack_tree_html(report: Report) -> str:
    """The prefix tree as nested lists: outer frames first, each branch with its ranks."""
    ev = report.stacks
    if ev is None:
        return ""
    culprits = set(report.culprit_ranks)
    budget = [_TREE_MAX_NODES]
    say = file_names(report).text

    def frame_label(f: Frame) -> str:
        return say(_frame_label(f))

    def item(n: PrefixNode, depth: int) -> str:
        budget[0] -= 1
        frames = n.frames
        if len(frames) > 3:  # a long shared run: its ends, the middle counted
            label = (
                f"{escape(frame_label(frames[0]))} → … {len(frames) - 2} frames … → "
                f"{escape(frame_label(frames[-1]))}"
            )
        else:
            label = " → ".join(escape(frame_label(f)) for f in frames) or "all ranks"
        hot = bool(culprits.intersection(n.ranks))
        mark = ' class="culprit"' if hot and len(n.ranks) < len(ev.ranks_with_stacks) else ""
        who = escape(compact_ranks(n.ranks, max_chars=40))
        head = f"<span{mark}><b>{len(n.ranks):,}</b> [{who}]</span> <code>{label}</code>"
        kids = list(n.children)
        shown = [k for k in kids[:_TREE_MAX_CHILDREN] if budget[0] > 0]
        inner = "".join(f"<li>{item(k, depth + 1)}</li>" for k in shown)
        if len(kids) > len(shown):
            rest = sum(len(k.ranks) for k in kids[len(shown) :])
            inner += (
                f'<li class="muted">… {len(kids) - len(shown)} more branches, {rest:,} ranks</li>'
            )
        return head + (f"<ul>{inner}</ul>" if inner else "")

    root = ev.classes.tree
    body = item(root, 0)
    return f'<ul class="stacktree"><li>{body}</li></ul>'
