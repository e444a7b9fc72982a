"""The loaded tables of a dump directory, kept between runs so a second command skips unpickling.

People run frtrace several times on the same dumps (``analyze``, ``show --pg 3``, ``-f html``,
``check``). The first run stores the five merged tables of the directory as Arrow IPC files;
later runs memory-map them instead of reading the dumps, as long as nothing changed.

Layout, under ``$XDG_CACHE_HOME/frtrace`` (else ``~/.cache/frtrace``)::

    v1/sets/<blake2b of the directory's absolute path>/
        manifest.json          what the tables were built from (below); written last
        <token>/entries.arrow  stacks.arrow  groups.arrow  pg_status.arrow  files.arrow
        diagnosis.json         a sidecar: what later stages derived from the same files

Key and invalidation: the manifest holds a fingerprint of every dump file (path as given and
absolute, size, mtime_ns, inode change time (ctime_ns: a user cannot set it back, as mtime can
be), device and inode, and blake2b of its size, first and last 16 KiB) and of the code that
reads them (the sources of ``frtrace/load``). The tables are used only when all of it matches:
a changed, added or removed file, or another frtrace, reads the dumps again and replaces the
entry. Each table's byte count and checksum (adler32, 2.5 GB/s) are checked before it is used, so a
damaged entry is deleted and rebuilt, never used. Each fingerprint is taken before its file is
read (``incident.fingerprint``): all of them first where a manifest is there to compare with, else
by the load's workers, each as it opens its file (``taken``).

Writes are atomic (a new ``<token>`` folder, then ``os.replace`` of the manifest) and never
fatal: a read-only or full cache disables caching for the run with one note on stderr. The
tables hold what the dumps hold: every folder is made 0700 (``frtrace`` itself is narrowed to
0700 where an earlier version left it open) and every file 0600, whatever the umask.
Eviction: after each write, whole entries are deleted, least recently used first (the
manifest's mtime, touched on every hit), until the cache holds at most
``FRTRACE_CACHE_MAX_BYTES`` (default 4 GiB); an entry larger than that is not stored.
``--no-cache`` or ``FRTRACE_NO_CACHE=1`` turn the cache off.

Whose entry: the cache may sit in a folder others share (one ``XDG_CACHE_HOME`` for every user,
as some images and cluster modules set it). An entry is read only where it and every folder
above it up to the cache's own (``frtrace/``, ``v1/``, ``sets/``) is this user's and no one
else's to write, and so is each file read: each opened from the one above (``O_NOFOLLOW``: a
link, or a folder renamed meanwhile, is never followed) and checked by its ``fstat``
(``_open_entry``); anything else is a miss, never read. The write path checks the same, having
narrowed this user's folders that are open to others to 0700.

Sidecars (``read_sidecar`` / ``write_sidecar``): a later stage may keep one JSON file of its
own in the entry (``frtrace.diagnosis_cache`` keeps the diagnosis), keyed and checked by its
writer. It is written atomically, counted in the entry's size, and its mtime counts as a use
of the entry; it goes with the entry when the tables are found damaged or evicted.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from frtrace.base.files import replace_file
from frtrace.base.owned import (
    exists_at,
    open_dir,
    open_private,
    private_directory,
    private_file,
    read_private,
)
from frtrace.incident.discover import Candidate
from frtrace.incident.fingerprint import Fingerprint, file_fingerprint
from frtrace.load.cachefiles import Checksummed, crc, evict

if TYPE_CHECKING:  # imported where used: a hit of the diagnosis cache needs no pyarrow
    import pyarrow as pa

__all__ = [
    "TABLES",
    "DirectoryCache",
    "cache_disabled",
    "cache_root",
    "finish_saving",
    "private_directory",
]

FORMAT = "frtrace-tables-1"
TABLES = ("entries", "stacks", "groups", "pg_status", "files")
DEFAULT_MAX_BYTES = 4 << 30
# Tables being stored in the background (``DirectoryCache.save_in_background``).
_SAVING: list[threading.Thread] = []


def finish_saving() -> None:
    """Wait until the tables being stored in the background are stored (or given up)."""
    while _SAVING:
        _SAVING.pop().join()


def cache_root() -> Path:
    """Where the cache lives: ``$XDG_CACHE_HOME/frtrace``, else ``~/.cache/frtrace``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "frtrace" / "v1"


def cache_disabled() -> bool:
    """True when ``FRTRACE_NO_CACHE`` is set to anything but "", "0" or "false"."""
    return os.environ.get("FRTRACE_NO_CACHE", "").strip().lower() not in ("", "0", "false")


def _max_bytes() -> int:
    try:
        return int(os.environ.get("FRTRACE_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def _code_version() -> str:
    """A digest of the loader's sources (``load/`` with its rooms, and the incident stage that
    lists what it reads): tables written by other code are never reused."""
    digest = hashlib.blake2b(FORMAT.encode(), digest_size=16)
    package = Path(__file__).resolve().parents[1]
    for top in ("incident", "load"):
        for path in sorted((package / top).rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class DirectoryCache:
    """The cache entry of one dump directory: ``load`` its tables if current, ``save`` them."""

    def __init__(self, root: Path, directory: Path, candidates: Sequence[Candidate]) -> None:
        self.root = root
        key = hashlib.blake2b(os.fsencode(os.path.abspath(directory)), digest_size=16).hexdigest()
        self.entry = root / "sets" / key
        self.candidates = candidates
        self.identity: dict[str, Any] | None = None  # worked out on first use
        self.usable = True  # False once a dump could not be fingerprinted: nothing is saved
        self.token: str | None = None  # the folder ``prepare`` made for the next save

    def _identity(self, files: Sequence[Fingerprint] | None = None) -> dict[str, Any]:
        if self.identity is None:
            if files is None:
                files = [file_fingerprint(c) for c in self.candidates]
            self.identity = {"format": FORMAT, "code": _code_version(), "files": list(files)}
        return self.identity

    def file_fingerprints(self) -> list[Fingerprint]:
        """Each dump's ``file_fingerprint``, in candidate order (``OSError``: one vanished)."""
        files: list[Fingerprint] = self._identity()["files"]
        return files

    @property
    def fingerprinted(self) -> bool:
        """Whether the dumps' fingerprints are taken (else: to be taken as they are read)."""
        return self.identity is not None

    def fingerprint_now(self) -> None:
        """Take every dump's fingerprint here, before any is read (a file that cannot be
        fingerprinted: nothing is stored)."""
        try:
            self._identity()
        except OSError:
            self.usable = False

    def taken(self, files: Sequence[Fingerprint | None]) -> None:
        """The dumps' fingerprints, each taken by its reader before reading it
        (``fingerprint.taken``), in candidate order; one missing (a file that could not be
        opened, or that crashed its reader): nothing is stored."""
        if self.identity is not None:
            return
        present = [f for f in files if f is not None]
        if len(present) != len(self.candidates):
            self.usable = False
            return
        self._identity(present)

    def _open_entry(self, *, narrow: bool = False) -> int | None:
        """A descriptor of the entry's folder where it and every folder above it up to the
        cache's own (``frtrace/``, ``v1/``, ``sets/``) is this user's and no one else's to
        write (``mine``; ``narrow``: this user's open to others narrowed to 0700 first, as
        the write path does), each opened from the one above, never through a link; None
        where one is missing or not so (another user's, open to others, a link)."""
        top = self.root.parent  # (frtrace/)
        fd = -1
        try:
            fd = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
            for name in (top.name, self.root.name, "sets", self.entry.name):
                below = open_dir(name, fd, narrow=narrow)
                os.close(fd)
                fd = below
        except OSError:
            if fd >= 0:
                os.close(fd)
            return None
        return fd

    def _writable_entry(self) -> bool:
        """The write path's check: the entry made (``private_directory``: each folder made
        0700, frtrace's narrowed) and, with each folder above it, this user's alone
        (``_open_entry``, narrowing): what the read path asks of it."""
        if not private_directory(self.entry, narrow=self.root.parent):
            return False
        fd = self._open_entry(narrow=True)
        if fd is None:
            return False
        os.close(fd)
        return True

    def load(self) -> dict[str, pa.Table] | None:
        """The cached tables (memory-mapped), or None when absent, stale or damaged, or not
        this user's alone (``_open_entry``: then never read, nor deleted)."""
        finish_saving()  # (tables still being stored by this process: stored first)
        entry = self._open_entry()
        if entry is None:
            return None
        try:
            return self._load(entry)
        finally:
            os.close(entry)

    def _load(self, entry: int) -> dict[str, pa.Table] | None:
        # The identity is taken before the dumps are read: a file rewritten while it is read
        # then leaves an entry that no longer matches, never one that matches stale tables.
        # With no manifest there is nothing to compare: the workers take it file by file.
        manifest_path = self.entry / "manifest.json"
        if self.identity is None and not exists_at("manifest.json", entry):
            self._drop()
            return None
        try:
            identity = self._identity()
        except OSError:  # a dump vanished or is unreadable: read the dumps (and report it)
            self.usable = False
            return None
        try:
            manifest = json.loads(read_private("manifest.json", entry, _max_bytes()))
        except (OSError, ValueError):
            self._drop()
            return None
        if not isinstance(manifest, dict) or any(manifest.get(k) != v for k, v in identity.items()):
            return None  # stale: replaced by the next save
        try:
            tables = self._read_tables(manifest, entry)
        except Exception:  # damaged in any way: rebuilt from the dumps
            self._drop()
            return None
        with contextlib.suppress(OSError):
            os.utime(manifest_path)  # most recently used
        return tables

    def _read_tables(self, manifest: Mapping[str, Any], entry: int) -> dict[str, pa.Table]:
        """The tables the manifest describes, each read from the entry (the folder ``entry``)
        by descriptors checked as the entry is (``open_private``), memory-mapped."""
        import mmap

        import pyarrow as pa
        import pyarrow.ipc as ipc

        token = str(manifest["token"])
        if not token.isalnum():
            raise ValueError(f"{token!r}: not a token")
        folder = open_dir(token, entry)
        try:
            tables = {}
            for name in TABLES:
                path = self.entry / token / f"{name}.arrow"
                expect = manifest["tables"][name]
                fd, info = open_private(path.name, folder)
                try:
                    if info.st_size != expect["bytes"] or crc(fd) != expect["crc"]:
                        raise ValueError(f"{path}: damaged")
                    mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                finally:
                    os.close(fd)
                table = ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all()
                if table.num_rows != expect["rows"]:
                    raise ValueError(f"{path}: {table.num_rows} rows, not {expect['rows']}")
                tables[name] = table
        finally:
            os.close(folder)
        return tables

    def prepare(self, name: str) -> Path | None:
        """Where table ``name`` is to be written by the caller before ``save`` (a new folder
        of this entry's), or None where nothing can be stored."""
        finish_saving()
        if not self.usable:
            return None
        try:
            self._identity()
            if not self._writable_entry():
                return None
            token = secrets.token_hex(8)
            (self.entry / token).mkdir(mode=0o700)
        except OSError:
            return None
        self.token = token
        return self.entry / token / f"{name}.arrow"

    def save_in_background(
        self, tables: Mapping[str, pa.Table], written: Mapping[str, int] | None = None
    ) -> None:
        """``save`` in a thread, while the caller goes on (the analysis: on a second core,
        a first run then costs what a run without the cache does). ``finish_saving`` waits
        for it; so do the next ``load``, ``save`` and sidecar write, and the interpreter's
        exit. The thread only reads the tables (immutable) and writes this entry."""
        finish_saving()
        args = (dict(tables), dict(written or {}))
        thread = threading.Thread(target=self._save, args=args, name="frtrace-cache")
        thread.start()
        _SAVING.append(thread)

    def _save(self, tables: Mapping[str, pa.Table], written: Mapping[str, int]) -> None:
        try:
            self.save(tables, written)
        except Exception as exc:  # (in a thread: one note, as for a full disk, not a trace;
            # a folder left half written is removed by the next save, as an earlier one)
            _note(f"not caching the loaded tables ({type(exc).__name__}: {str(exc)[:120]})")

    def save(
        self, tables: Mapping[str, pa.Table], written: Mapping[str, int] | None = None
    ) -> None:
        """Store the tables for the next run; on any failure the run goes on without.
        ``written``: the tables already written where ``prepare`` said, and their bytes; their
        checksum is taken here, read back from the page cache (in the background, beside the
        analysis: the gather that wrote them has the run's one busy CPU)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        finish_saving()
        written = written or {}
        prepared = self.token is not None
        token, self.token = self.token or secrets.token_hex(8), None
        folder = self.entry / token
        if not self.usable:
            shutil.rmtree(folder, ignore_errors=True)
            return
        try:
            identity = self._identity()
            if not self._writable_entry():
                raise OSError(errno.EPERM, "not a folder of this user's", str(self.entry))
            folder.mkdir(mode=0o700, exist_ok=prepared)
            described = {}
            for name in TABLES:
                path = folder / f"{name}.arrow"
                if name in written:
                    size = written[name]
                    if path.stat().st_size != size:
                        raise OSError(errno.EIO, "not the size it was written at", str(path))
                    checksum = crc(path)
                    described[name] = {
                        "bytes": size,
                        "crc": checksum,
                        "rows": tables[name].num_rows,
                    }
                    continue
                with open(private_file(path), "wb") as raw:
                    sink = Checksummed(raw)
                    with ipc.new_file(sink, tables[name].schema) as writer:
                        writer.write_table(tables[name])
                described[name] = {
                    "bytes": path.stat().st_size,
                    "crc": sink.crc,
                    "rows": tables[name].num_rows,
                }
            size = sum(d["bytes"] for d in described.values())
            if size > _max_bytes():  # would evict everything else: not stored (nor older ones)
                self._drop()
                return
            manifest = {**identity, "token": token, "tables": described}
            replace_file(self.entry / "manifest.json", json.dumps(manifest).encode())
        except (OSError, pa.ArrowException) as exc:  # read-only, full, or a dump vanished
            shutil.rmtree(folder, ignore_errors=True)
            where = getattr(exc, "filename", None) or self.root
            why = getattr(exc, "strerror", None) or str(exc)[:120]
            _note(f"not caching the loaded tables ({where}: {why})")
            return
        for old in self.entry.iterdir():  # earlier tables of this directory
            if old.name != token and old.name != "manifest.json" and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        evict(self.root / "sets", _max_bytes(), keep=self.entry)

    def _drop(self) -> None:
        shutil.rmtree(self.entry, ignore_errors=True)

    def read_sidecar(self, name: str) -> bytes | None:
        """The content of the sidecar ``name`` (``*.json``), or None when there is none, or
        when it or its entry is not this user's alone (``_open_entry``: never read)."""
        entry = self._open_entry()
        if entry is None:
            return None
        try:
            return read_private(name, entry, _max_bytes())
        except OSError:
            return None
        finally:
            os.close(entry)

    def write_sidecar(self, name: str, data: bytes, what: str) -> None:
        """Store the sidecar atomically, then evict; on failure one note on stderr (``what``
        says what is not cached)."""
        if not name.endswith(".json") or "/" in name:
            raise ValueError(f"{name}: a sidecar is one *.json file")
        finish_saving()  # (the tables first: a sidecar is of stored tables)
        try:
            if len(data) > _max_bytes():  # would evict everything else: not stored
                self.drop_sidecar(name)
                return
            if not self._writable_entry():
                raise OSError(errno.EPERM, "not a folder of this user's", str(self.entry))
            replace_file(self.entry / name, data)
        except OSError as exc:  # read-only or full (the temporary file is removed)
            _note(f"not caching the {what} ({exc.filename or self.root}: {exc.strerror})")
            return
        evict(self.root / "sets", _max_bytes(), keep=self.entry)

    def touch_sidecar(self, name: str) -> None:
        """Mark the entry used now (eviction goes by the newest manifest or sidecar)."""
        with contextlib.suppress(OSError):
            os.utime(self.entry / name)

    def drop_sidecar(self, name: str) -> None:
        """Delete the sidecar (damaged, or too large to keep)."""
        with contextlib.suppress(OSError):
            (self.entry / name).unlink(missing_ok=True)


def _note(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"frtrace: {message}; pass --no-cache to silence this\n")
