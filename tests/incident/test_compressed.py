"""Files compressed one by one (``rank_1.gz``, ``train.log.xz``), as uploads to object storage
leave them: known by their names without the suffix, unpacked in stage 0 within limits."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.errors import NoDumpsFound
from frtrace.incident import compressed, layout
from frtrace.incident.compressed import Refused, Unpacking, compressed_name, unpack
from frtrace.incident.discover import discover
from frtrace.incident.fingerprint import path_fingerprint, taken
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES, GLOO
from tests.transforms import has_zstandard

HANG = GLOO / "never_joins"  # ranks 0-3, rank 2 never joins
EVIDENCE = Path(__file__).parents[1] / "fixtures" / "gloo_evidence" / "monitored_barrier__exception"

PACK: dict[str, Callable[[bytes], bytes]] = {
    ".gz": lambda data: gzip.compress(data, mtime=0),
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
}
if has_zstandard():
    import zstandard  # type: ignore[import-not-found,unused-ignore]

    PACK[".zst"] = zstandard.ZstdCompressor().compress


def _packed(
    src: Path, dst: Path, suffix: str = ".gz", *, names: dict[str, str] | None = None
) -> Path:
    """``src``'s files compressed one by one into ``dst`` (a name renamed by ``names``)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.iterdir()):
        name = (names or {}).get(path.name, path.name)
        (dst / f"{name}{suffix}").write_bytes(PACK[suffix](path.read_bytes()))
    return dst


def _answer(directory: Path) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    report = analyze(directory)
    return report.verdict.value, report.culprit_ranks, report.suspected_ranks


def _zeros_gz(size: int) -> bytes:
    """A gzip file of ``size`` zero bytes, made a MiB at a time (a decompression bomb)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(size >> 20)]
    parts.append(packer.compress(bytes(size & ((1 << 20) - 1))))
    return b"".join(parts) + packer.flush()


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_a_folder_of_compressed_dumps_gives_the_plain_folders_answer(
    tmp_path: Path, suffix: str
) -> None:
    """``comm_lib_trace_rank_3.gz`` is rank 3's dump, each kind of compression alike; the
    dumps reach the reader as bytes and the files table names the compressed file."""
    names = {f"rank_{r}": f"comm_lib_trace_rank_{r}" for r in range(4)}
    folder = _packed(HANG, tmp_path / "up", suffix, names=names)
    found = discover(folder)
    assert [c.rank for c in found.candidates] == [0, 1, 2, 3]
    assert all(c.data is not None and c.path.name.endswith(suffix) for c in found.candidates)
    assert [c.relative for c in found.candidates] == [f"comm_lib_trace_rank_{r}" for r in range(4)]
    assert _answer(folder) == _answer(HANG) == ("hang", (2,), ())


def test_every_kind_of_file_is_known_by_its_name_without_the_suffix(tmp_path: Path) -> None:
    """Dumps, the recorder's sidecars, logs, error files compressed: each is what its name
    without the suffix says, its content unpacked (the same answer, the logs and stacks read);
    an archive inside the folder or a file compressed twice is not read."""
    src, folder = EVIDENCE, tmp_path / "up"
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        out = folder / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_name(out.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    (folder / "old.tar.gz").write_bytes(gzip.compress(b"not read"))
    (folder / "rank_9.gz.gz").write_bytes(gzip.compress(gzip.compress(b"not read")))
    found = discover(folder)
    kinds = {f.relative: f.kind for f in found.side_files}
    assert kinds["torchrun.log"] == "log"
    assert kinds["stacks_rank_1.json"] == "stacks"
    assert kinds["logs/monitored_barrier/attempt_0/2/error.json"] == "error_file"
    assert kinds["logs/monitored_barrier/attempt_0/2/stderr.log"] == "log"
    assert all(f.data is not None and f.path.name.endswith(".gz") for f in found.side_files)
    assert {f.path.name for f in found.skipped} == {"old.tar.gz", "rank_9.gz.gz"}
    plain, packed = analyze(src), analyze(folder)
    assert (packed.verdict, packed.culprit_ranks) == (plain.verdict, plain.culprit_ranks)
    assert packed.evidence_files == plain.evidence_files
    assert packed.stacks is not None and plain.stacks is not None
    assert packed.stacks.ranks_with_stacks == plain.stacks.ranks_with_stacks


def test_compressed_name() -> None:
    assert compressed_name("comm_lib_trace_rank_3.gz") == ("comm_lib_trace_rank_3", "gzip")
    assert compressed_name("train.log.BZ2") == ("train.log", "bz2")
    assert compressed_name("stacks_rank_2.json.xz") == ("stacks_rank_2.json", "xz")
    assert compressed_name("rank_1.zst") == ("rank_1", "zstd")
    assert compressed_name("dumps.tgz") is None
    assert compressed_name("rank_1") is None
    assert compressed_name(".gz") is None


def test_a_py_spy_sample_named_by_its_rank_only_is_sniffed_after_unpacking(tmp_path: Path) -> None:
    """``rank5.txt.gz`` holding ``py-spy dump`` output is rank 5's stack sample; a text file of
    that name holding anything else is skipped after its first bytes."""
    text = b'Process 4242: python train.py\nPython v3.11.7\n\nThread 4242 (active): "MainThread"\n'
    (tmp_path / "rank5.txt.gz").write_bytes(gzip.compress(text + b"    main (train.py:3)\n"))
    (tmp_path / "rank6.txt.gz").write_bytes(gzip.compress(b"loss 0.1\n" * 100_000))
    _, side, skipped = layout.walk(tmp_path)
    assert [(f.relative, f.kind) for f in side] == [("rank5.txt", "stacks")]
    assert [s.path.name for s in skipped] == ["rank6.txt.gz"]


def test_a_log_keeps_its_last_bytes_as_the_plain_reader_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compressed, "MAX_LOG_BYTES", 1000)
    lines = b"".join(b"line %06d\n" % i for i in range(100_000))
    (tmp_path / "train.log.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "train.log").write_bytes(lines)
    _, side, _ = layout.walk(tmp_path)
    packed = next(f for f in side if f.path.name == "train.log.gz")
    assert (
        packed.data
        == lines[-1000:]
        == layout.read_regular(tmp_path / "train.log", 1000, follow=False, tail=True)
    )
    assert packed.size_bytes == len(lines)


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_a_decompression_bomb_costs_its_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """A dump that unpacks past the dump limit (here 4 MiB) is its rank's one line, the
    others analysed; a stack sample past its limit is its one line too; unpacking stops at
    the limit (never the whole file in memory)."""
    monkeypatch.setattr(compressed, "MAX_DUMP_BYTES", 4 << 20)
    monkeypatch.setattr(compressed, "MAX_STACK_BYTES", 4 << 20)
    folder = _packed(HANG, tmp_path / "up", ".gz")
    (folder / "rank_3.gz").unlink()
    zeros = bytes(16 << 20)
    (folder / f"rank_3{suffix}").write_bytes(PACK[suffix](zeros))
    (folder / f"stacks_rank_1.json{suffix}").write_bytes(PACK[suffix](zeros))
    report = analyze(folder)
    assert report.ranks_loaded == (0, 1, 2)
    assert report.ranks_unreadable == (3,)
    found = discover(folder)
    (bomb,) = [c for c in found.candidates if c.rank == 3]
    assert bomb.data is None and bomb.refused is not None
    assert str(bomb.path) in bomb.refused and "decompresses to more than 4 MiB" in bomb.refused
    (stacks,) = [f for f in found.side_files if f.kind == "stacks"]
    assert stacks.data is None and stacks.refused and "decompresses to more than" in stacks.refused


def test_a_log_read_through_past_its_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compressed, "MAX_LOG_UNPACKED_BYTES", 8 << 20)
    raw = io.BytesIO(_zeros_gz(9 << 20))
    with pytest.raises(Refused, match="decompresses to more than"):
        unpack(raw, "gzip", limit=1000, budget=Unpacking(), tail=True)
    data = unpack(io.BytesIO(_zeros_gz(7 << 20)), "gzip", limit=1000, budget=Unpacking(), tail=True)
    assert data == (bytes(1000), 7 << 20)


def test_the_folders_budgets_refuse_the_files_past_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """What all the compressed files unpack to, and hold, is bounded: past it, the next file
    is refused (one line), whatever its size."""
    monkeypatch.setattr(compressed, "MAX_UNPACKED_BYTES", 3 << 20)
    budget = Unpacking()
    unpack(io.BytesIO(_zeros_gz(2 << 20)), "gzip", limit=4 << 20, budget=budget)
    with pytest.raises(Refused, match="unpack to more than 3 MiB in all"):
        unpack(io.BytesIO(_zeros_gz(2 << 20)), "gzip", limit=4 << 20, budget=budget)
    monkeypatch.setattr(compressed, "MAX_UNPACKED_BYTES", 8 << 20)
    monkeypatch.setattr(compressed, "MAX_HELD_BYTES", 3 << 20)
    budget = Unpacking()
    unpack(io.BytesIO(_zeros_gz(2 << 20)), "gzip", limit=4 << 20, budget=budget)
    with pytest.raises(Refused, match="would hold more than 3 MiB in all"):
        unpack(io.BytesIO(_zeros_gz(2 << 20)), "gzip", limit=4 << 20, budget=budget)


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_a_truncated_or_damaged_file_is_its_one_line(tmp_path: Path, suffix: str) -> None:
    folder = _packed(HANG, tmp_path / "up", suffix)
    whole = (folder / f"rank_1{suffix}").read_bytes()
    (folder / f"rank_1{suffix}").write_bytes(whole[: len(whole) // 2])
    (folder / f"rank_3{suffix}").write_bytes(b"\x00" * 64)
    found = discover(folder)
    refused = {c.rank: c.refused for c in found.candidates if c.refused}
    assert sorted(refused) == [1, 3]
    assert all("cannot be decompressed" in r and "\n" not in r for r in refused.values())
    report = analyze(folder)
    assert report.ranks_loaded == (0, 2) and report.ranks_unreadable == (1, 3)


def test_zst_without_zstandard_is_one_line_saying_how_to_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the zstandard package is not installed, a ``.zst`` file is refused in one line
    naming it and ``pip install zstandard``; the rest is analysed."""
    monkeypatch.setitem(sys.modules, "zstandard", None)  # (import_module raises ImportError)
    folder = _packed(HANG, tmp_path / "up", ".gz")
    (folder / "rank_3.gz").unlink()
    (folder / "rank_3.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    (folder / "train.log.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    result = CliRunner().invoke(app, ["analyze", str(folder), "--no-cache", "--allow-partial"])
    assert result.exit_code in (0, 1), result.output
    lines = [ln for ln in result.output.splitlines() if "pip install zstandard" in ln]
    assert any("rank_3.zst" in ln for ln in lines), result.output
    report = analyze(folder)
    assert report.ranks_loaded == (0, 1, 2) and report.ranks_unreadable == (3,)
    (line,) = [p for p in report.evidence_problems if p.startswith("train.log")]
    assert "pip install zstandard" in line and "\n" not in line


@pytest.mark.skipif(not has_zstandard(), reason="the zstandard package is not installed")
def test_zst_frames_are_read_across(tmp_path: Path) -> None:
    """A ``.zst`` file of several frames (``zstd`` of concatenated parts) is read whole."""
    data = (HANG / "rank_1").read_bytes()
    packer = zstandard.ZstdCompressor()
    half = len(data) // 2
    (tmp_path / "rank_1.zst").write_bytes(
        packer.compress(data[:half]) + packer.compress(data[half:])
    )
    (cand,) = discover(tmp_path).candidates
    assert cand.data == data


def test_a_multi_member_gzip_is_read_whole(tmp_path: Path) -> None:
    data = (HANG / "rank_1").read_bytes()
    half = len(data) // 2
    (tmp_path / "rank_1.gz").write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    (cand,) = discover(tmp_path).candidates
    assert cand.data == data and cand.size_bytes == len(data)


def test_only_regular_files_a_compressed_log_never_through_a_link(tmp_path: Path) -> None:
    """A FIFO named like a compressed dump is not opened (the walk would block); a link to a
    compressed log is not followed (a log never is); a link to a compressed dump is, as a
    link to a plain dump is."""
    folder = _packed(HANG, tmp_path / "up", ".gz")
    (folder / "rank_3.gz").rename(tmp_path / "elsewhere_3.gz")
    (folder / "rank_3.gz").symlink_to(tmp_path / "elsewhere_3.gz")
    (tmp_path / "secret.log.gz").write_bytes(gzip.compress(b"Traceback: not the job's\n"))
    (folder / "train.log.gz").symlink_to(tmp_path / "secret.log.gz")
    os.mkfifo(folder / "rank_7.gz")
    found = discover(folder)
    assert [c.rank for c in found.candidates] == [0, 1, 2, 3]
    reasons = {s.path.name: s.reason for s in found.skipped}
    assert reasons == {
        "train.log.gz": "a link: a log is never followed",
        "rank_7.gz": "not a regular file",
    }
    assert not found.side_files


def test_a_link_swapped_in_after_the_listing_is_not_followed(tmp_path: Path) -> None:
    """The file is opened without following a link where it was listed as none: a log
    swapped for a link after the listing is one line, never read."""
    (tmp_path / "secret").write_bytes(gzip.compress(b"secret"))
    (tmp_path / "train.log.gz").symlink_to(tmp_path / "secret")
    info = (tmp_path / "secret").stat()
    found = layout._look_at_packed(
        tmp_path / "train.log.gz", ("train.log", "gzip"), "train.log", info, False, Unpacking()
    )
    assert isinstance(found, list)
    ((log,),) = [found]
    assert log.data is None and log.refused is not None and log.refused.startswith("cannot read")


def test_the_cache_key_is_the_compressed_files(tmp_path: Path) -> None:
    """The caches fingerprint the compressed file itself: a changed file is a new key, and
    a cached run gives the changed file's answer."""
    folder = _packed(HANG, tmp_path / "up", ".gz")
    (cand,) = [c for c in discover(folder).candidates if c.rank == 2]
    assert taken(cand) is not None and taken(cand)[1] == str(folder / "rank_2.gz")  # type: ignore[index]
    before = path_fingerprint(folder / "rank_2.gz")
    runs = []
    for _ in range(2):
        result = CliRunner().invoke(app, ["analyze", str(folder), "-f", "json"])
        runs.append(json.loads(result.stdout[result.stdout.index("{") :])["culprit_ranks"])
    (folder / "rank_2.gz").write_bytes((folder / "rank_1.gz").read_bytes())  # (rank 2 joins)
    assert path_fingerprint(folder / "rank_2.gz") != before
    result = CliRunner().invoke(app, ["analyze", str(folder), "-f", "json"])
    after = json.loads(result.stdout[result.stdout.index("{") :])
    assert runs == [[2], [2]] and after["culprit_ranks"] != [2]


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind", ["tgz", "zip"])
def test_compressed_members_of_an_archive_read_as_in_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """An archive of compressed files (an upload downloaded as one) gives the folder's
    answer; a bomb member (past the dump limit: here 4 MiB) costs only itself."""
    monkeypatch.setattr(compressed, "MAX_DUMP_BYTES", 4 << 20)
    members = {
        f"job-7f3a/attempt-0/node-0/{p.relative_to(EVIDENCE)}.gz": gzip.compress(p.read_bytes())
        for p in sorted(EVIDENCE.rglob("*"))
        if p.is_file()
    }
    members["job-7f3a/attempt-0/node-0/rank_5.gz"] = _zeros_gz(8 << 20)
    path = tmp_path / f"upload.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    else:
        _tar(path, members)
    found = discover(path)
    (bomb,) = [c for c in found.candidates if c.rank == 5]
    assert bomb.refused is not None and "decompresses to more than" in bomb.refused
    assert {c.rank for c in found.candidates if c.data is not None} == {0, 1, 2}
    kinds = sorted({f.kind for f in found.side_files})
    assert kinds == ["error_file", "log", "stacks"]
    plain, packed = analyze(EVIDENCE), analyze(path)
    assert (packed.verdict, packed.culprit_ranks) == (plain.verdict, plain.culprit_ranks)
    assert len(packed.evidence_files) == len(plain.evidence_files)


def test_nothing_compressed_is_no_dump_found_as_before(tmp_path: Path) -> None:
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"hello"))
    with pytest.raises(NoDumpsFound):
        discover(tmp_path)


def test_a_debug_servers_periodic_stacks_compressed_are_read_as_periodic(tmp_path: Path) -> None:
    """``stacks_<time>.txt.gz`` is a periodic dump of every rank (its time from its name
    without the suffix), never one sample of a "rank" read from the time's digits."""
    from frtrace.pystack.discover import load_stacks

    plain = FIXTURES / "debug_server"
    for path in sorted(plain.glob("stacks_*.txt")):
        (tmp_path / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes()))

    def seen(directory: Path) -> list[tuple[int | None, int | None]]:
        stacks = load_stacks(directory)
        assert not stacks.problems
        return sorted((s.rank, s.taken_at_ns) for s in stacks.samples)

    assert seen(tmp_path) == seen(plain)
    assert len(seen(plain)) == 4


def test_one_file_never_holds_more_than_the_machine_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a small machine (here a quarter of its memory is 4 MiB) a dump that unpacks past
    that is refused while it is unpacked, not once it is held."""
    monkeypatch.setattr(compressed, "archive_bytes", lambda most: 4 << 20)
    held: list[int] = []
    budget = Unpacking()
    real = budget.room

    def room(count: int) -> None:
        held.append(count)
        real(count)

    monkeypatch.setattr(budget, "room", room)
    with pytest.raises(Refused, match="would hold more than 4 MiB in all"):
        unpack(io.BytesIO(_zeros_gz(64 << 20)), "gzip", limit=1 << 30, budget=budget)
    assert max(held) <= 5 << 20
