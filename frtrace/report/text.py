"""The terminal report: the answer first, then the evidence as tables, then what to do next."""

from __future__ import annotations

import textwrap

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

__all__ = ["render_blocks_text", "render_text"]

WIDTH = 100  # prose wraps here; tables are as wide as their cells
INDENT = "  "


def render_text(report: Report, selection: Selection | None = None) -> str:
    """The report for a terminal, deterministic for the same report."""
    return render_blocks_text(build_document(report, selection))


def render_blocks_text(blocks: list[Block]) -> str:
    """Draw document blocks as plain text."""
    out: list[str] = []
    for block in blocks:
        out.extend(_block(block))
    return "\n".join(line.rstrip() for line in out).strip("\n") + "\n"


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [first.rstrip()]


def _indent(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.splitlines()]


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        if block.level == 1:
            return [block.text]
        if block.level == 2:
            return ["", block.text, "=" * len(block.text)]
        return ["", f"── {block.text} " + "─" * max(3, WIDTH - len(block.text) - 4)]
    if isinstance(block, Para):
        return _wrap(block.text, "", "")
    if isinstance(block, KeyValues):
        width = max(len(k) for k, _ in block.pairs)
        lines: list[str] = []
        for key, value in block.pairs:
            head = f"{key}:".ljust(width + 2)
            lines.extend(_wrap(value, head, " " * len(head)))
        return lines
    if isinstance(block, Table):
        lines = [f"{block.title}:"] if block.title else []
        return ["", *lines, *_indent(tabulate(block.rows, headers=block.headers), INDENT)]
    if isinstance(block, Bullets):
        lines = [f"{block.title}:"] if block.title else []
        for i, item in enumerate(block.items, start=1):
            mark = f"{i}. " if block.ordered else "- "
            lines.extend(_wrap(item, INDENT + mark, INDENT + " " * len(mark)))
        return ([""] if block.title else []) + lines
    assert isinstance(block, Figure)
    return []
