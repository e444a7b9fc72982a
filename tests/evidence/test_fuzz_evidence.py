"""Fuzzing the evidence readers: a damaged or hostile side file costs that file, in bounded time.

Real side files (torchrun and srun logs, torchelastic's ``error.json``, the recorder's
sidecars, py-spy text and ``--json``, faulthandler output, the debug server's periodic dumps,
``collect``'s manifest) are mutated as bytes (cut, bits flipped, bytes inserted, deleted,
spliced) and with hostile pieces (numbers of thousands of digits, ranks outside any job,
``inf`` and ``NaN``, deep nesting, a pattern repeated over a long line, control characters,
no line ends). Each case puts one mutated file beside the four dumps of a hung job whose
culprit is rank 2 and reads the directory's stacks, evidence and manifests as ``analyze``
does: no exception, each case within ``CASE_SECONDS``, and no rank outside the job in what
they give; every ``FULL_EVERY``-th case is analysed whole (the culprit stays rank 2, nothing
outside ranks 0-3 is named).

Every case is a pure function of (seed, index); the run lasts ``FRTRACE_FUZZ_EVIDENCE_SECONDS``
(5 unless set), or exactly ``FRTRACE_FUZZ_EVIDENCE_CASES`` cases:

    FRTRACE_FUZZ_EVIDENCE_SECONDS=600 python3 -m pytest tests/evidence/test_fuzz_evidence.py
    FRTRACE_FUZZ_EVIDENCE_ONLY=123 python3 -m pytest tests/evidence/test_fuzz_evidence.py -s
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from frtrace.evidence.collected import read_collected
from frtrace.evidence.discover import load_evidence
from frtrace.evidence.injob import dump_files, within_job
from frtrace.incident.layout import walk
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import load_dumps
from frtrace.pipeline import analyze_loaded
from frtrace.pystack.discover import load_stacks
from tests.conftest import FIXTURES

SECONDS = float(os.environ.get("FRTRACE_FUZZ_EVIDENCE_SECONDS", "5"))
CASES = os.environ.get("FRTRACE_FUZZ_EVIDENCE_CASES")
ONLY = os.environ.get("FRTRACE_FUZZ_EVIDENCE_ONLY")
SEED = int(os.environ.get("FRTRACE_FUZZ_EVIDENCE_SEED", "30"))
CASE_SECONDS = 12.0  # a log's own budget is 10 s
FULL_EVERY = 10
JOB = FIXTURES / "gloo" / "never_joins"  # four ranks, HANG: culprit rank 2

_EVIDENCE = FIXTURES / "gloo_evidence"
# (a seed file, the name it is given beside the dumps: the name decides its reader)
_SEEDS: tuple[tuple[Path, str], ...] = (
    (_EVIDENCE / "crash_segfault__signal" / "torchrun.log", "torchrun.log"),
    (_EVIDENCE / "crash_segfault__signal" / "stacks_rank_0.json", "stacks_rank_0.json"),
    (_EVIDENCE / "crash_segfault__signal" / "pyspy_rank_0.txt", "pyspy_rank_0.txt"),
    (
        _EVIDENCE / "pp_gpipe_exception__signal/logs/pp_gpipe_exception/attempt_0/3/error.json",
        "error_3.json",
    ),
    (FIXTURES / "pystack" / "pyspy_rank_1.json", "pyspy_rank_1.json"),
    (FIXTURES / "pystack" / "faulthandler_signal.txt", "faulthandler_rank_1.txt"),
    (FIXTURES / "pystack" / "traceback_rank_0.txt", "traceback_rank_0.txt"),
    (FIXTURES / "debug_server" / "stacks_20261126_003738.txt", "stacks_20261126_003738.txt"),
)
_MANIFEST = json.dumps(
    {
        "format": "frtrace-collect",
        "version": 1,
        "ranks": [
            {"rank": r, "host": "n1", "pid": 10 + r, "dumped_at_ns": 1, "dump": f"rank_{r}"}
            for r in range(4)
        ],
    }
).encode()

_HOSTILE: tuple[bytes, ...] = (
    b"9" * 5000,
    b"-" + b"9" * 5000,
    b"1000000000",
    b"-5",
    b"1e300",
    b"inf",
    b"NaN",
    b"[" * 5000,
    b"{" * 5000,
    b"Assertion " * 3000,
    b"[rank" + b"9" * 4400 + b"]: ",
    b"[rank1000000000]: RuntimeError: x\n",
    b"Signal " + b"9" * 4400,
    b"SeqNum=" + b"9" * 4400 + b", OpType=ALLREDUCE",
    b"  rank      : " + b"9" * 4400 + b" (local_rank: 0)\n",
    b"Ranks " + b"1," * 2000 + b" failed to pass monitoredBarrier",
    b"Process " + b"9" * 4400 + b": python\n",
    b"=== Rank " + b"9" * 30 + b": http://h:1 ===\n",
    "\x00\x1b[2J\x1b]0;x\x07\u202e".encode(),
    b"\r" * 1000,
    b"\xff\xfe" * 100,
)

# Lines as a launcher writes them, with numbers no job has
_HOSTILE_LINES: tuple[bytes, ...] = (
    b"[rank" + b"9" * 4400 + b"]: RuntimeError: x",
    b"[rank1000000000]: RuntimeError: x",
    b"[default" + b"9" * 7 + b"]:ValueError: y",
    b"  rank      : " + b"9" * 4400 + b" (local_rank: 0)",
    b"[E1125 10:00:00.1 1 x.cpp:1] Signal " + b"9" * 4400 + b" (SIGSEGV) received",
    b"Process " + b"9" * 4400 + b": python train.py",
    b"=== Rank " + b"9" * 7 + b": http://h:1 ===",
    b"failed (exitcode: -" + b"9" * 4400 + b") local_rank: 0 (pid: 1)",
)


@dataclass(frozen=True, slots=True)
class Case:
    index: int
    name: str
    data: bytes
    how: str


def _mutations(rng: random.Random) -> list[tuple[str, Callable[[bytes], bytes]]]:
    def cut(d: bytes) -> bytes:
        return d[: rng.randrange(len(d) + 1)]

    def flip(d: bytes) -> bytes:
        b = bytearray(d)
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)

    def insert(d: bytes) -> bytes:
        at = rng.randrange(len(d) + 1)
        return d[:at] + rng.choice(_HOSTILE) + d[at:]

    def replace_number(d: bytes) -> bytes:
        digits = [i for i, c in enumerate(d) if 48 <= c <= 57]
        if not digits:
            return insert(d)
        at = rng.choice(digits)
        return d[:at] + rng.choice(_HOSTILE) + d[at + 1 :]

    def add_line(d: bytes) -> bytes:  # a hostile line where a line starts
        starts = [0] + [i + 1 for i, c in enumerate(d) if c == 10]
        at = rng.choice(starts)
        return d[:at] + rng.choice(_HOSTILE_LINES) + b"\n" + d[at:]

    def delete(d: bytes) -> bytes:
        a = rng.randrange(len(d) + 1)
        return d[:a] + d[a + rng.randrange(64) :]

    def one_line(d: bytes) -> bytes:
        return d.replace(b"\n", b" ")

    def repeat(d: bytes) -> bytes:
        a = rng.randrange(len(d) + 1)
        return d[:a] + d[a : a + rng.randrange(1, 40)] * rng.randrange(100, 20_000) + d[a:]

    return [
        ("cut", cut),
        ("flip", flip),
        ("insert", insert),
        ("number", replace_number),
        ("line", add_line),  # (twice as likely: most readers read lines)
        ("line", add_line),
        ("delete", delete),
        ("one line", one_line),
        ("repeat", repeat),
    ]


def make_case(index: int, seed: int) -> Case:
    rng = random.Random(seed * 1_000_003 + index)
    if rng.random() < 0.12:
        path, name = None, "frtrace-collect.json"
        data = _MANIFEST
    else:
        path, name = rng.choice(_SEEDS)
        data = path.read_bytes()
    hows = []
    for _ in range(rng.randint(1, 3)):
        how, mutate = rng.choice(_mutations(rng))
        data = mutate(data)[: 8 * 1024 * 1024]
        hows.append(how)
    return Case(index=index, name=name, data=data, how="+".join(hows))


@pytest.fixture(scope="module")
def dumps() -> DumpSet:
    return load_dumps(JOB)


def _run(case: Case, here: Path, dumps: DumpSet, full: bool) -> None:
    if here.exists():
        shutil.rmtree(here)
    shutil.copytree(JOB, here)
    (here / case.name).write_bytes(case.data)
    started = time.monotonic()
    _, side, _ = walk(here)
    stacks = load_stacks(here, side)
    evidence = load_evidence(here, stacks, side)
    collected = read_collected(here, side)
    evidence, stacks, collected = within_job(4, evidence, stacks, collected, dump_files(dumps))
    took = time.monotonic() - started
    assert took < CASE_SECONDS, f"{took:.1f} s"
    named = (
        {f.rank for f in evidence.failures}
        | {r for f in evidence.failures for r in f.named_ranks}
        | {s.rank for s in stacks.samples}
        | {r.rank for r in collected.ranks}
    )
    assert all(r is None or 0 <= r < 4 for r in named), named
    assert all("\n" not in p for p in evidence.problems)
    if full:
        report = analyze_loaded(load_dumps(here))
        assert report.culprit_ranks == (2,)
        assert set(report.suspected_ranks) <= set(range(4))
        assert all(f.rank is None or 0 <= f.rank < 4 for f in report.timeline)


def test_mutated_side_files_cost_that_file_in_bounded_time(tmp_path: Path, dumps: DumpSet) -> None:
    if ONLY is not None:
        case = make_case(int(ONLY), SEED)
        print(f"case {case.index}: {case.name}, {case.how}, {len(case.data):,} bytes")
        _run(case, tmp_path / "job", dumps, full=True)
        return
    started, index = time.monotonic(), 0
    limit = int(CASES) if CASES is not None else None
    while (index < limit) if limit is not None else (time.monotonic() - started < SECONDS):
        case = make_case(index, SEED)
        try:
            _run(case, tmp_path / "job", dumps, full=index % FULL_EVERY == 0)
        except BaseException as exc:
            repro = f"FRTRACE_FUZZ_EVIDENCE_SEED={SEED} FRTRACE_FUZZ_EVIDENCE_ONLY={index}"
            raise AssertionError(
                f"case {index} ({case.name}, {case.how}): {type(exc).__name__}: {exc!s:.500}; "
                f"reproduce: {repro} python3 -m pytest {__file__} -s"
            ) from exc
        index += 1
    print(f"{index:,} cases in {time.monotonic() - started:.0f} s")
    assert index >= 1
