"""One spill folder name per user (issue 53, item 9): where the cache cannot take the columns,
``/var/tmp/frtrace-spill`` was one name for every user: the first user owned it, and everyone
else's large loads stayed in memory. Now each user spills under ``frtrace-spill-<uid>``."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from frtrace.load.handover import spill

NOBODY = 65534
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _no_cache(tmp_path: Path) -> Path:
    """A table cache whose spill folder cannot be used (a file is in its place)."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "spill").write_text("not a folder")
    return tmp_path / "cache" / "v1"


@pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")
def test_another_users_spill_folder_does_not_keep_this_users_columns_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = tmp_path / "disk"  # (/var/tmp)
    disk.mkdir(mode=0o1777)
    os.chmod(disk, 0o1777)
    first = disk / "frtrace-spill"  # another user spilled there first, under the old name
    first.mkdir(mode=0o700)
    os.chown(first, NOBODY, NOBODY)
    monkeypatch.setattr(spill, "FALLBACK_BASES", (disk,))
    monkeypatch.setattr(spill, "_in_memory", lambda path: False)
    made = spill.spill_directory(_no_cache(tmp_path))
    try:
        assert made is not None
        assert made.parent == disk / f"frtrace-spill-{os.geteuid()}"
        info = made.parent.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.geteuid(), 0o700)
    finally:
        if made is not None:
            spill.remove_spill_directory(made)


def test_the_fallback_name_is_per_user() -> None:
    assert spill.fallback_name() == f"frtrace-spill-{os.geteuid()}"


@pytest.mark.skipif(not AS_ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_real_second_user_spilled_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of another user (nobody) made the spill folder first, in a folder like
    /var/tmp, under the old shared name and its own: this user still gets a folder of its own."""
    disk = Path(os.path.realpath(tmp_path)) / "disk"
    disk.mkdir()
    os.chmod(disk, 0o1777)
    for parent in disk.parents:  # (nobody must reach it: pytest's folders are 0700)
        if parent == Path("/tmp"):
            break
        os.chmod(parent, stat.S_IMODE(parent.stat().st_mode) | 0o111)
    for name in ("frtrace-spill", f"frtrace-spill-{NOBODY}"):
        ids = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        run = subprocess.run(
            ["setpriv", *ids, "mkdir", "-m", "0700", str(disk / name)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if run.returncode != 0:
            pytest.skip(f"setpriv cannot run as nobody here: {run.stderr.strip()[-300:]}")
        assert (disk / name).stat().st_uid == NOBODY
    monkeypatch.setattr(spill, "FALLBACK_BASES", (disk,))
    monkeypatch.setattr(spill, "_in_memory", lambda path: False)
    made = spill.spill_directory(_no_cache(tmp_path))
    try:
        assert made is not None and made.parent == disk / f"frtrace-spill-{os.geteuid()}"
    finally:
        if made is not None:
            spill.remove_spill_directory(made)
