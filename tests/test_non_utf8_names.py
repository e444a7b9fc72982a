"""Folder and file names whose bytes are not UTF-8 (Python spells them with lone surrogates),
with a strict UTF-8 stdout: every command goes on and shows them as ``\\udcXX`` escapes (was
"unexpected UnicodeEncodeError", exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "gloo" / "never_joins"


@pytest.fixture
def incident(tmp_path: Path) -> Path:
    """A per-host layout: one host's folder named with a byte that is not UTF-8."""
    top = tmp_path / "incident"
    host = top / os.fsdecode(b"node-\xfe")
    shutil.copytree(FIXTURE, host)
    return top


def _frtrace(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"}
    env["XDG_CACHE_HOME"] = str(cwd / "cache")
    return subprocess.run(
        [sys.executable, "-m", "frtrace", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="strict",
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_analyze_names_the_culprit_under_a_strict_utf8_stdout(
    incident: Path, tmp_path: Path, fmt: str
) -> None:
    for extra in (["--no-cache"], []):  # (the tables' cache keys the folder by its bytes)
        run = _frtrace("analyze", str(incident), "-f", fmt, *extra, cwd=tmp_path)
        assert run.returncode == 1, run.stderr[-2000:]
        assert "unexpected" not in run.stderr
        assert "culprit rank 2" in run.stdout


def test_summary_and_export_under_a_strict_utf8_stdout(incident: Path, tmp_path: Path) -> None:
    run = _frtrace("summary", str(incident), "--no-cache", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    out = tmp_path / os.fsdecode(b"tables-\xff")
    run = _frtrace("export", str(incident), "--no-cache", "-o", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "tables-\\udcff/entries.parquet" in run.stdout
    assert (out / "entries.parquet").exists()
