"""Long work shows its phases on stderr (frtrace.base.progress): one line per phase where stderr is
not a terminal (a CI log), a live display on a terminal, nothing with -q, nothing for a quick
run; and the C reader's notice, once."""

from __future__ import annotations

import io
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from frtrace.base.progress import Progress
from tests.conftest import GLOO
from tests.test_commands import frtrace_script

HANG = GLOO / "never_joins"
PHASE_LINE = re.compile(r"^frtrace: (discover|load|analyse|render|export): (.+) in (\d+\.\d) s$")


def _run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """The console script with stderr redirected to a file (not a terminal): the run, and
    what went to the file."""
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        done = subprocess.run(
            [frtrace_script(), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=os.environ | env,
            timeout=120,
            check=False,
        )
    return done, err.read_text()


def test_a_ci_log_gets_one_line_per_phase(tmp_path: Path) -> None:
    done, err = _run(tmp_path, "analyze", str(HANG), "--no-cache", FRTRACE_PROGRESS_AFTER_S="0")
    assert done.returncode == 1 and done.stdout.startswith("HANG: culprit rank 2")
    lines = err.splitlines()
    matched = [PHASE_LINE.match(line) for line in lines]
    assert all(matched), lines
    assert [m[1] for m in matched if m] == ["discover", "load", "analyse", "render"], lines
    said = {m[1]: m[2] for m in matched if m}
    assert said["discover"] == "4 dump files (0.0 MB)"
    assert said["load"] == "4 of 4 files"
    assert said["analyse"].startswith("4 ranks, ")
    assert said["render"] == "the text report"


def test_quiet_prints_no_phase(tmp_path: Path) -> None:
    done, err = _run(
        tmp_path, "analyze", str(HANG), "-q", "-f", "json", FRTRACE_PROGRESS_AFTER_S="0"
    )
    assert done.returncode == 1 and done.stdout.startswith("{")
    assert err == ""


def test_a_quick_run_stays_quiet(tmp_path: Path) -> None:
    """Nothing before the run has taken FRTRACE_PROGRESS_AFTER_S (1 s by default)."""
    done, err = _run(tmp_path, "analyze", str(HANG), FRTRACE_PROGRESS_AFTER_S="60")
    assert done.returncode == 1 and err == ""


def test_the_diagnosis_from_the_cache_says_so(tmp_path: Path) -> None:
    env = {"FRTRACE_PROGRESS_AFTER_S": "0", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    _run(tmp_path, "analyze", str(HANG), **env)
    done, err = _run(tmp_path, "analyze", str(HANG), **env)
    assert done.returncode == 1
    assert [line.split(":")[1].strip() for line in err.splitlines()] == [
        "discover",
        "analyse",
        "render",
    ]
    assert "the diagnosis from the cache" in err


def test_without_the_c_reader_a_notice_says_so_once(tmp_path: Path) -> None:
    """Said at once (not held back like the phases), once; not with -q."""
    env = {"FRTRACE_PURE_PYTHON": "1", "FRTRACE_PROGRESS_AFTER_S": "60"}
    done, err = _run(tmp_path, "compare", str(HANG), str(HANG), **env)
    assert done.returncode == 1
    assert err.splitlines() == [
        "frtrace: the C reader is off (FRTRACE_PURE_PYTHON is set): dumps are read in Python, "
        "with the same results, about 2x slower"
    ]
    _, quiet = _run(tmp_path, "analyze", str(HANG), "--no-cache", "-q", **env)
    assert quiet == ""


def test_the_c_reader_in_use_is_not_mentioned(tmp_path: Path) -> None:
    from frtrace.load.read import native

    if not native.active():
        pytest.skip("the C reader is not built here")
    _, err = _run(tmp_path, "analyze", str(HANG), "--no-cache", FRTRACE_PROGRESS_AFTER_S="0")
    assert "C reader" not in err


# ---- Progress itself --------------------------------------------------------------------


def test_a_long_phase_says_where_it_is_every_interval() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, after_s=0, interval_s=0.05, terminal=False)
    with progress.phase("load", total=3) as phase:
        phase.update(1)
        time.sleep(0.08)
        phase.update(2)
    with progress.phase("analyse") as step:  # (no count: its own thread says it runs)
        step.describe("3 ranks")
        time.sleep(0.7)
    progress.close()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"frtrace: load: 2 of 3 files so far, 0\.\d s", lines[0]), lines
    assert re.fullmatch(r"frtrace: load: 2 of 3 files in 0\.\d s", lines[1]), lines
    assert any(re.fullmatch(r"frtrace: analyse: running, 0\.\d s", x) for x in lines[2:-1])
    assert re.fullmatch(r"frtrace: analyse: 3 ranks in 0\.\d s", lines[-1]), lines
    assert not [t for t in threading.enumerate() if t.name == "frtrace-progress"]


def test_phases_ended_before_the_threshold_come_out_with_the_first_line() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, after_s=0.1, terminal=False)
    with progress.phase("discover") as phase:
        phase.describe("2 dump files (0.0 MB)")
    assert out.getvalue() == ""
    time.sleep(0.12)
    with progress.phase("load", total=2) as load:
        load.update(1)
        assert out.getvalue().startswith("frtrace: discover: 2 dump files (0.0 MB) in ")
        load.update(2)
    progress.close()
    assert len(out.getvalue().splitlines()) == 2


def test_a_phase_that_fails_says_nothing_and_the_notice_comes_once() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, after_s=0, terminal=False)
    with pytest.raises(OSError), progress.phase("discover"):
        raise OSError("gone")
    progress.notice("something to know")
    progress.notice("something to know")
    progress.close()
    assert out.getvalue() == "frtrace: something to know\n"
    off = Progress(enabled=False, stream=out)
    off.notice("not said")
    with off.phase("load", total=1) as phase:
        phase.update(1)
    off.close()
    assert out.getvalue() == "frtrace: something to know\n"


def test_a_terminal_gets_a_live_display_of_every_phase() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, after_s=0, terminal=True)
    with progress.phase("discover") as phase:
        phase.describe("2 dump files (0.0 MB)")
    with progress.phase("load", total=2) as load:
        time.sleep(0.11)  # (redrawn at most every 0.1 s)
        load.update(1)
        assert "1 of 2 files" in out.getvalue() and "━" in out.getvalue()  # the bar
        load.update(2)
    progress.notice("a notice above the display")
    progress.close()
    shown = out.getvalue()
    assert "a notice above the display" in shown
    last = shown[shown.rindex("discover") :]
    assert "2 dump files (0.0 MB)" in last and "2 of 2 files" in last and "✓" in last
