"""What ``collect --store`` asks each rank's worker server, against stand-in servers that
answer the way torch's does (``GET /handler/`` lists the handlers, ``POST /handler/<name>``
runs one) and the ways a sick rank does: slow, failing, NCCL builds with their own handler."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from frtrace.collect.store import Answer, StoreRank, Worker, fetch_all, fetch_rank

GLOO_DUMP = json.dumps({"version": "2.10", "entries": [{"record_id": 0}]}).encode()
NCCL_DUMP = json.dumps({"version": "2.10", "entries": [{"record_id": 7}], "nccl": True}).encode()
EMPTY_NCCL = json.dumps({"version": "2.10", "entries": []}).encode()
PYSPY = b"Process 4242: python train.py\nPython v3.11.7 (/usr/bin/python3)\n\nThread 4242 (idle)"
TRACEBACK = b'Thread 0x00007f (most recent call first):\n  File "t.py", line 3 in f\n\n'


@contextmanager
def worker(answers: Mapping[str, tuple[int, bytes] | float]) -> Iterator[Worker]:
    """A stand-in worker server: ``answers`` maps a handler to (status, body), or to seconds
    to stall before answering 200 with nothing useful. A stall ends when the server does, and
    what the server cannot send then (the client gone) is not printed: it would land in
    another test's stderr."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(200, json.dumps(sorted(answers)).encode())

        def do_POST(self) -> None:
            name = self.path.split("?", 1)[0].removeprefix("/handler/")
            answer = answers.get(name)
            if isinstance(answer, float):
                stop.wait(answer)
                answer = (200, b"late")
            self._send(*(answer or (404, b"Handler not found")))

    class Server(ThreadingHTTPServer):
        daemon_threads = False  # (server_close() waits for every handler: none outlives it)

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that gave up (its timeout): nothing to say

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield Worker(rank=5, url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def _name(rank: int) -> str:
    return f"comm_lib_trace_rank_{rank}"


class Saved(dict[str, bytes]):
    """A ``save`` that keeps each answer by file name (and says where it "wrote" it)."""

    def __call__(
        self, worker: Worker, name: str, answer: Answer, keep: Callable[[], bool] | None
    ) -> str | None:
        data = answer.read()
        if keep is not None and not keep():
            return None
        self[name] = data
        return f"{worker.host}/{name}"


def _fetch(w: Worker, timeout_s: float, pyspy: bool) -> tuple[StoreRank, Saved]:
    saved = Saved()
    return fetch_rank(w, timeout_s, pyspy=pyspy, dump_name=_name, save=saved), saved


def test_a_gloo_rank_gives_its_stacks_pid_and_dump() -> None:
    answers = {
        "pyspy_dump": (200, PYSPY),
        "dump_traceback": (200, TRACEBACK),
        "fr_trace_json": (200, GLOO_DUMP),
    }
    with worker(answers) as w:
        got, files = _fetch(w, 5.0, True)
    assert got.pid == 4242
    assert files == {
        "pyspy_rank_5.txt": PYSPY,
        "traceback_rank_5.txt": TRACEBACK,
        "comm_lib_trace_rank_5.json": GLOO_DUMP,
    }
    assert got.dumped_at_ns is not None
    assert all(o.ok for o in got.outcomes), got.outcomes


def test_an_nccl_rank_gives_the_nccl_recorder_s_entries() -> None:
    answers = {
        "dump_traceback": (200, TRACEBACK),
        "fr_trace_json": (200, GLOO_DUMP),
        "dump_nccl_trace_json": (200, NCCL_DUMP),
    }
    with worker(answers) as w:
        got, files = _fetch(w, 5.0, False)
    assert files["comm_lib_trace_rank_5.json"] == NCCL_DUMP
    assert [o.detail for o in got.outcomes if o.kind == "dump"] == ["NCCL"]


def test_an_nccl_build_with_nothing_recorded_by_nccl_gives_the_cpu_recorder_s() -> None:
    answers = {"fr_trace_json": (200, GLOO_DUMP), "dump_nccl_trace_json": (200, EMPTY_NCCL)}
    with worker(answers) as w:
        _got, files = _fetch(w, 5.0, False)
    assert files["comm_lib_trace_rank_5.json"] == GLOO_DUMP


def test_failures_are_said_per_handler_and_the_rest_still_collected() -> None:
    answers = {
        "pyspy_dump": (500, b"py-spy: Permission denied (os error 1)"),
        "fr_trace_json": (200, GLOO_DUMP),
    }
    with worker(answers) as w:
        got, files = _fetch(w, 5.0, True)
    failed = {o.detail for o in got.outcomes if not o.ok}
    assert "pyspy_dump: HTTP 500: py-spy: Permission denied (os error 1)" in failed, failed
    assert "dump_traceback: not served by this torch" in failed, failed
    assert got.pid is None and "comm_lib_trace_rank_5.json" in files


def test_a_stalled_rank_costs_one_timeout_and_the_others_are_not_held() -> None:
    stall = {"dump_traceback": 30.0, "fr_trace_json": 30.0}
    fine = {"dump_traceback": (200, TRACEBACK), "fr_trace_json": (200, GLOO_DUMP)}
    with worker(stall) as slow, worker(fine) as quick:
        quick = Worker(rank=6, url=quick.url, host=quick.host, port=quick.port)
        started = time.monotonic()
        saved = Saved()
        got = fetch_all([slow, quick], 1.0, pyspy=False, dump_name=_name, save=saved)
        took = time.monotonic() - started
    assert took < 5.0, f"took {took:.1f} s for two 1 s timeouts in a row on the slow rank"
    assert [o.detail for o in got[0].outcomes if not o.ok] == [
        "dump_traceback: timed out",
        "fr_trace_json: not asked: the rank's --timeout was spent",
    ]
    assert got[0].dumped_at_ns is None
    assert "comm_lib_trace_rank_6.json" in saved
    assert got[1].outcomes[-1].paths == ("127.0.0.1/comm_lib_trace_rank_6.json",)


def test_a_rank_that_is_gone_is_one_line() -> None:
    with worker({}) as w:
        pass  # (closed: nothing listens there any more)
    got, _files = _fetch(w, 1.0, True)
    (only,) = got.outcomes
    assert not only.ok and only.detail.startswith(f"{w.url} did not answer"), only.detail


@pytest.mark.parametrize("size_mib", [1])
def test_answers_are_kept_whole(size_mib: int) -> None:
    big = json.dumps({"version": "2.10", "entries": [{"x": "y" * (size_mib << 20)}]}).encode()
    with worker({"fr_trace_json": (200, big)}) as w:
        _got, files = _fetch(w, 5.0, False)
    assert files["comm_lib_trace_rank_5.json"] == big


def test_an_nccl_handler_that_fails_is_said_and_the_cpu_recorder_s_kept() -> None:
    answers = {"fr_trace_json": (200, GLOO_DUMP), "dump_nccl_trace_json": (500, b"watchdog")}
    with worker(answers) as w:
        got, files = _fetch(w, 5.0, False)
    assert files["comm_lib_trace_rank_5.json"] == GLOO_DUMP
    failed = [o.detail for o in got.outcomes if not o.ok and o.kind == "dump"]
    assert failed == ["dump_nccl_trace_json: HTTP 500: watchdog"], got.outcomes


@pytest.mark.parametrize("pad", [(1 << 20) - 12, (1 << 20) - 3, 3 << 20])
def test_an_nccl_answer_is_judged_on_the_way_never_parsed_whole(pad: int) -> None:
    """Whether an NCCL answer holds an entry is seen as it streams past (here with its
    ``"entries"`` across a MiB boundary, or far in), never by parsing it whole."""
    head = b'{"version": "2.10", "pg_config": "' + b"x" * pad + b'", '
    nccl = head + b'"entries": [{"record_id": 7}]}'
    answers = {"fr_trace_json": (200, GLOO_DUMP), "dump_nccl_trace_json": (200, nccl)}
    with worker(answers) as w:
        got, files = _fetch(w, 10.0, False)
    assert files["comm_lib_trace_rank_5.json"] == nccl
    assert [o.detail for o in got.outcomes if o.kind == "dump"] == ["NCCL"]
