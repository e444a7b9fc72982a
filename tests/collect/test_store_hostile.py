"""``collect --store`` against a hostile registry and hostile worker servers (stand-ins on
127.0.0.1, every loop bounded): a store that accepts and never answers, workers that are
silent, answer a byte a second, send an endless answer, or are many and refuse. Each run
ends within its ``--timeout`` plus a constant (python, torch's import in the registry's
child), in bounded memory, with a folder only for the hosts whose ranks answered."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

from frtrace.collect.run import host_folder

# Starting python and frtrace, and torch's import in the registry's reader: what a run may
# take past its --timeout on a loaded machine.
START_S = 45.0
LIFE_S = 150.0  # no stand-in outlives this, whatever the test does
GLOO_DUMP = json.dumps({"version": "2.10", "entries": [{"record_id": 0}]}).encode()

Handler = Callable[[socket.socket, bytes, threading.Event], None]


def _request(conn: socket.socket, stop: threading.Event) -> bytes:
    """The request line and headers (bounded), or b"" when the client went away."""
    data = b""
    conn.settimeout(1.0)
    while b"\r\n\r\n" not in data and len(data) < 65536 and not stop.is_set():
        try:
            piece = conn.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return b""
        if not piece:
            return b""
        data += piece
    return data


@contextmanager
def serve(handler: Handler) -> Iterator[int]:
    """A TCP server on 127.0.0.1 whose every connection ``handler`` answers, in a thread of
    its own; its port. Every thread ends when the test is done (or after ``LIFE_S``)."""
    stop = threading.Event()
    life = threading.Timer(LIFE_S, stop.set)
    life.daemon = True
    life.start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.settimeout(0.2)
    threads: list[threading.Thread] = []

    def one(conn: socket.socket) -> None:
        with conn:
            request = _request(conn, stop)
            if request:
                with suppress(OSError):
                    handler(conn, request, stop)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=one, args=(conn,), daemon=True)
            t.start()
            threads.append(t)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        life.cancel()
        acceptor.join(5)
        listener.close()
        for t in threads:
            t.join(5)


def _answer(conn: socket.socket, body: bytes) -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    conn.sendall(head.encode() + body)


HANDLERS = json.dumps(["dump_traceback", "fr_trace_json"]).encode()


def good(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    if request.startswith(b"GET"):
        _answer(conn, HANDLERS)
    elif b"fr_trace_json" in request:
        _answer(conn, GLOO_DUMP)
    else:
        _answer(conn, b'Thread 0x1 (most recent call first):\n  File "t.py", line 3 in f\n')


def silent(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    stop.wait(LIFE_S)


def slow(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    """A byte a second, for ever: a status line, then a header that never ends."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
        if stop.wait(1.0):
            return
        conn.sendall(bytes([byte]))


def huge(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    """Its handler list, then an answer that announces 4 GiB and sends as fast as it can."""
    if request.startswith(b"GET"):
        _answer(conn, HANDLERS)
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4294967296\r\n\r\n")
    chunk = b" " * (1 << 20)
    for _ in range(4096):
        if stop.is_set():
            return
        conn.sendall(chunk)


def _collect(out: Path, store: str, timeout_s: float) -> tuple[int, str, float, int]:
    """``frtrace collect OUT --store STORE`` in a process of its own, killed when it runs
    past any reasonable bound: (exit code, output, seconds, its peak memory in KiB)."""
    # VmHWM, the peak of this process image: ru_maxrss would start from this test process's
    # own resident size (Linux carries the parent's high-water mark through fork and exec)
    code = (
        "import re, sys\n"
        "from frtrace.cli import run\n"
        "try:\n"
        "    run()\n"
        "finally:\n"
        "    with open('/proc/self/status') as f:\n"
        "        kib = re.search(r'VmHWM:\\s*(\\d+)', f.read())[1]\n"
        "    print(f'MAXRSS {kib}', file=sys.stderr)\n"
    )
    argv = ["collect", str(out), "--store", store, "--timeout", f"{timeout_s}"]
    started = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, "-c", code, *argv, "--no-pyspy", "--no-analyze"],
            capture_output=True,
            text=True,
            timeout=timeout_s + START_S + 30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"collect --store --timeout {timeout_s:g} still ran after {START_S + 30:g} s")
    took = time.monotonic() - started
    found = re.search(r"MAXRSS (\d+)", run.stderr)
    assert found is not None, run.stderr[-2000:]
    return run.returncode, run.stdout + run.stderr, took, int(found[1])


def test_a_store_that_accepts_and_never_answers_costs_its_timeout(tmp_path: Path) -> None:
    with serve(silent) as port:
        code, output, took, _kib = _collect(tmp_path / "out", f"127.0.0.1:{port}", 2.0)
    assert code == 2, output
    (line,) = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert "did not give its debug server registry within 2 s" in line, output
    assert took < 2.0 + START_S, f"took {took:.1f} s"
    assert not (tmp_path / "out").exists()  # nothing made for a store that said nothing


@contextmanager
def registry(values: dict[str, str]) -> Iterator[int]:
    """A real TCPStore (torch's, in this process) holding ``values``; its port."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
    keys = sorted(values)
    for start in range(0, len(keys), 10_000):
        batch = keys[start : start + 10_000]
        store.multi_set(batch, [values[k] for k in batch])
    try:
        yield int(store.port)
    finally:
        del store


def test_hostile_workers_cost_one_timeout_in_bounded_memory(tmp_path: Path) -> None:
    """One good rank, a silent one, one a byte a second, one with an endless answer, and 40
    that refuse (on another host name): the run ends within its --timeout plus a constant,
    holds no answer whole, keeps the good rank's dump, and makes a folder only for the host
    whose ranks answered."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()  # (nothing listens there now)
    with serve(good) as g, serve(silent) as s, serve(slow) as w, serve(huge) as h:
        values = {
            f"debug_server/rank{r}": f"http://127.0.0.1:{p}" for r, p in enumerate((g, s, w, h))
        }
        for rank in range(4, 44):
            values[f"debug_server/rank{rank}"] = f"http://localhost:{refused}"
        with registry(values) as port:
            out = tmp_path / "out"
            code, output, took, kib = _collect(out, f"127.0.0.1:{port}", 3.0)
    assert code == 0, output
    assert took < 3.0 + START_S, f"took {took:.1f} s"
    print(f"hostile workers: {took:.1f} s, peak {kib >> 10} MiB")
    assert kib < 160 * 1024, f"collect held {kib >> 10} MiB"
    rows = {int(m[1]): m[0] for m in re.finditer(r"^\s*(\d+)\s+\S+.*$", output, re.M)}
    assert "fr_trace_json" in rows[0] and "NONE" not in rows[0], output
    assert "timed out" in rows[1] and "timed out" in rows[2], output
    assert re.search(r"larger than \d+ MiB|timed out", rows[3]), output
    here = out / host_folder("127.0.0.1")
    assert (here / "comm_lib_trace_rank_0.json").read_bytes() == GLOO_DUMP
    assert not (out / host_folder("localhost")).exists(), sorted(os.listdir(out))
    assert not [p.name for p in here.iterdir() if p.name.startswith(".")]  # no partial file


def test_a_registry_too_slow_to_read_is_one_line(tmp_path: Path) -> None:
    """100,000 registered ranks take torch's client seconds to read: with --timeout 0.5 that
    is a one-line error (was an unexpected DistStoreError), and nothing is made; where the
    machine reads them in time, every silent rank is a row and still nothing is made."""
    values = {f"debug_server/rank{r}": "http://127.0.0.1:9" for r in range(100_000)}
    with registry(values) as port:
        code, output, took, _kib = _collect(tmp_path / "out", f"127.0.0.1:{port}", 0.5)
    assert "unexpected" not in output and "Traceback" not in output, output[-2000:]
    out = tmp_path / "out"  # (a host's folder only for a rank that answered)
    assert not out.exists() or not any(out.iterdir())
    if code == 0:  # a quiet machine read the registry in time: every rank's row says so
        assert output.count("did not answer") == 100_000, output[-2000:]
        return
    assert code == 2, output[-2000:]
    (line,) = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: --store 127.0.0.1:"), output
    assert took < 0.5 + START_S


def test_a_link_at_a_host_folder_is_never_written_through(tmp_path: Path) -> None:
    """``DIR/<host>`` planted as a link (collect runs as root, the job's workers name their
    host): every answer of that host is refused in its row, nothing lands at the target."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / host_folder("127.0.0.1"))
    with serve(good) as g, registry({"debug_server/rank0": f"http://127.0.0.1:{g}"}) as port:
        code, output, _took, _kib = _collect(out, f"127.0.0.1:{port}", 5.0)
    assert code == 0, output  # (collect itself went on: the refusal is the rank's row)
    assert "is a symbolic link: not entered" in output, output
    assert "NONE" in output, output
    assert not list(victim.iterdir())
