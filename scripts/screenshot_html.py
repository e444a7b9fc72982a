#!/usr/bin/env python3
"""Render an ``frtrace analyze --format html`` file in headless Chromium and save a PNG.

Used to check that the HTML report draws (tests/report/test_report_html.py) and to make the picture
in the README (docs/report.png)::

    frtrace analyze -d tests/fixtures/gloo/mesh_stall --format html -o /tmp/report.html
    python3 scripts/screenshot_html.py /tmp/report.html docs/report.png

Chromium comes from Debian's ``chromium`` package; nothing is fetched from the network (the
report has no external resources, and background networking is switched off).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["chromium_argv", "find_chromium", "screenshot"]

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_argv(
    browser: str, profile: str | Path, page: Path, *extra: str, width: int, height: int
) -> list[str]:
    """Headless Chromium on ``page`` with a new profile and no network of its own (the flags
    a closed network needs: no background networking, component updates or sync), then
    ``extra`` (``--screenshot=...``, ``--dump-dom``)."""
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        *extra,
        page.resolve().as_uri(),
    ]


def screenshot(
    html: Path, png: Path, *, width: int = 1400, height: int = 1000, timeout_s: float = 60.0
) -> Path:
    """Write a screenshot of ``html`` to ``png``; raises RuntimeError when Chromium fails."""
    browser = find_chromium()
    if browser is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install -y chromium)")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="frtrace-chromium-") as profile:
        shot = f"--screenshot={png.resolve()}"
        cmd = chromium_argv(
            browser, profile, html, "--hide-scrollbars", shot, width=width, height=height
        )
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0 or not png.exists():
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"chromium exited {result.returncode}: {' | '.join(tail)}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the HTML report")
    parser.add_argument("png", type=Path, help="where to write the screenshot")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        out = screenshot(args.html, args.png, width=args.width, height=args.height)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{out}  ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
