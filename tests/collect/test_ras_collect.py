"""``collect`` saves NCCL RAS's answer beside the dumps where ``ncclras`` is installed
(``frtrace.collect.ras``): a stand-in ``ncclras`` (a script that answers, fails, or hangs)
is run as the real one would be; nothing is done without one."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from frtrace.base.files import open_out_dir
from frtrace.collect import ras
from frtrace.evidence.ras import read_ras
from frtrace.incident.layout import walk
from tests.conftest import FIXTURES

ANSWER = FIXTURES / "ras" / "stream_busy" / "ncclras.json"


def _client(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "bin" / "ncclras"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _save(tmp_path: Path, exe: str | None, **kw: int) -> tuple[tuple[str, ...], Path]:
    out = tmp_path / "out"
    with open_out_dir(out) as folder:
        said = ras.save_ras_status(folder, which=lambda name: exe, **kw)
    return said, out


def test_the_answer_is_saved_and_read(tmp_path: Path) -> None:
    """``ncclras -f json -t 5``, its output as ``ncclras.json`` (0600), read back as RAS."""
    args = tmp_path / "args"
    exe = _client(tmp_path, f'echo "$@" > {args}\ncat {ANSWER}')
    said, out = _save(tmp_path, exe)
    assert said == ()
    saved = out / ras.RAS_FILE_NAME
    assert saved.read_bytes() == ANSWER.read_bytes()
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert args.read_text().split() == ["-f", "json", "-t", "5"]
    read = read_ras(walk(out)[1])
    assert read.statuses and not read.problems


def test_not_installed_nothing_done(tmp_path: Path) -> None:
    said, out = _save(tmp_path, None)
    assert said == () and os.listdir(out) == []


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("echo 'Invalid format: json' >&2; exit 1", "exit 1: Invalid format: json"),
        ("exit 0", "an answer of 0 bytes"),
    ],
)
def test_no_answer_no_file_one_line(tmp_path: Path, body: str, line: str) -> None:
    said, out = _save(tmp_path, _client(tmp_path, body))
    assert os.listdir(out) == []
    (only,) = said
    assert only.startswith("ncclras: ") and line in only


def test_a_client_that_hangs_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded: past RAS's own wait and a margin, the client and what it started (holding its
    output open) are stopped; never anything else."""
    monkeypatch.setattr(ras, "_MARGIN_S", 0.5)
    started = time.monotonic()
    exe = _client(tmp_path, "sleep 30 &\nexec sleep 30")
    said, out = _save(tmp_path, exe, timeout_s=0)
    assert time.monotonic() - started < 10
    assert os.listdir(out) == []
    assert "no answer in" in said[0]
