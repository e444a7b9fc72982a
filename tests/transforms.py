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
import json
import lzma
import os
import pickle
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "COMPRESSIONS",
    "PREFIX",
    "SKEWS",
    "TRANSFORMS",
    "Transform",
    "bz2_each",
    "gzip_each",
    "has_zstandard",
    "scrambled_times",
    "skewed_ahead",
    "skewed_behind",
    "two_hosts_skewed",
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


# The absolute times a dump's entry records (its host's wall clock; FORMAT.md, "Clocks").
_ENTRY_TIMES = (
    "time_created_ns",
    "time_created_us",  # (torch 2.2's)
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
)
_RANK_OF_NAME = re.compile(r"(\d{1,7})(?:\.json|\.pkl|\.pickle)?$")


def _read_doc(data: bytes) -> tuple[Any, str] | None:
    """A dump's or a recorder sidecar's document and its format ("pickle" or "json"), or
    None for any other file (a log, an archive, a compressed file)."""
    try:
        if data[:1] == b"\x80":
            return pickle.loads(data), "pickle"  # (this repository's fixtures: plain data)
        return json.loads(data), "json"
    except Exception:
        return None


def _shifted(doc: Any, offset_ns: int) -> tuple[Any, int | None]:
    """A dump's or a sidecar's document with its absolute times moved by ``offset_ns`` (its
    host's clock ahead or behind), and its rank where it says or None (a dump: from its
    name); ``(None, None)`` for a document that is neither."""
    entries = doc.get("entries") if isinstance(doc, dict) else doc
    if isinstance(doc, dict) and doc.get("format") == "frtrace-stacks":
        if isinstance(doc.get("dumped_at_ns"), int):
            doc["dumped_at_ns"] += offset_ns
        return doc, doc.get("rank") if isinstance(doc.get("rank"), int) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None, None
    for entry in entries:
        for key in _ENTRY_TIMES:
            if isinstance(entry.get(key), int) and entry[key]:  # (JSON's 0: never observed)
                scale = 1_000 if key.endswith("_us") else 1
                entry[key] += offset_ns // scale
    return doc, None


def two_hosts_skewed(src: Path, dst: Path, offset_s: float) -> None:
    """The job as two hosts leave it, the second's clock ``offset_s`` ahead (behind where
    negative) of the first's (no NTP): the upper half of the ranks' dumps (ranks from
    ``world // 2``, the world the highest rank's) and recorder sidecars moved into a
    ``host-b/`` folder beside where they were, every absolute time in them moved by
    ``offset_s``; the lower half's into ``host-a/``, as they are. Other files (logs,
    manifests, compressed files) stay as they are; every file keeps its modification time."""
    offset_ns = round(offset_s * 1e9)
    shutil.copytree(src, dst, symlinks=True)
    found: list[tuple[Path, Any, str, int]] = []
    for path in _files(dst):
        read = _read_doc(path.read_bytes())
        if read is None:
            continue
        doc, rank = _shifted(read[0], 0)
        m = _RANK_OF_NAME.search(path.name)
        rank = rank if rank is not None else (int(m[1]) if m and doc is not None else None)
        if doc is not None and rank is not None:
            found.append((path, read[0], read[1], rank))
    world = max((rank for *_, rank in found), default=0) + 1
    for path, doc, kind, rank in found:
        upper = world > 1 and rank >= world // 2
        if upper:
            _shifted(doc, offset_ns)
        info = path.stat()
        target = path.parent / ("host-b" if upper else "host-a") / path.name
        target.parent.mkdir(exist_ok=True)
        if upper:
            data = pickle.dumps(doc, protocol=2) if kind == "pickle" else json.dumps(doc).encode()
            target.write_bytes(data)
            path.unlink()
        else:
            path.rename(target)
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def skewed_ahead(src: Path, dst: Path) -> None:
    """Two hosts, the second's clock 7 minutes ahead (``two_hosts_skewed``)."""
    two_hosts_skewed(src, dst, 420)


def skewed_behind(src: Path, dst: Path) -> None:
    """Two hosts, the second's clock 7 minutes behind (``two_hosts_skewed``)."""
    two_hosts_skewed(src, dst, -420)


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

# Two hosts' clocks apart (``tests/test_invariants_skew.py``: not every rule holds yet).
SKEWS: dict[str, Transform] = {"skew+420": skewed_ahead, "skew-420": skewed_behind}
