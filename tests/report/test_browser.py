"""The HTML report in a real browser: Debian's headless Chromium draws the page of a hung job.

Two runs of Chromium (about a second each): a screenshot, whose pixels must hold the culprit's
own colour (its heatmap cell and the legend's swatch) beside the waiters' yellow; and the page
with a probe script added to a copy of it (the report itself has none), whose ``--dump-dom``
says where the browser laid out every text of the pictures: each must lie inside its SVG.
Skipped where Chromium is not installed (``scripts/dev-setup`` installs it where it can).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest

from frtrace.pipeline import analyze
from frtrace.report.heatmap import COLOURS, Status
from frtrace.report.html import render_html
from scripts.screenshot_html import chromium_argv
from tests.conftest import FIXTURES

HUNG = FIXTURES / "stacks" / "recorder_hang"  # rank 2 never joined; 0,1,3 wait
WIDTH, HEIGHT = 1400, 2000
TIMEOUT_S = 30


def _browser() -> str | None:
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


BROWSER = _browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; scripts/dev-setup)",
)


def _chromium(tmp: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"  # a new one each run
    cmd = chromium_argv(BROWSER, profile, page, *args, width=WIDTH, height=HEIGHT)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


# --- a small PNG reader: 8-bit RGB or RGBA, not interlaced (what Chromium writes) -----------


def _png_rows(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and the unfiltered rows of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def _rgb(colour: str) -> tuple[int, int, int]:
    value = int(colour.lstrip("#"), 16)
    return value >> 16, (value >> 8) & 0xFF, value & 0xFF


def test_chromium_draws_the_culprit_in_its_own_colour(tmp_path: Path) -> None:
    """The screenshot has the page (thousands of colours, not a blank or an error page), the
    culprit's colour in a cell and a legend swatch, and the waiters' yellow."""
    page = tmp_path / "report.html"
    page.write_text(render_html(analyze(HUNG)), encoding="utf-8")
    png = tmp_path / "report.png"
    _chromium(tmp_path, page, f"--screenshot={png}")
    width, height, bpp, rows = _png_rows(png.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    seen: Counter[tuple[int, int, int]] = Counter()
    for row in rows[:700]:  # the header and the heatmap are at the top
        seen.update(zip(row[0::bpp], row[1::bpp], row[2::bpp], strict=True))
    assert len(seen) > 50, "a page of text and pictures has many colours"
    culprit, waiting = _rgb(COLOURS[Status.CULPRIT]), _rgb(COLOURS[Status.IN_OP])
    assert seen[culprit] > 1000, "the culprit's cell: a quarter of a 960 px row, 16 px high"
    assert seen[waiting] > 3 * 1000, "the three waiting ranks' cells"


_PROBE = """
<pre id="frtrace-fit"></pre>
<script>
const out = [];
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.viewBox.baseVal;
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    out.push({svg: svg.getAttribute("class"), text: t.textContent, x: b.x,
              right: b.x + b.width, width: box.width});
  }
}
document.getElementById("frtrace-fit").textContent = JSON.stringify(out);
</script>
"""


def test_every_text_of_the_pictures_is_inside_its_svg(tmp_path: Path) -> None:
    """Laid out by the browser (its fonts, not an estimate): the wait graph's caption, once
    one line cut at the 510 px of a two-column graph, and every legend entry fit."""
    html = render_html(analyze(HUNG))
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = _chromium(tmp_path, page, "--dump-dom").stdout
    found = re.search(r'<pre id="frtrace-fit">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, dom[-2000:]
    texts = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<"))
    captions = [t for t in texts if t["svg"] == "waitgraph" and "arrow points" in t["text"]]
    assert captions, "the wait graph's caption"
    assert {t["svg"] for t in texts} >= {"heatmap", "waitgraph"}
    outside = [t for t in texts if t["x"] < -0.5 or t["right"] > t["width"] + 0.5]
    assert not outside, outside
