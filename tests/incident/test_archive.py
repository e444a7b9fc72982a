"""Dump sets packed in archives, and directories holding several incidents' dumps."""

from __future__ import annotations

import bz2
import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.errors import DuplicateRank, NoDumpsFound, SeveralDumpSets, UnreadableArchive
from frtrace.incident import archive
from frtrace.incident.discover import Candidate, discover, set_name
from frtrace.load.tables import load_dumps
from tests.conftest import GLOO, GLOO_JSON

HANG = GLOO / "never_joins"  # ranks 0-3, rank 2 never joins


def _tar(path: Path, members: dict[str, bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


MODES = {".tar": "w", ".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.bz2": "w:bz2", ".tar.xz": "w:xz"}


@pytest.mark.parametrize("suffix", [*MODES, ".zip"])
def test_an_archive_loads_like_its_directory(tmp_path: Path, suffix: str) -> None:
    """Every archive kind gives the same tables as the directory it was made from."""
    path = tmp_path / f"dumps{suffix}"
    members = {f"never_joins/{k}": v for k, v in _files(HANG).items()}
    if suffix == ".zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    else:
        _tar(path, members, MODES[suffix])
    packed = load_dumps(path, jobs=1)
    plain = load_dumps(HANG, jobs=1)
    assert packed.entries.equals(plain.entries)
    assert packed.loaded_ranks == (0, 1, 2, 3)
    assert packed.files.column("path").to_pylist()[0] == f"{path}:never_joins/rank_0"
    assert not list(tmp_path.glob("never_joins*"))  # nothing extracted


def test_bad_members_are_refused_one_line_each_and_the_rest_loads(tmp_path: Path) -> None:
    """A link, an absolute path and a `..` path named like dumps: refused; others load."""
    path = tmp_path / "d.tgz"
    good = _files(HANG)
    with tarfile.open(path, "w:gz") as tar:
        for name in ("rank_0", "rank_1"):
            info = tarfile.TarInfo(name)
            info.size = len(good[name])
            tar.addfile(info, io.BytesIO(good[name]))
        link = tarfile.TarInfo("rank_2")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
        for name in ("/abs/rank_3", "../up/rank_4"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    dumps = load_dumps(path, jobs=1)
    assert dumps.loaded_ranks == (0, 1)
    messages = {p.rank: p.message for p in dumps.problems if p.fatal}
    assert set(messages) == {2, 3, 4}
    assert messages[2].startswith(f"{path}:rank_2: refused: a link")
    assert "absolute path" in messages[3]
    assert "climbs out" in messages[4]
    assert all("\n" not in m for m in messages.values())


def test_member_size_limits_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member declared beyond MAX_DUMP_BYTES is refused unread; the archive budget holds."""
    monkeypatch.setattr(archive, "MAX_DUMP_BYTES", 100)
    data = _files(GLOO_JSON / "never_joins")
    small = {"rank_9": b'{"entries": []}'} | {k: v for k, v in data.items() if k == "rank_0.json"}
    path = _tar(tmp_path / "d.tar.gz", small)
    dumps = load_dumps(path, jobs=1)
    refused = [p.message for p in dumps.problems if p.rank == 0]
    assert refused and "larger than any Flight Recorder dump" in refused[0]
    monkeypatch.setattr(archive, "MAX_DUMP_BYTES", 1 << 30)
    monkeypatch.setattr(archive, "MAX_ARCHIVE_BYTES", len(data["rank_0.json"]) + 10)
    path = _tar(tmp_path / "e.tar.gz", data)
    dumps = load_dumps(path, jobs=1)
    assert dumps.loaded_ranks == (0,)
    assert any("GiB in all" in p.message for p in dumps.problems)


def test_a_header_that_lies_about_its_size_is_caught(tmp_path: Path) -> None:
    """The bytes actually read are checked against the declared size."""
    members = [
        archive._Member(name="rank_0", size=10, problem=None, read=lambda n, start=0: b"x" * 5)
    ]
    (cand,) = archive._take(tmp_path / "a.tar", members[0], 1 << 20)
    assert isinstance(cand, Candidate) and cand.refused and "header says 10 bytes" in cand.refused


def test_a_damaged_archive_is_one_input_error(tmp_path: Path) -> None:
    """Junk named .tgz: exit-2 error naming it; a truncated one keeps the members read."""
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(UnreadableArchive, match=r"junk\.tgz: not a readable archive"):
        discover(junk)
    whole = _tar(tmp_path / "whole.tar", _files(HANG), "w")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    found = discover(cut)
    assert found.candidates  # what came before the damage


def test_several_incidents_are_named_with_how_to_pick_one(tmp_path: Path) -> None:
    """incident1/ and incident2/ with the same ranks (two jobs): both named, with --only and
    the folder."""
    shutil.copytree(HANG, tmp_path / "incident1")
    shutil.copytree(GLOO / "late_rank", tmp_path / "incident2")
    with pytest.raises(SeveralDumpSets) as err:
        discover(tmp_path)
    message = str(err.value)
    assert "incident1/rank_* (ranks 0-3), incident2/rank_* (ranks 0-3)" in message
    assert "--only 'incident1/rank_*'" in message and str(tmp_path / "incident1") in message
    assert isinstance(err.value, DuplicateRank) and "\n" not in message
    picked = discover(tmp_path, only="incident2/rank_*")
    assert {c.relative for c in picked.candidates} == {f"incident2/rank_{r}" for r in range(4)}
    assert len(discover(tmp_path, only="incident1/*").candidates) == 4
    with pytest.raises(NoDumpsFound, match="match --only"):
        discover(tmp_path, only="incident3/*")


def test_several_prefixes_in_one_folder(tmp_path: Path) -> None:
    """nccl_trace_rank_N next to comm_lib_trace_rank_N (two jobs): named by prefix; --only
    picks one."""
    for src in HANG.iterdir():
        rank = src.name.removeprefix("rank_")
        shutil.copy(src, tmp_path / f"nccl_trace_rank_{rank}")
        shutil.copy(GLOO / "late_rank" / src.name, tmp_path / f"comm_lib_trace_rank_{rank}")
    with pytest.raises(SeveralDumpSets, match=r"comm_lib_trace_rank_\* \(ranks 0-3\)"):
        discover(tmp_path)
    assert len(discover(tmp_path, only="nccl_trace_rank_*").candidates) == 4


def test_byte_identical_copies_are_one_file(tmp_path: Path) -> None:
    """The same dumps under two prefixes and again in a subfolder (a copy beside the
    original): each rank read once, a warning per copy naming both files."""
    for src in HANG.iterdir():
        rank = src.name.removeprefix("rank_")
        shutil.copy(src, tmp_path / f"nccl_trace_rank_{rank}")
        shutil.copy(src, tmp_path / f"comm_lib_trace_rank_{rank}")
        (tmp_path / "copy").mkdir(exist_ok=True)
        shutil.copy(src, tmp_path / "copy" / src.name)
    found = discover(tmp_path)
    assert [c.relative for c in found.candidates] == [f"comm_lib_trace_rank_{r}" for r in range(4)]
    assert sorted(p.message for p in found.problems) == [
        "./: 4 dumps (ranks 0-3) have the same bytes as those in ./ (copies): each read once",
        "copy/: 4 dumps (ranks 0-3) have the same bytes as those in ./ (copies): each read once",
    ]
    assert not any(p.fatal for p in found.problems)


def test_disjoint_ranks_in_subfolders_are_one_set(tmp_path: Path) -> None:
    """Ranks 0-1 in node0/ and 2-3 in node1/ (one folder per host) are one job, no error."""
    for src in HANG.iterdir():
        node = "node0" if src.name in ("rank_0", "rank_1") else "node1"
        (tmp_path / node).mkdir(exist_ok=True)
        shutil.copy(src, tmp_path / node / src.name)
    assert [c.rank for c in discover(tmp_path).candidates] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("relative", "name"),
    [
        ("rank_3", "rank_*"),
        ("rank_3.json", "rank_*.json"),
        ("a/b/nccl_trace_rank_12", "a/b/nccl_trace_rank_*"),
        ("trace_007.pkl", "trace_*.pkl"),
    ],
)
def test_set_names(relative: str, name: str) -> None:
    assert set_name(relative) == name


def _bomb(path: Path, zeros: int, mode: str = "w:bz2") -> Path:
    """A small archive hiding ``zeros`` bytes of zeros in a member passed over, before a dump."""
    members = {"junk.bin": bytes(zeros), "rank_0": (HANG / "rank_0").read_bytes()}
    if mode == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        return path
    return _tar(path, members, mode)


@pytest.mark.parametrize("mode", ["w:bz2", "w:gz", "w:xz"])
def test_an_archive_past_its_unpacked_budget_is_one_line(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few KB that unpack to far more than a dump set: refused in one line naming the
    archive (an input error: exit 2 through the CLI), never a long stall."""
    path = _bomb(tmp_path / "bomb.tar.bz2", 8 << 20, mode)
    monkeypatch.setattr(archive, "MAX_UNPACKED_BYTES", 4 << 20)
    with pytest.raises(UnreadableArchive, match=r"bomb\.tar\.bz2: refused: it unpacks to more"):
        discover(path)
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: refused: it unpacks to more than 0.0 GiB")
    monkeypatch.setattr(archive, "MAX_UNPACKED_BYTES", 16 << 20)  # (within it: it loads)
    assert load_dumps(path, jobs=1).loaded_ranks == (0,)


@pytest.mark.parametrize("mode", ["w:bz2", "zip"])
def test_an_archive_past_its_time_budget_is_one_line(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bomb(tmp_path / ("bomb.zip" if mode == "zip" else "bomb.tar.bz2"), 1 << 20, mode)
    monkeypatch.setattr(archive, "ARCHIVE_TIMEOUT_S", -1.0)
    monkeypatch.setattr(archive, "ARCHIVE_TIMEOUT_S_PER_MIB", 0.0)
    with pytest.raises(UnreadableArchive, match=r"bomb\.\S+: refused: reading it took longer"):
        discover(path)


def test_members_passed_over_are_unpacked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read seekably, front to back: the bytes unpacked are the archive's, once (tarfile's
    stream mode copied its buffer again on every read: minutes for 64 MiB of zeros)."""
    path = _bomb(tmp_path / "bomb.tar.bz2", 16 << 20)
    spent: list[int] = []
    real = archive._Budget.spend
    monkeypatch.setattr(archive._Budget, "spend", lambda self, n: spent.append(n) or real(self, n))
    candidates = archive.read_archive(path).candidates
    assert [c.rank for c in candidates] == [0] and candidates[0].refused is None
    unpacked = len(bz2.decompress(path.read_bytes()))
    assert sum(spent) <= unpacked
    assert max(spent) <= 1 << 20  # (a MiB at a time: the clock is read between two)
