"""What a real incident folder goes through between the job and frtrace, as plain functions
``(src, dst) -> None``: each writes a copy of the incident folder ``src`` at ``dst`` (a
folder it makes) changed in one way that must not change the answer (the invariant harness,
``tests/test_invariants_transforms.py``). Add one by writing a function and putting it in
``TRANSFORMS``.

Deterministic: the same ``src`` gives the same bytes (gzip's header time 0, the files'
names in sorted order); every file's modification time is kept unless the transform is about
times.
"""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import lzma
import os
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "COMPRESSIONS",
    "PREFIX",
    "TRANSFORMS",
    "Transform",
    "bz2_each",
    "gzip_each",
    "has_zstandard",
    "scrambled_times",
    "under_prefix",
    "uploaded",
    "xz_each",
    "zst_each",
]

Transform = Callable[[Path, Path], None]
# Where an upload to object storage puts one node's files (a job, its attempt, the node).
PREFIX = "job-7f3a/attempt-0/node-0"


def _files(src: Path) -> list[Path]:
    """Every file under ``src``, in sorted path order (hidden ones too: a copy is whole)."""
    return sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink())


# A file already compressed is copied as it is (as ``gzip -r`` leaves ``x.gz``).
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".tgz", ".zip")


def _each(src: Path, dst: Path, suffix: str, compress: Callable[[bytes], bytes]) -> None:
    """Every file of ``src`` compressed on its own to ``dst/<its path><suffix>``, with its
    modification time (one compressed already: copied)."""
    for path in _files(src):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.name.lower().endswith(_COMPRESSED):
            shutil.copy2(path, out)
            continue
        target = out.with_name(out.name + suffix)
        target.write_bytes(compress(path.read_bytes()))
        info = path.stat()
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def gzip_each(src: Path, dst: Path) -> None:
    """Every file gzipped on its own (``rank_1.gz``, ``train.log.gz``), header time 0."""
    _each(src, dst, ".gz", lambda data: gzip.compress(data, mtime=0))


def bz2_each(src: Path, dst: Path) -> None:
    """Every file compressed with bzip2 on its own (``rank_1.bz2``)."""
    _each(src, dst, ".bz2", bz2.compress)


def xz_each(src: Path, dst: Path) -> None:
    """Every file compressed with xz on its own (``rank_1.xz``)."""
    _each(src, dst, ".xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ))


def has_zstandard() -> bool:
    return importlib.util.find_spec("zstandard") is not None


def zst_each(src: Path, dst: Path) -> None:
    """Every file compressed with zstd on its own (``rank_1.zst``; needs ``zstandard``)."""
    import zstandard  # type: ignore[import-not-found,unused-ignore]

    compressor = zstandard.ZstdCompressor(level=3)
    _each(src, dst, ".zst", compressor.compress)


def under_prefix(src: Path, dst: Path) -> None:
    """The whole set under an object-storage style prefix (``job-7f3a/attempt-0/node-0/``)."""
    shutil.copytree(src, dst / PREFIX, symlinks=True)


def uploaded(src: Path, dst: Path) -> None:
    """As an upload to object storage leaves it: every file gzipped on its own, under a
    prefix."""
    gzip_each(src, dst / PREFIX)


def scrambled_times(src: Path, dst: Path) -> None:
    """The files' times as a checkout (or a copy that did not keep them) leaves them, at their
    worst: all of them new (a year and more after the job), in reverse path order (an earlier
    snapshot's files newer than a later one's, a stale dump newer than today's); as
    ``tests/incident/test_incident_fixtures.py``'s ``checkout`` does."""
    shutil.copytree(src, dst, symlinks=True)
    files = _files(dst)
    later = max((p.stat().st_mtime for p in files), default=0.0) + 400 * 86400
    for i, path in enumerate(reversed(files)):
        os.utime(path, (later + i, later + i))


# The compressions, each on its own (zstd where the zstandard package is installed).
COMPRESSIONS: dict[str, Transform] = {
    "gzip": gzip_each,
    "bz2": bz2_each,
    "xz": xz_each,
    **({"zst": zst_each} if has_zstandard() else {}),
}

# Every transform the harness runs, by name.
TRANSFORMS: dict[str, Transform] = {
    **COMPRESSIONS,
    "prefix": under_prefix,
    "uploaded": uploaded,
    "times": scrambled_times,
}
