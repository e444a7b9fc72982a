"""The report as GitHub-flavoured markdown, for an issue, a PR comment or a CI summary."""

from __future__ import annotations

import re

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


# A line break (a dump's string may hold one) would let the next line start a block: a
# heading, a quote, a list, a table row.
_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")
# What starts a block where it begins a line (the start of a paragraph, a list item's text).
_BLOCK_START = re.compile(r"^(\s*(?:\d{1,9})?)([#+=~.)\[-])")  # ([ref]: url defines a link)


def escape(text: str) -> str:
    """Text that markdown shows literally (``<lambda>`` would otherwise vanish as a tag), on
    one line (no heading or list starts inside it), with no inline link or image (``](``
    and ``![`` escaped: a dump's ``![](http://...)`` fetches nothing).

    Spans already in backticks are code and kept as they are, but for ``|`` in tables.
    """
    text = _BREAKS.sub(" ", text)
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
            .replace("](", "\\](")  # no inline link or image: [text](url), ![alt](url)
            .replace("![", "!\\[")
        )
    return "`".join(parts).replace("|", "\\|")


def _line(text: str) -> str:
    """``escape``d text that begins a line: a leading ``#``, ``-``, ``1.`` is shown, not a
    heading or a list."""
    return _BLOCK_START.sub(r"\1\\\2", escape(text))


def _code(text: str) -> str:
    text = _BREAKS.sub(" ", text)
    return f"`{text.replace('`', '')}`".replace("|", "\\|") if text else ""


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["", "#" * block.level + " " + escape(block.text), ""]
    if isinstance(block, Para):
        text = escape(block.text) if block.strong else _line(block.text)
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
            (f"{i}. " if block.ordered else "- ") + _line(item)
            for i, item in enumerate(block.items, start=1)
        ]
        return [*title, *items, ""]
    assert isinstance(block, Figure)
    return []
