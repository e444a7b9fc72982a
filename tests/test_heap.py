"""The command's heap (``frtrace/base/heap.py``): glibc's mmap threshold is fixed, so a block of
256 MiB or more is mapped (and given back on free) and a smaller one comes from the heap, and
the heap's free top is kept."""

from __future__ import annotations

import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from frtrace.base.heap import GC_THRESHOLDS, free_pages_reported, give_large_blocks_back

cli_app = importlib.import_module("frtrace.cli.app")  # (frtrace.cli.app is also the Typer)
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")


@pytest.fixture(autouse=True)
def _thresholds_kept() -> Iterator[None]:
    """The command run in-process sets the collector's thresholds: the suite's are put back."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


# One process: free a 16 MiB block (glibc then raises its threshold to 16 MiB unless it was
# fixed), then ask for 8 MiB and for 300 MiB (never touched: no memory used) and print whether
# each was mapped on its own; then whether a block of 64 MiB came from the heap and stayed there
# once freed.
PROBE = """
import ctypes, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "trim":  # MiB freed in small blocks, kept (a worker's trim threshold)
    from frtrace.base.heap import M_TRIM_THRESHOLD, _mallopt, trim
    _mallopt(M_TRIM_THRESHOLD, 1 << 30)
    blocks = [libc.malloc(1024) for _ in range(int(sys.argv[2]) << 10)]
    before = libc.mallinfo2().arena
    for block in blocks:
        libc.free(block)
    kept = libc.mallinfo2().arena
    trim()
    print(int(kept >= before - (1 << 20)), int(libc.mallinfo2().arena < before // 4))
    sys.exit()
if sys.argv[1] == "fixed":
    from frtrace.base.heap import GC_THRESHOLDS, give_large_blocks_back
    print(give_large_blocks_back())
libc.free(libc.malloc(16 << 20))
for size in (8 << 20, 300 << 20):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    print(libc.mallinfo2().hblks - before)
    libc.free(block)
start = libc.mallinfo2().arena
block = libc.malloc(64 << 20)
before = libc.mallinfo2().arena
libc.free(block)
print(int(before >= start + (32 << 20) and libc.mallinfo2().arena >= before - (1 << 20)))
"""


def _probe(mode: str, *args: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, *args], capture_output=True, text=True, env=environ
    )
    if "mallinfo2" in done.stderr:
        pytest.skip("a C library without mallinfo2 (glibc < 2.33)")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_large_block_is_mapped_after_a_larger_one_was_freed() -> None:
    # glibc's own: 8 MiB from the heap (the threshold was raised to 16), 300 and 64 mapped
    assert _probe("default") == ["0", "1", "0"]
    assert _probe("fixed") == ["True", "0", "1", "1"]


def test_a_threshold_the_user_set_is_kept() -> None:
    # (8 MiB under the user's 12: from the heap, 64 mapped; or 64 from the heap, its free top
    # handed back past the user's 256 KiB)
    assert _probe("fixed", MALLOC_MMAP_THRESHOLD_=str(12 << 20)) == ["False", "0", "1", "0"]
    trim = str(256 << 10)
    assert _probe("fixed", MALLOC_TRIM_THRESHOLD_=trim) == ["True", "0", "1", "0"]


def test_the_command_fixes_it_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    def record() -> bool:
        calls.append(True)
        return True

    monkeypatch.setattr(cli_app, "give_large_blocks_back", record)
    monkeypatch.setattr(sys, "argv", ["frtrace", "--version"])
    with pytest.raises(SystemExit):
        cli_app.run()
    assert calls == [True]


def test_the_command_collects_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.get_threshold() != GC_THRESHOLDS
    monkeypatch.setattr(sys, "argv", ["frtrace", "--version"])
    with pytest.raises(SystemExit):
        cli_app.run()
    assert gc.get_threshold() == GC_THRESHOLDS


def test_it_is_safe_to_call_twice() -> None:
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        pytest.skip("the environment sets the threshold")
    assert give_large_blocks_back() and give_large_blocks_back()


@pytest.mark.parametrize("mib", [32, 96])
def test_trim_hands_freed_heap_back_past_what_it_keeps(mib: int) -> None:
    """Freed small blocks that glibc keeps (above its trim threshold) go back to the kernel
    with ``trim`` (``load.tables.give_back_memory`` calls it between the analysis's steps),
    once they are more than ``KEEP_FREED_BYTES`` (64 MiB): less is kept, to be reused."""
    from frtrace.base.heap import KEEP_FREED_BYTES

    assert KEEP_FREED_BYTES == 64 << 20
    handed_back = "1" if mib << 20 > KEEP_FREED_BYTES else "0"
    assert _probe("trim", str(mib)) == ["1", handed_back]


# The console command, its work replaced by numpy's import and a count of the threads then
BLAS = """
import importlib, os, sys
app = importlib.import_module("frtrace.cli.app")
def run():
    import numpy
    print(os.environ["OPENBLAS_NUM_THREADS"], len(os.listdir("/proc/self/task")))
    huge = numpy._core.multiarray._get_madvise_hugepage()
    print(os.environ.get("NUMPY_MADVISE_HUGEPAGE", "-"), huge)
    sys.exit(0)
app.run = run
app.main()
"""


def _numpy_settings(**theirs: str | None) -> tuple[list[str], list[str]]:
    """The console command's numpy settings as numpy was imported, the user's given."""
    env = {k: v for k, v in os.environ.items() if k not in theirs}
    env.update({k: v for k, v in theirs.items() if v is not None})
    run = subprocess.run(
        [sys.executable, "-c", BLAS], capture_output=True, text=True, env=env, check=True
    )
    blas, pages = run.stdout.splitlines()
    return blas.split(), pages.split()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc")
@pytest.mark.parametrize("theirs", [None, "3"])
def test_the_command_starts_no_blas_thread_unless_the_user_asks(theirs: str | None) -> None:
    """numpy's OpenBLAS would start a thread per CPU, spinning beside the load's workers:
    the command asks for none before numpy is imported; a user's own setting stands."""
    (setting, threads), _ = _numpy_settings(OPENBLAS_NUM_THREADS=theirs)
    assert setting == (theirs or "1")
    if theirs is None:
        assert threads == "1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="numpy's huge pages: Linux")
@pytest.mark.parametrize("theirs", [None, "1", "0"])
def test_the_command_asks_for_no_huge_pages_where_the_host_takes_freed_memory(
    theirs: str | None,
) -> None:
    """numpy asks the kernel for huge pages for its large arrays, new memory every time on a
    VM that hands freed memory back to its host: there the command tells numpy not to,
    before it is imported; elsewhere numpy's default stands; a user's own setting stands."""
    _, (setting, used) = _numpy_settings(NUMPY_MADVISE_HUGEPAGE=theirs)
    if theirs is None:
        reported = free_pages_reported()
        assert setting == ("0" if reported else "-")
        assert used == str(not reported)
    else:
        assert (setting, used) == (theirs, str(theirs == "1"))


def _device(root: Path, name: str, device: str, features: str) -> None:
    (root / name).mkdir()
    (root / name / "device").write_text(f"{device}\n")
    (root / name / "features").write_text(f"{features}\n")


@pytest.mark.parametrize(
    ("devices", "reported"),
    [
        ([], False),
        ([("0x0001", "1111111111")], False),  # a network device, every bit set
        ([("0x0005", "0110000000")], False),  # a balloon without free page reporting
        ([("0x0002", "0"), ("0x0005", "0110010100")], True),  # this project's VM's
        ([("0x0005", "01100")], False),  # (too short to say)
    ],
)
def test_free_pages_are_reported_by_a_balloon_with_the_feature(
    tmp_path: Path, devices: list[tuple[str, str]], reported: bool
) -> None:
    for k, (device, features) in enumerate(devices):
        _device(tmp_path, f"virtio{k}", device, features)
    (tmp_path / "virtio9").mkdir()  # (a device whose files cannot be read)
    assert free_pages_reported(tmp_path) is reported
    assert free_pages_reported(tmp_path / "missing") is False
