"""The report as GitHub-flavoured markdown, for an issue, a PR comment or a CI summary."""

from __future__ import annotations

from tabulate import tabulate

from frtrace.model import Report
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
from frtrace.report.select import Selection

__all__ = ["render_markdown"]


def render_markdown(report: Report, selection: Selection | None = None) -> str:
    """Markdown with the same content as the text report."""
    out: list[str] = []
    for block in build_document(report, selection):
        for line in _block(block):
            if line or (out and out[-1]):  # never two blank lines in a row
                out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def escape(text: str) -> str:
    """Text that markdown shows literally (``<lambda>`` would otherwise vanish as a tag).

    Spans already in backticks are code and kept as they are, but for ``|`` in tables.
    """
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: treat it as text
        parts = [text.replace("`", "'")]
    for i in range(0, len(parts), 2):
        parts[i] = (
            parts[i]
            .replace("\\", "\\\\")
            .replace("*", "\\*")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
        )
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text.replace('`', '')}`".replace("|", "\\|") if text else ""


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["", "#" * block.level + " " + escape(block.text), ""]
    if isinstance(block, Para):
        text = escape(block.text)
        return [f"**{text}**" if block.strong else text, ""]
    if isinstance(block, KeyValues):
        return [f"- **{escape(k)}**: {escape(v)}" for k, v in block.pairs] + [""]
    if isinstance(block, Table):
        cell = _code if block.code else escape
        rows = [[cell(c) for c in row] for row in block.rows]
        headers = [escape(h) for h in block.headers]
        table = tabulate(rows, headers=headers, tablefmt="github")
        title = [f"*{escape(block.title)}*", ""] if block.title else []
        return [*title, table, ""]
    if isinstance(block, Bullets):
        title = [f"*{escape(block.title)}*", ""] if block.title else []
        items = [
            (f"{i}. " if block.ordered else "- ") + escape(item)
            for i, item in enumerate(block.items, start=1)
        ]
        return [*title, *items, ""]
    assert isinstance(block, Figure)
    return []
