"""The report as one self-contained HTML file: findings, the progress picture, the wait graph.

No scripts, no fonts, no external files and no network: the pictures are inline SVG and the
style is one inline ``<style>``. Hovering a cell or a box shows its ranks.
"""

from __future__ import annotations

from html import escape

from frtrace.model import Report, Verdict
from frtrace.report.common import headline
from frtrace.report.document import (
    Block,
    Bullets,
    Figure,
    Heading,
    KeyValues,
    Para,
    Table,
    build_document,
)
from frtrace.report.heatmap import render_heatmap_svg
from frtrace.report.select import Selection
from frtrace.report.stacks import render_stack_tree_html
from frtrace.report.waitsvg import render_waitgraph_svg

__all__ = ["render_html"]

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px 32px;
       color: #222; max-width: 1240px; }
h1 { font-size: 22px; margin: 0 0 8px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 22px 0 6px; color: #444; }
header { border-left: 6px solid #888; padding: 10px 16px; background: #fafafa; }
header.bad { border-color: #cb181d; background: #fff5f5; }
header.ok { border-color: #31a354; background: #f5fff5; }
header.unsure { border-color: #e6a000; background: #fffbf0; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 8px 0; }
dt { color: #666; } dd { margin: 0; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
td.code, code { font-family: ui-monospace, "SF Mono", Menlo, Consolas, monospace;
                font-size: 12.5px; }
.strong { font-weight: 600; }
.caption { color: #666; margin-top: 10px; }
svg text { font-family: system-ui, sans-serif; }
svg .lbl { font-size: 12px; fill: #222; }
svg .muted, .muted { font-size: 11px; fill: #777; color: #777; }
svg .tick { font-size: 11px; fill: #444; }
svg .culprit { font-size: 12px; font-weight: 700; fill: #cb181d; }
svg .node { font-size: 12px; font-weight: 600; }
svg .edge { font-size: 10px; fill: #555; }
.figure { overflow-x: auto; }
ul.stacktree, ul.stacktree ul { list-style: none; padding-left: 18px; margin: 2px 0; }
ul.stacktree li { margin: 2px 0; border-left: 1px solid #ddd; padding-left: 6px; }
ul.stacktree .culprit { color: #cb181d; }
"""


def _inline(text: str) -> str:
    """Escape text; spans in backticks become ``<code>``."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return escape(text)
    return "".join(f"<code>{escape(p)}</code>" if i % 2 else escape(p) for i, p in enumerate(parts))


def _tone(report: Report) -> str:
    if report.verdict in (Verdict.HANG, Verdict.DESYNC):
        return "bad"
    if report.verdict == Verdict.CANNOT_TELL:
        return "unsure"
    return "ok"


def render_html(report: Report, selection: Selection | None = None) -> str:
    """One HTML document; deterministic for the same report."""
    columns = list(selection.ranks) if selection and selection.ranks is not None else None
    body: list[str] = []
    blocks = build_document(report, selection)
    in_header = True
    body.append(f'<header class="{_tone(report)}">')
    for block in blocks:
        leaves_header = not isinstance(block, (Heading, Bullets, KeyValues)) or (
            isinstance(block, Heading) and block.level > 1
        )
        if in_header and leaves_header:
            body.append("</header>")
            in_header = False
        body.append(_block(block, report, columns))
    if in_header:
        body.append("</header>")
    title = escape(headline(report))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>frtrace: {title}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + '\n<p class="muted">made by frtrace from Flight Recorder dumps</p>\n</body>\n</html>\n'
    )


def _block(block: Block, report: Report, columns: list[int] | None) -> str:
    if isinstance(block, Heading):
        level = min(block.level, 3)
        return f"<h{level}>{_inline(block.text)}</h{level}>"
    if isinstance(block, Para):
        cls = ' class="strong"' if block.strong else ""
        return f"<p{cls}>{_inline(block.text)}</p>"
    if isinstance(block, KeyValues):
        items = "".join(f"<dt>{escape(k)}</dt><dd>{_inline(v)}</dd>" for k, v in block.pairs)
        return f"<dl>{items}</dl>"
    if isinstance(block, Table):
        cls = ' class="code"' if block.code else ""
        head = "".join(f"<th>{escape(h)}</th>" for h in block.headers)
        rows = "".join(
            "<tr>" + "".join(f"<td{cls}>{escape(c)}</td>" for c in row) + "</tr>"
            for row in block.rows
        )
        title = f'<div class="caption">{escape(block.title)}</div>' if block.title else ""
        return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Bullets):
        tag = "ol" if block.ordered else "ul"
        title = f'<div class="caption">{escape(block.title)}</div>' if block.title else ""
        items = "".join(f"<li>{_inline(i)}</li>" for i in block.items)
        return f"{title}<{tag}>{items}</{tag}>"
    assert isinstance(block, Figure)
    return _figure(block.kind, report, columns)


def _figure(kind: str, report: Report, columns: list[int] | None) -> str:
    if kind == "stacktree":
        tree = render_stack_tree_html(report)
        if not tree:
            return ""
        return (
            '<div class="caption">stack tree: outer frames first; each branch with how many '
            "ranks share it (culprits' branches in red)</div>\n"
            f'<div class="figure">{tree}</div>'
        )
    if kind == "progress":
        if not report.progress:
            return ""
        svg = render_heatmap_svg(report, columns)
        return (
            '<h2>How far each rank got</h2>\n<p class="muted">One row per process group '
            "(groups with one description and disjoint members share a row), one column per "
            "rank; hover for the ranks and sequence numbers.</p>\n"
            f'<div class="figure">{svg}</div>'
        )
    graph = render_waitgraph_svg(report)
    if graph is None:
        return "<h2>Who waits on whom</h2>\n<p>No rank waits on another.</p>"
    return f'<h2>Who waits on whom</h2>\n<div class="figure">{graph}</div>'
