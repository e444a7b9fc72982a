"""Where frtrace writes (``analyze -o FILE``, ``export -o DIR``, collect's folders): never
through a link another user planted, whoever runs it (``frtrace/base/files.py``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.base.files import open_out_dir, write_file
from frtrace.cli import app
from frtrace.errors import UnsafePathError

FIXTURE = Path(__file__).parent / "fixtures" / "gloo" / "never_joins"
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's link (lchown)")


def _plant(link: Path, target: Path, uid: int = NOBODY) -> None:
    """A symbolic link of ``uid``'s at ``link`` (another user's, planted in a shared place)."""
    os.symlink(target, link)
    os.lchown(link, uid, uid)


@needs_root
def test_analyze_o_never_writes_through_another_user_s_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    report = tmp_path / "report.txt"
    _plant(report, victim)
    result = CliRunner().invoke(app, ["analyze", str(FIXTURE), "-o", str(report)])
    assert result.exit_code == 2, result.output
    assert f"error: {report} is a symbolic link of uid {NOBODY}: not followed" in result.output
    assert victim.read_text() == "root's file\n"


@needs_root
def test_analyze_o_never_writes_into_another_user_s_file(tmp_path: Path) -> None:
    """(root writing the report into a file another user made there would hand them it)"""
    theirs = tmp_path / "report.txt"
    theirs.write_text("")
    os.chown(theirs, NOBODY, NOBODY)
    result = CliRunner().invoke(app, ["analyze", str(FIXTURE), "-o", str(theirs)])
    assert result.exit_code == 2, result.output
    assert f"belongs to uid {NOBODY}: not overwritten" in result.output
    assert theirs.read_text() == ""


def test_analyze_o_writes_a_file_and_follows_the_user_s_own_link(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    mine = tmp_path / "mine.txt"
    os.symlink(real, mine)  # (this user's: followed)
    result = CliRunner().invoke(app, ["analyze", str(FIXTURE), "-o", str(mine)])
    assert result.exit_code == 1, result.output
    assert real.read_text().startswith("HANG")
    assert mine.is_symlink()
    again = CliRunner().invoke(app, ["analyze", str(FIXTURE), "-o", str(real)])
    assert again.exit_code == 1 and real.read_text().startswith("HANG")  # (shorter: no tail)


@needs_root
def test_export_o_never_writes_through_another_user_s_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    out = tmp_path / "tables"
    _plant(out, victim)
    result = CliRunner().invoke(app, ["export", str(FIXTURE), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert f"{out} is a symbolic link of uid {NOBODY}: not followed" in result.output
    assert not list(victim.iterdir())


def test_export_o_makes_its_folder_and_files(tmp_path: Path) -> None:
    out = tmp_path / "a" / "tables"
    result = CliRunner().invoke(app, ["export", str(FIXTURE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "entries.parquet",
        "files.parquet",
        "groups.parquet",
        "pg_status.parquet",
        "stacks.parquet",
    ]


def test_a_folder_below_is_never_entered_through_a_link(tmp_path: Path) -> None:
    """Even this user's own link: below the folder the user named, frtrace makes every
    folder itself."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    top = tmp_path / "incident"
    top.mkdir()
    os.symlink(elsewhere, top / "node-1")
    with open_out_dir(top) as folder:
        with pytest.raises(UnsafePathError, match="node-1 is a symbolic link: not entered"):
            folder.sub("node-1")
        with folder.sub("node-2") as made:
            write_file(made, "x.json", b"{}")
            assert stat.S_IMODE(os.fstat(made.fd).st_mode) == 0o700
    assert (top / "node-2" / "x.json").read_bytes() == b"{}"
    assert stat.S_IMODE((top / "node-2" / "x.json").stat().st_mode) == 0o600
    assert not list(elsewhere.iterdir())


def test_a_folder_renamed_away_takes_the_files_with_it(tmp_path: Path) -> None:
    """Held open: a folder swapped for a link after it was entered is still the folder."""
    top = tmp_path / "incident"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with open_out_dir(top) as folder, folder.sub("node-1") as host:
        os.rename(top / "node-1", tmp_path / "moved")
        os.symlink(elsewhere, top / "node-1")
        write_file(host, "x.json", b"{}")
    assert (tmp_path / "moved" / "x.json").exists()
    assert not list(elsewhere.iterdir())
