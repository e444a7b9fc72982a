"""The C module built with AddressSanitizer and UndefinedBehaviorSanitizer, and run: any
report fails.

gcc builds ``_scan.c`` and ``_tree.c`` with ``-fsanitize=address,undefined
-fno-sanitize-recover=undefined`` into a temporary folder (the normal build is not touched).
A subprocess puts that folder first on ``frtrace.load``'s path (``sanitized.py``), with
libasan preloaded (the interpreter is not built with it: its runtime must come first),
``ASAN_OPTIONS=detect_leaks=0`` (the interpreter's own allocations at exit are not ours) and
``PYTHONMALLOC=malloc`` (the module's ``PyMem`` buffers then come from ASan's allocator, so an
overrun of the node, kid, memo or column arrays is seen). There it runs the C reader's and the
C pass's tests (``test_tree_reader.py``, ``test_native.py``: every fixture file three ways;
``test_frames.py``) with fewer property examples, then the seeded fuzz run
(``fuzz_readers.py``) over the fixture pickles for ``SANITIZED_FUZZ_SECONDS``.

Skipped, saying why, where gcc or its libasan is not there (a machine without a compiler has
no C module to check).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from frtrace.load.read import native

ROOT = Path(__file__).parents[3]
SOURCES = [ROOT / "frtrace" / "load" / "read" / name for name in ("_scan.c", "_tree.c")]
FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-g",
    "-O1",
]
SANITIZED_FUZZ_SECONDS = 15
# (the tests read by the subprocess: the console-script one runs frtrace itself, not this build)
TESTS = [
    "tests/load/read/test_tree_reader.py",
    "tests/load/read/test_native.py",
    "tests/load/read/test_frames.py",
]
DESELECT = [
    "tests/load/read/test_native.py::test_the_console_script_says_the_same_without_the_c_pass"
]
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "SUMMARY: ")


def _toolchain() -> tuple[str, str]:
    """gcc and its libasan, or the test skipped saying what is missing."""
    if sys.platform != "linux":
        pytest.skip("the sanitizer build is checked on Linux only")
    if native._SCAN is None:
        pytest.skip("frtrace.load.read._scan is not built here (no C compiler): nothing to check")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc: the C module is not built with sanitizers here")
    found = subprocess.run(
        [gcc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not os.path.isabs(found) or not os.path.exists(found):
        pytest.skip("gcc has no libasan.so here (install libasan / gcc's sanitizer runtime)")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no Python.h: the C module cannot be built here")
    return gcc, found


def _build(gcc: str, sources: list[Path], into: Path, *extra: str) -> None:
    """_scan built from ``sources`` with the sanitizers, into the folder ``into``."""
    target = into / f"_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = f"-I{sysconfig.get_paths()['include']}"
    command = [gcc, "-shared", "-fPIC", *FLAGS, *extra, include, *map(str, sources)]
    made = subprocess.run([*command, "-o", str(target)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the folder holding the sanitized _scan, the environment to run it in)."""
    gcc, libasan = _toolchain()
    build = tmp_path_factory.mktemp("sanitized-scan")
    probe = build / "probe.c"
    probe.write_text("int probe(int x) { return x + 1; }\n")
    tried = subprocess.run(
        [gcc, "-shared", "-fPIC", *FLAGS, str(probe), "-o", str(build / "probe.so")],
        capture_output=True,
        text=True,
        check=False,
    )
    if tried.returncode != 0:
        pytest.skip(f"gcc cannot build with sanitizers here: {tried.stderr.strip()[-300:]}")
    _build(gcc, SOURCES, build, "-Wall")
    env = os.environ | {
        "LD_PRELOAD": libasan,
        # (a huge length in a fuzzed pickle: NULL, as malloc gives, not a report)
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONMALLOC": "malloc",
        "FRTRACE_EXAMPLES": "8",  # (property tests: fewer examples, each far slower here)
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("FRTRACE_PURE_PYTHON", None)
    return build, env


def _run(args: list[str], env: dict[str, str], timeout: int) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tests.load.read.sanitized", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def _report(output: str) -> str | None:
    """The sanitizer's report in ``output``, from its first line (None: no report)."""
    lines = output.splitlines()
    for k, line in enumerate(lines):
        if any(mark in line for mark in REPORTS):
            return "\n".join(lines[max(0, k - 2) : k + 40])
    return None


def test_the_reader_tests_pass_under_asan_and_ubsan(
    sanitized: tuple[Path, dict[str, str]],
) -> None:
    build, env = sanitized
    deselect = [arg for test in DESELECT for arg in ("--deselect", test)]
    # (--capture=sys: a report is written to file descriptor 2 as the process ends; pytest's
    # default capture of the descriptor would take it with the process)
    args = [str(build), "pytest", "-q", "-x", "--capture=sys", "-p", "no:cacheprovider"]
    args += [*deselect, *TESTS]
    rc, output, took = _run(args, env, timeout=400)
    report = _report(output)
    assert report is None, f"sanitizer report ({took:.0f} s):\n{report}"
    assert rc == 0, f"rc {rc} after {took:.0f} s:\n{output[-3000:]}"


def test_fuzzed_pickles_make_no_sanitizer_report(
    sanitized: tuple[Path, dict[str, str]],
) -> None:
    build, env = sanitized
    args = [str(build), "fuzz", "--seconds", str(SANITIZED_FUZZ_SECONDS), "--seed", "7"]
    rc, output, took = _run(args, env, timeout=SANITIZED_FUZZ_SECONDS + 120)
    report = _report(output)
    assert report is None, f"sanitizer report ({took:.0f} s):\n{report}"
    assert rc == 0, f"rc {rc} after {took:.0f} s:\n{output[-3000:]}"
    assert "fuzz_readers: seeded" in output, output[-2000:]


def test_a_build_with_the_old_make_leaf_is_caught(sanitized: tuple[Path, dict[str, str]]) -> None:
    """The check itself: a negative float read into a leaf formed data + its bits (UB) before
    _tree.c's bytes_of; that build must fail here, reported (the test of the test)."""
    build, env = sanitized
    old = build / "old"
    old.mkdir(exist_ok=True)
    source = (ROOT / "frtrace" / "load" / "read" / "_tree.c").read_text()
    fixed = "static PyObject *make_leaf(Tree *t, Node *nd) {\n    switch (nd->kind) {"
    assert fixed in source
    broken = source.replace(
        fixed,
        "static PyObject *make_leaf(Tree *t, Node *nd) {\n"
        "    const char *bytes = bytes_of(t, nd);\n"
        "    (void)bytes;\n"
        "    switch (nd->kind) {",
    )
    (old / "_tree.c").write_text(broken)
    for name in ("_scan.c", "_scan.h"):
        shutil.copy(ROOT / "frtrace" / "load" / "read" / name, old / name)
    gcc, _ = _toolchain()
    _build(gcc, [old / "_scan.c", old / "_tree.c"], old, "-O0")  # (-O0: nothing left out)
    script = (
        "import sys, frtrace.load.read\n"
        f"frtrace.load.read.__path__.insert(0, {str(old)!r})\n"
        "from frtrace.load.read import _scan\n"
        "import pickle\n"
        "view = _scan.read(pickle.dumps({'entries': [{'x': -1.5, 'y': -(2**62)}]}, 2))\n"
        "print(view['entries'][0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0, done.stdout
    assert "runtime error: pointer index expression" in done.stderr, done.stderr[-2000:]
