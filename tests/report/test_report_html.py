"""The HTML report: one self-contained file that headless Chromium draws."""

from __future__ import annotations

import importlib.util
import re
import struct
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

from frtrace.pipeline import analyze
from frtrace.report.heatmap import COLOURS, Status
from frtrace.report.html import render_html
from frtrace.report.select import Selection
from tests.conftest import GLOO


def _load_script() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_html.py"
    spec = importlib.util.spec_from_file_location("screenshot_html", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _load_script()

SCENARIOS = sorted(p.name for p in GLOO.iterdir() if p.is_dir() and any(p.iterdir()))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_html_is_self_contained(scenario: str) -> None:
    """No scripts, no external files, no network: only inline style and inline SVG."""
    page = render_html(analyze(GLOO / scenario))
    parsed = _parse(page)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(parsed.tags)
    for name, value in parsed.attrs:
        if name in ("src", "href", "xlink:href"):
            pytest.fail(f"external reference {name}={value}")
    assert not re.search(r"url\((?!#)", page), "only in-document url(#...) references"
    assert "@import" not in page
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_html_shows_findings_picture_and_wait_graph() -> None:
    """A hang: the headline, the progress picture with the culprit marked, the wait graph."""
    page = render_html(analyze(GLOO / "mesh_stall"))
    assert "<h1>HANG: culprit rank 5; 7 ranks wait on it</h1>" in page
    assert 'class="heatmap"' in page and 'class="waitgraph"' in page
    assert 'class="culprit">5</text>' in page  # the marker under rank 5's column
    assert "FR001 never_joined" in page


def test_html_of_a_healthy_job_has_no_wait_graph() -> None:
    """Nobody waits: the page says so instead of an empty picture."""
    page = render_html(analyze(GLOO / "healthy"))
    assert "No rank waits on another." in page
    assert 'class="waitgraph"' not in page


def test_html_ranks_selection_narrows_the_picture() -> None:
    """--ranks draws only the chosen ranks' columns."""
    report = analyze(GLOO / "mesh_stall")
    page = render_html(report, Selection(ranks=(4, 5, 6, 7)))
    ticks = re.findall(r'class="tick">(\d+)</text>', page)
    assert ticks == ["4", "5", "6", "7"]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.skipif(SCRIPT.find_chromium() is None, reason="chromium is not installed")
def test_chromium_draws_the_html_report(tmp_path: Path) -> None:
    """Headless Chromium renders the report to a screenshot with content in it."""
    html = tmp_path / "report.html"
    html.write_text(render_html(analyze(GLOO / "mesh_stall")))
    png = SCRIPT.screenshot(html, tmp_path / "report.png", width=1400, height=1000)
    assert _png_size(png) == (1400, 1000)
    # A blank page compresses to a few KiB; text, the picture and the graph do not.
    assert png.stat().st_size > 30_000


def _svg(page: str, cls: str) -> str:
    start = page.index(f'class="{cls}"')
    return page[page.rindex("<svg", 0, start) : page.index("</svg>", start)]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_wait_graph_caption_and_legend_fit_the_svg(scenario: str) -> None:
    """Every line of text is inside the SVG's width, at a generous 0.6 em a character (the
    caption was one 98-character line in a 510 px graph: cut)."""
    page = render_html(analyze(GLOO / scenario))
    if 'class="waitgraph"' not in page:
        return
    svg = _svg(page, "waitgraph")
    width = float(re.search(r'width="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    for x, size_class, text in re.findall(
        r'<text x="([\d.]+)" y="[\d.]+" class="(muted[^"]*|edge)">([^<]*)</text>', svg
    ):
        size = 10 if size_class == "edge" else 11
        assert float(x) + 0.6 * size * len(text) <= width, (text, width)


def test_a_culprit_has_its_own_colour_in_the_heatmap() -> None:
    """wrong_collective: rank 1 entered #N like its peers (a broadcast where they all_reduce):
    its cell was the waiters' yellow; now the culprit colour, which the legend names."""
    page = render_html(analyze(GLOO / "wrong_collective"))
    svg = _svg(page, "heatmap")
    culprit, waiting = COLOURS[Status.CULPRIT], COLOURS[Status.IN_OP]
    assert culprit not in {c for s, c in COLOURS.items() if s != Status.CULPRIT}
    cells = re.findall(r'fill="(#[0-9a-f]{6})"><title>([^<]*)</title>', svg)
    by_rank = {title.split(": ")[1]: colour for colour, title in cells}
    assert by_rank["rank 1"] == culprit
    assert by_rank["ranks 2-3"] == by_rank["rank 0"] == waiting
    assert f'fill="{culprit}"/><text x=' in svg and ">culprit</text>" in svg  # the legend
