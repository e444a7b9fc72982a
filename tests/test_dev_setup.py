"""scripts/dev-setup: the development install CI runs first (``.ci/run``), and Debian's
chromium for the browser test where it can; a chromium it cannot install is one line, never a
failed setup. Run here with stand-ins for pip, apt-get and id on PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "$CALLS"\n{body}\n')
    path.chmod(0o755)


def _setup(
    tmp_path: Path, *, pip: int = 0, apt: int = 0, uid: int = 0
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run a copy of the script whose chromium is a path that does not exist."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    text = (ROOT / "scripts" / "dev-setup").read_text()
    assert "/usr/bin/chromium" in text
    script = scripts / "dev-setup"
    script.write_text(text.replace("/usr/bin/chromium", str(tmp_path / "no-chromium")))
    script.chmod(0o755)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stub(bin_, "pip", f"exit {pip}")
    _stub(bin_, "apt-get", f"echo noise from apt-get; exit {apt}")
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (bin_ / "id").chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_}:/usr/bin:/bin", "CALLS": str(calls)}
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_the_script_is_executable_and_ci_runs_it_then_the_checks() -> None:
    assert os.access(ROOT / "scripts" / "dev-setup", os.X_OK)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "scripts/dev-setup && scripts/check" in ci


def test_installs_frtrace_for_development_and_chromium_as_root(tmp_path: Path) -> None:
    done, calls = _setup(tmp_path)
    assert done.returncode == 0, done.stderr
    assert calls == [
        "pip install torch==2.13.0 -e .[dev]",
        "apt-get update -qq",
        "apt-get install -y -qq chromium",
    ]
    assert done.stdout == "" and "noise" not in done.stderr  # quiet


def test_a_chromium_that_cannot_be_installed_is_one_line(tmp_path: Path) -> None:
    done, _ = _setup(tmp_path, apt=100)
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).strip().count("\n") == 0
    assert "chromium could not be installed" in done.stdout


@pytest.mark.parametrize("uid", [1000])
def test_not_root_no_apt_get(tmp_path: Path, uid: int) -> None:
    done, calls = _setup(tmp_path, uid=uid)
    assert done.returncode == 0 and calls == ["pip install torch==2.13.0 -e .[dev]"]


def test_a_failed_install_of_frtrace_fails_the_setup(tmp_path: Path) -> None:
    done, calls = _setup(tmp_path, pip=1)
    assert done.returncode != 0 and calls == ["pip install torch==2.13.0 -e .[dev]"]
