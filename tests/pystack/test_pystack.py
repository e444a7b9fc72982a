"""frtrace.pystack: reading collected Python stacks, the user's frame, stack classes.

The samples in tests/fixtures/pystack are real (README.md there says how each was made).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from frtrace.job.sidecar import capture_current_stacks, write_stacks
from frtrace.pystack.classes import classes_to_dict, format_ranks, group_stacks, render_classes
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.pystack.parse import (
    MAX_LINE_CHARS,
    StackFileError,
    detect_format,
    parse_pyspy_json,
    parse_pyspy_text,
    parse_pyspy_text_all,
    parse_recorder,
    parse_traceback,
    rank_from_filename,
    read_stack_file,
    sniff,
)
from frtrace.pystack.where import (
    innermost_user_frame,
    is_library_frame,
    pick_thread,
    short_filename,
    where,
    where_summary,
)

SAMPLES = Path(__file__).parents[1] / "fixtures" / "pystack"

# file -> (source, rank, pid, innermost user frame (function, line), summary)
EXPECTED: dict[str, tuple[str, int | None, int | None, tuple[str, int], str]] = {
    "pyspy_rank_0.txt": (
        "py-spy-text",
        0,
        8910,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "pyspy_rank_1.txt": ("py-spy-text", 1, 8911, ("load_batch", 23), "load_batch (hung_job.py:23)"),
    "pyspy_rank_0.json": (
        "py-spy-json",
        0,
        8910,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "pyspy_rank_1.json": (
        "py-spy-json",
        1,
        8911,
        ("load_batch", 23),
        "load_batch (hung_job.py:23)",
    ),
    "pyspy_native_rank_0.txt": (
        "py-spy-text",
        0,
        8910,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "pyspy_native_rank_0.json": (
        "py-spy-json",
        0,
        8910,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "pyspy_locals_rank_1.txt": (
        "py-spy-text",
        1,
        8911,
        ("load_batch", 23),
        "load_batch (hung_job.py:23)",
    ),
    "pyspy_locals_rank_1.json": (
        "py-spy-json",
        1,
        8911,
        ("load_batch", 23),
        "load_batch (hung_job.py:23)",
    ),
    "traceback_rank_0.txt": (
        "dump_traceback",
        0,
        None,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "traceback_rank_1.txt": (
        "dump_traceback",
        1,
        None,
        ("load_batch", 23),
        "load_batch (hung_job.py:23)",
    ),
    "stacks_rank_0.json": (
        "recorder",
        0,
        8910,
        ("train_step", 29),
        "train_step (hung_job.py:29), in all_reduce (torch/distributed/distributed_c10d.py:3252)",
    ),
    "stacks_rank_1.json": ("recorder", 1, 8911, ("load_batch", 23), "load_batch (hung_job.py:23)"),
    "faulthandler_timeout.txt": (
        "faulthandler",
        None,
        None,
        ("load_batch", 37),
        "load_batch (faulthandler_job.py:37)",
    ),
    "faulthandler_signal.txt": (
        "faulthandler",
        None,
        None,
        ("load_batch", 35),
        "load_batch (faulthandler_job.py:35)",
    ),
    "faulthandler_segv.txt": (
        "faulthandler",
        None,
        None,
        ("load_batch", 27),
        "load_batch (faulthandler_job.py:27), in string_at (ctypes/__init__.py:519)",
    ),
    "faulthandler_single.txt": (
        "faulthandler",
        None,
        None,
        ("load_batch", 29),
        "load_batch (faulthandler_job.py:29)",
    ),
}


def sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES.iterdir() if p.suffix in (".txt", ".json"))


def test_every_sample_has_an_expectation() -> None:
    assert sorted(p.name for p in sample_files()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_samples(name: str) -> None:
    source, rank, pid, (fn, line), summary = EXPECTED[name]
    stacks = read_stack_file(SAMPLES / name)
    assert stacks.source == source
    assert stacks.rank == rank
    assert stacks.pid == pid
    assert stacks.path.endswith(name)
    main = stacks.main_thread
    assert main is not None, "every sample's main thread is recognised"
    user = innermost_user_frame(stacks)
    assert user is not None
    assert (user.function, user.line) == (fn, line)
    assert where_summary(stacks) == summary
    assert detect_format((SAMPLES / name).read_bytes()) in (
        source,
        "faulthandler" if source == "dump_traceback" else source,
    )


def test_pyspy_text_details() -> None:
    s = read_stack_file(SAMPLES / "pyspy_rank_0.txt")
    assert [t.name for t in s.threads] == ["MainThread", "heartbeat"]
    main, hb = s.threads
    assert main.is_main and not hb.is_main
    assert main.thread_id == "8910" and main.active is False and main.owns_gil is None
    assert main.frames[0] == Frame(
        function="all_reduce", filename="torch/distributed/distributed_c10d.py", line=3252
    )
    assert main.frames[1].function == "_exception_logger.<locals>.wrapper"
    assert main.frames[-1].function == "<module>"
    # --locals: Arguments/Locals blocks are skipped, frames are the same
    plain = read_stack_file(SAMPLES / "pyspy_rank_1.txt")
    loc = read_stack_file(SAMPLES / "pyspy_locals_rank_1.txt")
    assert [t.frames for t in loc.threads] == [t.frames for t in plain.threads]
    # --native: C/C++ frames flagged, with the library as file and no line, even with parens
    nat = read_stack_file(SAMPLES / "pyspy_native_rank_0.txt").threads[0]
    assert nat.frames[0] == Frame(
        function="0x7f1b7b0a3f16", filename="libc.so.6", line=None, native=True
    )
    assert nat.frames[3] == Frame(
        function="c10d::Work::wait", filename="libtorch_cpu.so", line=None, native=True
    )
    assert nat.frames[4].native and nat.frames[4].function.endswith("::_FUN")
    py = [f for f in nat.frames if not f.native]
    assert py == list(read_stack_file(SAMPLES / "pyspy_rank_0.txt").threads[0].frames)


def test_pyspy_text_status_nameless_threads_and_subprocesses() -> None:
    text = textwrap.dedent(
        """\
        Process 5526: /usr/bin/python3 parent.py
        Python v3.11.7 (/usr/bin/python3.11)

        Thread 0x7F00AA (active+gil)
            spin (busy.py:5)
            <module> (busy.py:9)
        Thread 5530 (active): "worker"
            run (w.py:3)

        --------------------------------------------------------------------------------
        Process 5568: /usr/bin/python3 -c import time
        def child_sleep():
            time.sleep(1000)
        child_sleep()
        Python v3.11.7 (/usr/bin/python3.11)
        Parent Process 5526: /usr/bin/python3 parent.py

        Thread 5568 (idle): "MainThread"
            child_sleep (<string>:3)
            <module> (<string>:4)
        """
    )
    top, child = parse_pyspy_text_all(text, "sub.txt")
    assert parse_pyspy_text(text, "sub.txt") == top
    t0, t1 = top.threads
    assert (t0.thread_id, t0.name, t0.active, t0.owns_gil) == ("0x7F00AA", None, True, True)
    assert t0.is_main  # nameless, but the only thread not started by threading... and <module>
    assert (t1.active, t1.owns_gil, t1.is_main) == (True, False, False)
    assert child.pid == 5568 and child.threads[0].is_main
    assert where_summary(child) == "child_sleep (<string>:3)"


def test_pyspy_json_details() -> None:
    s = read_stack_file(SAMPLES / "pyspy_rank_0.json")
    main = s.main_thread
    assert main is not None and main.name == "MainThread" and main.thread_id == "8910"
    assert main.active is False and main.owns_gil is False
    assert main.frames[0].filename.endswith("site-packages/torch/distributed/distributed_c10d.py")
    nat = read_stack_file(SAMPLES / "pyspy_native_rank_0.json").main_thread
    assert nat is not None
    assert nat.frames[3] == Frame(
        function="c10d::Work::wait",
        filename="/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
        line=None,
        native=True,
    )


def test_traceback_details() -> None:
    tb = read_stack_file(SAMPLES / "traceback_rank_0.txt")
    cur = [t for t in tb.threads if t.current]
    assert len(cur) == 1 and cur[0].frames == ()  # torch's C++ server thread
    assert [t.is_main for t in tb.threads] == [False, False, True]
    fh = read_stack_file(SAMPLES / "faulthandler_signal.txt")
    assert fh.threads[1].current and fh.threads[1].is_main
    assert parse_traceback((SAMPLES / "traceback_rank_0.txt").read_text(), source="faulthandler")


def test_traceback_in_a_log_reads_the_last_dump() -> None:
    one = (SAMPLES / "faulthandler_timeout.txt").read_text()
    later = one.replace("line 37 in load_batch", "line 99 in load_batch")
    log = f"INFO step 1\n{one}INFO step 2\nWARNING slow\n{later}INFO done\n"
    s = parse_traceback(log, "job.log")
    assert len(s.threads) == 2
    user = innermost_user_frame(s)
    assert user is not None and user.line == 99


def test_traceback_odd_lines() -> None:
    text = textwrap.dedent(
        """\
        Thread 0x00007f0000000001 (most recent call first):
          File "???", line ??? in ???
          File "/job/train.py", line 12 in main
          ...

        Current thread 0x00007f0000000002 (most recent call first):
          Garbage-collecting
          <no Python frame>
        """
    )
    s = parse_traceback(text, "odd.txt")
    assert s.threads[0].frames[0] == Frame(function="???", filename="???", line=None)
    assert s.threads[0].is_main
    assert s.source == "dump_traceback"  # the writing thread has no Python frame


def test_recorder_roundtrip_and_versions(tmp_path: Path) -> None:
    doc = capture_current_stacks("exception", "ValueError: boom", rank=3, host="node-1")
    path = tmp_path / "stacks_rank_7.json"
    write_stacks(path, doc)
    s = read_stack_file(path)
    assert (s.rank, s.host, s.pid, s.source) == (3, "node-1", os.getpid(), "recorder")
    assert s.trigger == "exception: ValueError: boom"
    assert s.taken_at_ns == doc["dumped_at_ns"]
    doc["rank"] = None
    assert parse_recorder(json.dumps(doc), str(path), rank=7).rank == 7
    newer = dict(doc, version=2)
    with pytest.raises(StackFileError, match=r"stacks_rank_7\.json: .*newer.*upgrade frtrace"):
        parse_recorder(json.dumps(newer), str(path))
    with pytest.raises(ValueError, match="trigger kind"):
        capture_current_stacks("whenever")  # type: ignore[arg-type]


# --- capture from a helper thread and from a signal handler -------------------------------


def blocked_in_known_function(ev: threading.Event, entered: threading.Event) -> None:
    entered.set()
    ev.wait(30)


def test_capture_from_helper_thread_while_main_thread_blocks() -> None:
    release, entered = threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def helper() -> None:
        entered.wait(10)
        time.sleep(0.05)
        out["doc"] = capture_current_stacks("on_demand", "test")
        release.set()

    t = threading.Thread(target=helper, name="frtrace-helper")
    t.start()
    blocked_in_known_function(release, entered)  # the main thread blocks here
    t.join(10)
    doc = out["doc"]
    assert isinstance(doc, dict)
    s = parse_recorder(json.dumps(doc), "mem")
    main = s.main_thread
    assert main is not None and main.name == "MainThread"
    user = innermost_user_frame(s)
    assert user is not None and user.function == "blocked_in_known_function"
    assert [f.function for f in main.frames[:2]] == ["Condition.wait", "Event.wait"]
    assert where(s).library_frame == main.frames[0]
    helper_stack = next(t for t in s.threads if t.name == "frtrace-helper")
    assert helper_stack.frames[0].function.endswith("helper")  # record.py's frames left out
    assert all("record.py" not in f.filename for f in helper_stack.frames)


def interrupted_here(flag: list[dict[str, object]]) -> None:
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while not flag and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_capture_from_signal_handler_starts_at_the_interrupted_frame() -> None:
    got: list[dict[str, object]] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        got.append(capture_current_stacks("signal", "SIGUSR1", frame=frame))

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        interrupted_here(got)
    finally:
        signal.signal(signal.SIGUSR1, old)
    s = parse_recorder(json.dumps(got[0]), "mem")
    user = innermost_user_frame(s)
    assert user is not None and user.function == "interrupted_here"
    assert s.trigger == "signal: SIGUSR1"


# --- rank from the file name, sniffing ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("pyspy_rank_5.txt", 5),
        ("pyspy_rank_5.json", 5),
        ("stacks_rank_5.json", 5),
        ("rank5.txt", 5),
        ("traceback_rank_12.txt", 12),
        ("/a/b7/dump.txt", None),
        ("stacks.json", None),
        ("x_rank_3.log.txt", 3),
    ],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(name) == rank


def test_sniff_prefers_the_sidecars_own_rank() -> None:
    data = (SAMPLES / "stacks_rank_1.json").read_bytes()
    assert sniff("rank_9.json", data).rank == 1
    assert sniff("rank_9.txt", (SAMPLES / "pyspy_rank_1.txt").read_bytes()).rank == 9


def test_pyspy_text_through_a_terminal() -> None:
    text = (SAMPLES / "pyspy_rank_1.txt").read_text()
    colored = text.replace("load_batch", "\x1b[32mload_batch\x1b[0m").replace("\n", "\r\n")
    assert sniff("r1.txt", colored).threads == read_stack_file(SAMPLES / "pyspy_rank_1.txt").threads


# --- malformed input: StackFileError naming the file, never another exception ------------

PARSERS = [parse_pyspy_text, parse_pyspy_json, parse_traceback, parse_recorder]


def _all_readers(data: bytes | str, name: str) -> list[str]:
    """Run sniff and every parser; return messages; fail on any non-StackFileError."""
    messages = []
    for fn in [lambda d, n: sniff(n, d), *PARSERS]:
        try:
            fn(data, name)
        except StackFileError as exc:
            assert name in str(exc)
            assert "\n" not in str(exc)
            messages.append(str(exc))
    return messages


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   \n\n",
        "",
        b"\x00\x01\x02garbage\xff\xfe",
        bytes(range(256)) * 4,
        b"\xff\xfe\xfd" * 100,
        b"[",
        b"{",
        b"[]",
        b"{}",
        b'{"format": "frtrace-stacks"}',
        b'{"format": "frtrace-stacks", "version": 1, "threads": []}',
        b'{"format": "frtrace-stacks", "version": 1, "threads": [{"frames": [{"name": 3}]}]}',
        b'{"format": "frtrace-stacks", "version": true, "threads": []}',
        b'{"format": "other"}',
        b'[{"frames": "no"}]',
        b"[1, 2]",
        b'[{"frames": [{"name": "f", "filename": "x.py", "line": "7"}]}]',
        b"[" * 100_000,
        b'{"a":' * 50_000,
        b"Process 12: python x.py\n",
        b'Process 12: python x.py\nPython v3.11.7 (x)\n\nThread 12 (idle): "MainThread"\n    fo',
        b"Process 12: python x.py\nThread 12 (idle)\n",
        b"Error: Failed to find python version from target process\n",
        b"Thread 0x00007f0000000001 (most recent call first):\n",
        b'Thread 0x00007f0000000001 (most recent call first):\n  File "/x.py", li',
        b"Stack (most recent call first):\nhello\n",
        b"x" * (MAX_LINE_CHARS + 10),
        b"Process 1: p\nPython v3.11\n\nThread 1 (idle)\n    "
        + b"a" * (MAX_LINE_CHARS + 1)
        + b"\n",
        b"hello world\n",
        12345,
    ],
)
def test_malformed_inputs(data: bytes | str) -> None:
    msgs = _all_readers(data, "bad_rank_3.txt")  # type: ignore[arg-type]
    assert msgs, "something must reject it"
    # sniff always rejects these
    with pytest.raises(StackFileError, match=r"^bad_rank_3\.txt: "):
        sniff("bad_rank_3.txt", data)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_truncated_and_mutated_samples_fail_cleanly(name: str) -> None:
    data = (SAMPLES / name).read_bytes()
    rng = random.Random(name)
    cuts = sorted({rng.randrange(1, len(data)) for _ in range(40)})
    for cut in cuts:
        _all_readers(data[:cut], name)
    for _ in range(40):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        _all_readers(bytes(b), name)


def test_truncated_mid_line_is_an_error() -> None:
    for name in ("pyspy_rank_0.txt", "pyspy_rank_0.json", "stacks_rank_0.json"):
        data = (SAMPLES / name).read_bytes()
        with pytest.raises(StackFileError, match=name.replace(".", r"\.")):
            sniff(name, data[: len(data) // 2 + 3])


def test_read_stack_file_errors(tmp_path: Path) -> None:
    with pytest.raises(StackFileError, match=r"missing\.txt: cannot read it"):
        read_stack_file(tmp_path / "missing.txt")
    with pytest.raises(StackFileError, match="empty"):
        (tmp_path / "e.txt").write_bytes(b"")
        read_stack_file(tmp_path / "e.txt")


# --- where -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "library"),
    [
        ("torch/distributed/distributed_c10d.py", True),
        ("/opt/conda/lib/python3.11/site-packages/numpy/core/x.py", True),
        ("/usr/lib/python3/dist-packages/foo.py", True),
        ("/usr/lib/python3.11/threading.py", True),
        ("threading.py", True),
        ("selectors.py", True),
        ("socket.py", True),
        ("concurrent/futures/_base.py", True),
        ("<frozen importlib._bootstrap>", True),
        ("/home/u/torch/nn/modules/module.py", True),
        ("frtrace/recorder.py", True),
        ("frtrace/pystack/record.py", True),
        ("train.py", False),
        ("/job/data.py", False),
        ("mypkg/data.py", False),
        ("<string>", False),
        ("test.py", False),
        ("/home/u/frtrace/train.py", False),
    ],
)
def test_library_files(filename: str, library: bool) -> None:
    assert is_library_frame(Frame(function="f", filename=filename, line=1)) is library


def test_short_filename() -> None:
    assert (
        short_filename("/x/lib/python3.11/site-packages/torch/distributed/c10d_logger.py")
        == "torch/distributed/c10d_logger.py"
    )
    assert short_filename("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py") == (
        "threading.py"
    )
    assert short_filename("/job/pkg/data.py") == "data.py"
    assert short_filename("torch/distributed/x.py") == "torch/distributed/x.py"


def _thread(name: str | None, frames: list[tuple[str, str, int]], **kw: object) -> ThreadStack:
    return ThreadStack(
        thread_id=None,
        name=name,
        frames=tuple(Frame(function=f, filename=p, line=n) for f, p, n in frames),
        is_main=bool(kw.pop("is_main", False)),
        **kw,  # type: ignore[arg-type]
    )


def _process(*threads: ThreadStack) -> ProcessStacks:
    return ProcessStacks(rank=0, pid=1, host=None, source="py-spy-text", path="p", threads=threads)


def test_no_main_thread_picks_the_gil_holder_and_says_so() -> None:
    idle = _thread("idle-1", [("wait", "threading.py", 3), ("poll", "/job/a.py", 5)])
    busy = _thread("busy", [("compute", "/job/b.py", 9)], owns_gil=True, active=True)
    p = _process(idle, busy)
    thread, why = pick_thread(p)
    assert thread is busy and "holds the GIL" in why
    assert where_summary(p) == (
        "compute (b.py:9) [no main thread in the sample; thread 'busy' holds the GIL]"
    )


def test_no_user_frame_and_no_frames() -> None:
    lib = _thread("MainThread", [("select", "selectors.py", 415), ("run", "torch/x.py", 3)])
    p = _process(replace_main(lib))
    assert innermost_user_frame(p) is None
    assert where_summary(p) == "no user frame; innermost select (selectors.py:415)"
    empty = _process(_thread("MainThread", [], is_main=True))
    assert innermost_user_frame(empty) is None
    assert where_summary(empty) == "no Python frames on the thread"


def replace_main(t: ThreadStack) -> ThreadStack:
    return ThreadStack(thread_id=t.thread_id, name=t.name, frames=t.frames, is_main=True)


# --- classes -----------------------------------------------------------------------------

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/"


def _stack(rank: int, depth: int = 40) -> tuple[Frame, ...]:
    outer = [Frame(function="<module>", filename="/job/train.py", line=200)]
    outer += [
        Frame(function=f"layer{i}", filename=f"/job/model/b{i}.py", line=10 + i)
        for i in range(depth - 4)
    ]
    if rank == 4:
        inner = [
            Frame(function="load_batch", filename="/job/data.py", line=88),
            Frame(function="next_batch", filename="/job/data.py", line=40),
            Frame(function="train_step", filename="/job/train.py", line=118),
        ]
    elif rank in (100, 101):
        inner = [
            Frame(function="Condition.wait", filename="/usr/lib/python3.11/threading.py", line=3),
            Frame(function="Event.wait", filename="/usr/lib/python3.11/threading.py", line=6),
            Frame(function="train_step", filename="/job/train.py", line=119 + rank % 2),
        ]
    else:
        inner = [
            Frame(function="all_reduce", filename=TORCH + "distributed_c10d.py", line=2501),
            Frame(function="wrapper", filename=TORCH + "c10d_logger.py", line=83),
            Frame(function="train_step", filename="/job/train.py", line=120),
        ]
    return tuple(inner + outer[::-1])


def _job(n: int = 4096) -> dict[int, ProcessStacks]:
    return {
        r: ProcessStacks(
            rank=r,
            pid=None,
            host=None,
            source="recorder",
            path=f"stacks_rank_{r}.json",
            threads=(
                ThreadStack(thread_id="1", name="helper", frames=_stack(0)[2:], is_main=False),
                ThreadStack(thread_id="2", name="MainThread", frames=_stack(r), is_main=True),
            ),
        )
        for r in range(n)
    }


def test_classes_at_4096_ranks() -> None:
    job = _job()
    t0 = time.perf_counter()
    res = group_stacks(job)
    text = render_classes(res)
    doc = classes_to_dict(res)
    json.dumps(doc)
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0, f"{elapsed:.2f} s for 4,096 ranks x 40 frames"  # ~0.05 s measured
    assert [c.count for c in res.classes] == [4093, 1, 1, 1]
    assert text.splitlines() == [
        "4,096 ranks, 4 stack classes (main thread; frames compared by function, file and line)",
        "  4,093 ranks (0-3,5-99,102-4095): all_reduce <- train_step (train.py:120)",
        "  rank 4: load_batch (data.py:88)  [outlier]",
        "  rank 100: Condition.wait <- train_step (train.py:119)  [outlier]",
        "  rank 101: Condition.wait <- train_step (train.py:120)  [outlier]",
    ]
    assert [c.outlier for c in res.classes] == [False, True, True, True]
    # the tree: one shared run of 37 outer frames, then the branches
    tree = doc["tree"]
    assert tree["count"] == 4096 and tree["frames"] == []
    (trunk,) = tree["children"]
    assert len(trunk["frames"]) == 37 and trunk["ranks"] == "0-4095"
    assert trunk["frames"][0] == {"function": "<module>", "filename": "train.py", "line": 200}
    assert sorted(c["count"] for c in trunk["children"]) == [1, 1, 4094]  # 101 is at :120 too
    assert doc["classes"][1]["user_frame"] == {
        "function": "load_batch",
        "filename": "data.py",
        "line": 88,
    }


def test_coarse_classes_merge_lines() -> None:
    res = group_stacks(_job(256), coarse=True)
    assert [c.count for c in res.classes] == [253, 2, 1]
    assert "Condition.wait <- train_step (train.py)" in render_classes(res)


def test_classes_stay_a_few_lines_when_every_rank_differs() -> None:
    stacks = {
        r: [Frame(function="f", filename="/job/a.py", line=r), *_stack(0)] for r in range(4096)
    }
    t0 = time.perf_counter()
    res = group_stacks(stacks)
    text = render_classes(res, max_lines=3)
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[-1] == "  … 4,093 more classes of at most 1 ranks each: 4,093 ranks (3-4095)"


def test_same_description_is_told_apart_and_no_stack_ranks() -> None:
    a = [
        Frame(function="step", filename="/job/t.py", line=5),
        Frame(function="run_a", filename="/job/t.py", line=1),
    ]
    b = [
        Frame(function="step", filename="/job/t.py", line=5),
        Frame(function="run_b", filename="/job/t.py", line=2),
    ]
    res = group_stacks(
        {0: a, 1: a, 2: b, 3: [], 4: [Frame(function="0x7f", filename="libc.so.6", native=True)]}
    )
    assert [c.description for c in res.classes] == [
        "step (t.py:5) via run_a (t.py:1)",
        "step (t.py:5) via run_b (t.py:2)",
    ]
    assert res.no_stack == (3, 4)
    assert render_classes(res).splitlines()[-1] == "  2 ranks (3-4): no Python frame"


def test_classes_on_real_samples_mix_formats() -> None:
    """py-spy text, faulthandler-style traceback and the sidecar of one job agree."""
    by_rank = {
        0: read_stack_file(SAMPLES / "pyspy_rank_0.txt"),
        1: read_stack_file(SAMPLES / "traceback_rank_1.txt"),
        2: read_stack_file(SAMPLES / "stacks_rank_0.json"),
        3: read_stack_file(SAMPLES / "pyspy_native_rank_0.json"),
    }
    res = group_stacks(by_rank)
    assert [(c.ranks, c.description) for c in res.classes] == [
        ((0, 2, 3), "all_reduce <- train_step (hung_job.py:29)"),
        ((1,), "load_batch (hung_job.py:23)"),
    ]


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([], "-"), ([3], "3"), ([0, 1, 2, 3, 5], "0-3,5"), ([7, 5, 6, 5, 9], "5-7,9")],
)
def test_format_ranks(ranks: list[int], text: str) -> None:
    assert format_ranks(ranks) == text


# --- the real py-spy on a live process -----------------------------------------------------

CHILD = """
import sys, time
def sleeping_in_known_function():
    print("ready", flush=True)
    time.sleep(60)
sleeping_in_known_function()
"""


@pytest.mark.skipif(
    shutil.which("py-spy") is None, reason="py-spy is not installed (pip install py-spy)"
)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ptrace check is Linux-only")
def test_real_pyspy_on_a_live_process(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        outs = {}
        for args, name in (([], "pyspy_rank_2.txt"), (["--json"], "pyspy_rank_2.json")):
            r = subprocess.run(
                ["py-spy", "dump", "--pid", str(proc.pid), *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if r.returncode != 0:
                err = (r.stderr + r.stdout).lower()
                if "permission" in err or "not permitted" in err or "ptrace" in err:
                    pytest.skip(f"ptrace is not permitted here: {r.stderr.strip()[:200]}")
                pytest.fail(f"py-spy dump failed: {r.stderr.strip()[:500]}")
            outs[name] = r.stdout
    finally:
        proc.kill()
        proc.wait()
    for name, out in outs.items():
        s = sniff(name, out)
        assert s.rank == 2 and s.pid == proc.pid
        user = innermost_user_frame(s)
        assert user is not None
        assert (user.function, user.line) == ("sleeping_in_known_function", 5)
        assert s.source == ("py-spy-json" if name.endswith(".json") else "py-spy-text")
