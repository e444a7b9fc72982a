"""Fuzz the readers of a pickle against each other and ``pickle.loads``, for a fixed time.

    python -m tests.load.read.fuzz_readers [--engine atheris|seeded] [--seconds 40] [--seed 0]

Every input is checked with ``differential.check_readers``: whatever the C reader or the
careful unpickler accepts is what ``pickle.loads`` gives, frames are judged as the Python
unpickler judges them, and nothing crashes (an exception other than a reader's refusal, or a
signal, is a failure). The seeds are the fixture pickles (``tests/fixtures``); the mutations
flip, set, drop, repeat, cut, copy and splice bytes, and put a stream into frames that end
anywhere (``differential.mutate``).

``atheris`` (the default where it is installed): coverage-guided (libFuzzer) over the Python
code that follows the opcodes (pickle's Python unpickler, frtrace's framing and unpickle; the
C module is not instrumented for coverage, being built by gcc), with the structured
mutations above beside libFuzzer's own; a failing input is saved under ``--artifacts``.
``seeded``: the same mutations in a loop from a seeded random generator, no coverage: what
runs where atheris is not installed, and under the sanitizers (``test_sanitizers.py``).
Prints one line of counts; exit status 0 when nothing broke.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

FIXTURES = Path(__file__).parents[2] / "fixtures"
MAX_LEN = 1 << 18


def seeds() -> list[bytes]:
    """The fixture pickles, smallest first (damaged ones included)."""
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.stat().st_size <= MAX_LEN:
            data = path.read_bytes()
            if data[:1] == b"\x80":
                found.append(data)
    return sorted(found, key=len)


def _bound_memory() -> None:
    """An address-space limit, so that a length or memo index far past the data is a
    MemoryError (a refusal) and not the machine's memory (not under ASan: its shadow
    memory is reserved address space)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return
    limit = 6 << 30
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def run_seeded(check: Callable[[bytes], str], seconds: float, seed: int) -> Counter[str]:
    from tests.load.read.differential import mutate

    rng = random.Random(seed)
    pool = seeds()
    counts: Counter[str] = Counter()
    for data in pool:  # (every seed as it is, first)
        counts[check(data)] += 1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = rng.choice(pool)
        for _ in range(rng.randrange(1, 4)):
            data = mutate(data, rng, pool)
        counts[check(data[:MAX_LEN])] += 1
    return counts


def run_atheris(
    check: Callable[[bytes], str],
    seconds: float,
    seed: int,
    artifacts: Path,
    report: Callable[[Counter[str]], None],
    corpus: Path | None = None,
) -> Counter[str]:
    import atheris

    from tests.load.read.differential import mutate

    pool = seeds()
    counts: Counter[str] = Counter()

    deadline = time.monotonic() + seconds

    def one_input(data: bytes) -> None:
        counts[check(data)] += 1
        if time.monotonic() > deadline:  # (libFuzzer's own limit ends the process unprinted)
            report(counts)
            if made:
                shutil.rmtree(corpus, ignore_errors=True)
            os._exit(0)

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return bytes(atheris.Mutate(data, max_size))
        return mutate(data, rng, pool)[:max_size]

    made = corpus is None  # (libFuzzer adds what it finds to the corpus folder)
    corpus = Path(tempfile.mkdtemp(prefix="frtrace-fuzz-corpus-")) if corpus is None else corpus
    corpus.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(pool):
        (corpus / f"seed{k}").write_bytes(data)
    artifacts.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={int(seconds) + 30}",  # (a backstop: one_input stops first)
        f"-seed={seed + 1}",  # (0 would be "random")
        f"-max_len={MAX_LEN}",
        "-timeout=30",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, one_input, custom_mutator=mutator)
    atheris.Fuzz()
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("atheris", "seeded"), default=None)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--artifacts", type=Path, default=Path(tempfile.gettempdir()) / "frtrace-fuzz-artifacts"
    )
    parser.add_argument("--corpus", type=Path, default=None, help="(default: a temporary one)")
    args = parser.parse_args()
    engine = args.engine
    if engine is None:
        try:
            import atheris
        except ImportError:
            engine = "seeded"
        else:
            engine = "atheris"
    _bound_memory()
    if engine == "atheris":
        import atheris

        with atheris.instrument_imports(include=["pickle", "frtrace.load.read.framing"]):
            import pickle  # noqa: F401  (the Python unpickler's branches: opcodes, frames)

            from frtrace.load.read import framing  # noqa: F401
    from tests.load.read.differential import active, check_readers

    started = time.monotonic()

    def report(counts: Counter[str]) -> None:
        print(
            f"fuzz_readers: {engine}, {sum(counts.values())} inputs in "
            f"{time.monotonic() - started:.0f} s (C reader {'on' if active() else 'off'}): "
            + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())),
            flush=True,
        )

    if engine == "atheris":
        report(
            run_atheris(check_readers, args.seconds, args.seed, args.artifacts, report, args.corpus)
        )
    else:
        report(run_seeded(check_readers, args.seconds, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
