"""The diagnosis of a dump directory, kept between runs: a second ``frtrace analyze`` or
``check`` on unchanged files reads no dump and no table.

The table cache (``frtrace.load.cache``) spares the unpickling; this spares the rest (matching,
diagnosis, the stack join). What is kept is what those commands use: the ``Report`` (encoded
by ``frtrace.analysis.codec``: plain JSON, never pickle) and the load problems the CLI prints.
``--pg``, ``--ranks`` and the formats are applied afterwards, so one entry serves them all.

It is a sidecar of the directory's table-cache entry (``sets/<key>/diagnosis.json``): the
same place, the same size budget and eviction. It is used only when its identity matches:

- each dump's fingerprint, as the table cache takes it (paths, size, mtime, inode change time
  and identity, ends of the file);
- each collected Python stack file's fingerprint, and each log and error file's (the side
  files of the directory's discovery: what ``load_stacks`` and ``load_evidence`` read, every
  attempt's where the folder holds a restarted job's: the report's history reads them), and
  the discovery's own warnings (a rank with a dump in two folders: the one left out);
- a digest of the code the Report depends on (``CODE``: the load, analysis and pystack stages,
  the pipeline, this module...) and the Python version (which modules are the standard library).

The file carries a checksum of the rest (blake2b, its last field): a file edited or damaged
in any way, even into other valid JSON with a matching identity, is a miss, and deleted. It is
read only where the table cache's entry is this user's alone (``DirectoryCache.read_sidecar``:
a cache folder others share never decides a verdict).

Each part of the identity is taken before what it identifies is read, so a file rewritten
meanwhile leaves an entry that no longer matches: the code's and the side files' first, the
dumps' with them where an entry is stored (to compare), else each by the worker that reads it
(``incident.fingerprint``). A damaged entry (not JSON, a wrong field or type, another codec) is
deleted and rebuilt; any failure to write is one note on stderr, never an error. Archives are
not cached (the tables of an archive are not either).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frtrace.analysis.codec import CodecError, decode, decode_report, encode, encode_report
from frtrace.incident.discover import Discovery
from frtrace.incident.fingerprint import path_fingerprint
from frtrace.incident.problems import LoadProblem
from frtrace.load.cache import DirectoryCache, cache_disabled, cache_root
from frtrace.model import Report

__all__ = ["CODE", "FORMAT", "SIDECAR", "Diagnosis", "DiagnosisCache", "code_digest"]

FORMAT = "frtrace-diagnosis-2"
SIDECAR = "diagnosis.json"
PACKAGE = Path(__file__).resolve().parent
# The sources a Report depends on, under the package: every stage the pipeline imports, and
# what they import (tests/test_diagnosis_cache.py checks that the list stays complete).
CODE = (
    "__init__.py",
    "analysis",
    "base",  # (progress says what the run does; hashed as every module the pipeline imports)
    "detail",
    "diagnosis_cache.py",
    "errors.py",
    "evidence",
    "incident",
    "job",
    "load",
    "model.py",
    "pipeline.py",
    "pystack",
    # (never report/: the Report holds typed values, no words; report/ says them when shown)
)


_SEAL = b',"checksum":"'  # (the stored object's last field: the checksum of the rest)
_SEAL_DIGEST = 32


def _checksum(body: bytes) -> bytes:
    digest = hashlib.blake2b(body, digest_size=_SEAL_DIGEST, person=b"frtrace-diag")
    return digest.hexdigest().encode()


def _sealed(body: bytes) -> bytes:
    """The stored object's JSON (``body``) with its checksum put in as its last field."""
    if not body.endswith(b"}"):
        raise ValueError("not a JSON object")
    return body[:-1] + _SEAL + _checksum(body) + b'"}'


def _unsealed(data: bytes) -> bytes:
    """The stored object's JSON as it was written (``_sealed``); ``CodecError`` where the file
    carries no checksum, or not that of the rest (edited or damaged)."""
    tail = len(_SEAL) + 2 * _SEAL_DIGEST + 2
    seal = data[-tail:]
    body = data[:-tail] + b"}"
    if len(data) <= tail or not seal.startswith(_SEAL) or not seal.endswith(b'"}'):
        raise CodecError("no checksum")
    if seal[len(_SEAL) : -2] != _checksum(body):
        raise CodecError("its checksum does not match its content: edited or damaged")
    return body


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """What ``analyze`` and ``check`` need of a dump set: the report and the load problems."""

    report: Report
    problems: tuple[LoadProblem, ...]


def code_digest(package: Path = PACKAGE) -> str:
    """blake2b of the sources in ``CODE`` (names and contents) and of the Python version."""
    digest = hashlib.blake2b(FORMAT.encode(), digest_size=16)
    digest.update(sys.version.encode())
    for name in CODE:
        top = package / name
        for path in sorted(top.rglob("*.py")) if top.is_dir() else [top]:
            digest.update(str(path.relative_to(package)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


class DiagnosisCache:
    """The cached diagnosis of one dump directory: ``load`` it if current, ``save`` it."""

    def __init__(self, directory: Path, discovery: Discovery, attempt: int | None = None) -> None:
        self.directory = directory
        self.attempt = attempt  # --attempt: another report of the same files
        self.discovery = discovery  # (a miss loads these files: not discovered again)
        self.tables = DirectoryCache(cache_root(), directory, discovery.candidates)
        self.beside: dict[str, Any] | None = None  # the identity but the dumps' (``_beside``)
        self.usable = True  # False once a file could not be fingerprinted: nothing is saved

    @classmethod
    def open(cls, discovery: Discovery, *, attempt: int | None = None) -> DiagnosisCache | None:
        """The cache of the discovered directory; None for an archive, with the cache off, or
        where no file is a dump (nothing to key an entry on)."""
        source = discovery.directory
        if cache_disabled() or discovery.missing is not None or not source.is_dir():
            return None
        return cls(source, discovery, attempt)

    def _beside(self) -> dict[str, Any]:
        """The identity but the dumps' fingerprints: the code, the side files', the set's."""
        if self.beside is None:
            # (every attempt's: a restarted job's report holds the other attempts' history)
            side = self.discovery.all_side_files or self.discovery.side_files
            self.beside = {
                "format": FORMAT,
                "code": code_digest(),
                "stacks": [path_fingerprint(f.path) for f in side if f.kind == "stacks"],
                "evidence": [path_fingerprint(f.path) for f in side if f.kind != "stacks"],
                "set": [p.message for p in self.discovery.problems],  # (a rank found twice)
                "attempt": self.attempt,
            }
        return self.beside

    def _identity(self) -> dict[str, Any]:
        """The whole identity: the dumps' fingerprints are the table cache's (taken before
        their files were read: here, or by the workers where nothing was stored)."""
        return {**self._beside(), "files": self.tables.file_fingerprints()}

    def load(self) -> Diagnosis | None:
        """The stored diagnosis, or None when absent, stale, damaged or edited (its checksum
        does not match: then deleted), or not this user's alone (never read)."""
        try:  # before any file is read (see the module docstring)
            self._beside()
            data = self.tables.read_sidecar(SIDECAR)
            if data is None:  # nothing stored: the dumps' are taken as they are read
                return None
            identity = self._identity()
        except OSError:  # a file vanished or is unreadable: the load reports it
            self.usable = False
            return None
        try:
            stored = json.loads(_unsealed(data))
            if not isinstance(stored, dict) or set(stored) != {"identity", "report", "problems"}:
                raise CodecError("not a stored diagnosis")
            if stored["identity"] != identity:
                return None  # stale: replaced by the next save
            diagnosis = Diagnosis(
                report=decode_report(stored["report"]),
                problems=decode(tuple[LoadProblem, ...], stored["problems"]),
            )
        except (ValueError, TypeError, RecursionError):  # damaged (CodecError is a ValueError)
            self.tables.drop_sidecar(SIDECAR)
            return None
        self.tables.touch_sidecar(SIDECAR)
        return diagnosis

    def save(self, diagnosis: Diagnosis) -> None:
        """Store the diagnosis for the next run; on any failure the run goes on without."""
        if not self.usable or not self.tables.usable:  # (a dump not fingerprinted)
            return
        if not self.tables.fingerprinted and self.discovery.candidates:
            return  # (never fingerprinted after it was read)
        try:
            stored = {
                "identity": self._identity(),
                "report": encode_report(diagnosis.report),
                "problems": encode(tuple[LoadProblem, ...], diagnosis.problems),
            }
            data = _sealed(json.dumps(stored, separators=(",", ":")).encode())
        except OSError:  # a file vanished since it was read: nothing to key the entry on
            return
        except (ValueError, TypeError, RecursionError) as exc:  # a report the codec cannot say
            self.tables.drop_sidecar(SIDECAR)
            sys.stderr.write(f"frtrace: not caching the diagnosis ({str(exc)[:200]})\n")
            return
        self.tables.write_sidecar(SIDECAR, data, "diagnosis")
