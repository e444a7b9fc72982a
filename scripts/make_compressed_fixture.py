#!/usr/bin/env python3
"""A real hung job's files as an upload to object storage leaves them: every file compressed on
its own, under a job/attempt/node prefix.

Takes one real fixture set (by default
``tests/fixtures/gloo_evidence/monitored_barrier__exception``: a real ``torchrun`` Gloo job
whose rank 3 stalls in host code while ranks 0-2 time out of a ``monitored_barrier``; its
dumps, the recorder's stack sidecars, torchrun's ``--log-dir`` logs and ``error.json`` files
and its console log) and writes each of its files, gzipped on its own, to
``tests/fixtures/incidents/compressed_upload/job-7f3a/attempt-0/node-0/<its path>.gz``
(``comm_lib_trace_rank_0.gz``, ``torchrun.log.gz``,
``logs/monitored_barrier/attempt_0/0/error.json.gz``...). Nothing in the files is changed.

Deterministic: gzip's header time is 0 and it names no file, the files are written in sorted
order, the folder is written anew. ``tests/incident/test_compressed_upload.py`` checks that
frtrace names the same culprit on it as on the source set, and that this script writes the
same bytes again.

Usage::

    python3 scripts/make_compressed_fixture.py                  # -> tests/fixtures/incidents/
    python3 scripts/make_compressed_fixture.py --src DIR --out OUT
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures"
SOURCE = FIXTURES / "gloo_evidence" / "monitored_barrier__exception"
OUT = FIXTURES / "incidents" / "compressed_upload"
# Where an upload to object storage puts one node's files: the job, its attempt, the node.
PREFIX = Path("job-7f3a", "attempt-0", "node-0")


def write(src: Path, out: Path) -> list[Path]:
    """Every file under ``src``, gzipped on its own, to ``out/PREFIX/<its path>.gz`` (``out``
    written anew); the files written, in order."""
    shutil.rmtree(out, ignore_errors=True)
    written = []
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
        target = out / PREFIX / path.relative_to(src).with_name(path.name + ".gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
        written.append(target)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=SOURCE, help="a real fixture set")
    parser.add_argument("--out", type=Path, default=OUT, help="the folder written (anew)")
    args = parser.parse_args()
    written = write(args.src, args.out)
    size = sum(p.stat().st_size for p in written)
    print(f"{args.out}: {len(written)} files, {size:,} bytes (from {args.src})")


if __name__ == "__main__":
    main()
