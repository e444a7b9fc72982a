"""Strings from dumps never reach the terminal as control sequences."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.base.printable import json_safe, printable
from frtrace.cli import app
from frtrace.report.markdown import _line, escape
from tests.conftest import make_dump, make_entry, write_pickle

EVIL_NAME = "train_step\x1b]0;pwned\x07\x1b[2J"
EVIL_FILE = "tr\u202eyp.niart"


def test_printable_escapes_controls_but_keeps_layout() -> None:
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("x\x1b[31my\x9bz\x7f") == "x\\x1b[31my\\x9bz\\x7f"
    assert printable("r\u202el \u2066i") == "r\\u202el \\u2066i"


def test_json_safe_is_valid_json_for_the_same_string() -> None:
    text = json_safe(json.dumps({"k\x9b": EVIL_NAME + EVIL_FILE}, ensure_ascii=False))
    assert json.loads(text) == {"k\x9b": EVIL_NAME + EVIL_FILE}
    assert printable(text) == text


def _mismatch(tmp_path: Path) -> Path:
    """Rank 1 calls all_gather where rank 0 calls all_reduce, from a frame named EVIL."""
    frames = [
        {"name": "all_gather", "filename": "torch/distributed/distributed_c10d.py", "line": 1},
        {"name": EVIL_NAME, "filename": EVIL_FILE, "line": 7},
    ]
    d = tmp_path / "dumps"
    write_pickle(d / "nccl_trace_rank_0", make_dump([make_entry(state="scheduled")]))
    rank1 = make_entry(profiling_name="nccl:all_gather", state="scheduled", frames=frames)
    write_pickle(d / "nccl_trace_rank_1", make_dump([rank1]))
    return d


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_reports_escape_control_characters(tmp_path: Path, fmt: str) -> None:
    dumps = _mismatch(tmp_path)
    out = CliRunner().invoke(app, ["analyze", "-d", str(dumps), "--format", fmt])
    shown = CliRunner().invoke(app, ["show", "-d", str(dumps), "--stacks"])
    written = tmp_path / "report"
    CliRunner().invoke(app, ["analyze", "-d", str(dumps), "--format", fmt, "-o", str(written)])
    for text in (out.output, shown.output, written.read_text(encoding="utf-8")):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "pwned" in out.output  # shown, as escapes
    if fmt == "json":  # escaped the JSON way: the strings themselves are kept
        assert f"{EVIL_NAME} ({EVIL_FILE}:7)" in _strings(json.loads(out.output))


def _strings(value: object) -> set[str]:
    """Every string anywhere in a decoded JSON value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return set()


def test_markdown_escapes_blocks_links_and_images_from_dumps() -> None:
    text = escape("pg\n# Owned\n![x](http://evil/p.png) [click](http://evil)")
    assert "\n" not in text
    assert not re.search(r"(?<!\\)\]\(|!\[", text)  # no link closes, no image opens
    assert _line("[ref]: http://evil") == "\\[ref]: http://evil"
    assert _line("# Owned") == "\\# Owned"
    assert _line("1. step") == "1\\. step"
