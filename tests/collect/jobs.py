"""What the collect tests share about the real jobs they start: a free port, and waiting until
every rank says it is where it will stay."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

__all__ = ["DEADLINE_S", "await_ready", "free_port"]

DEADLINE_S = 90.0  # for every rank of a job to be ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def await_ready(procs: list[subprocess.Popen[str]], deadline_s: float = DEADLINE_S) -> None:
    """Until each rank has printed ``ready`` (fails the test if one exits first)."""
    deadline = time.monotonic() + deadline_s
    for p in procs:
        assert p.stdout is not None
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if line.strip() == "ready":
                break
            if not line and p.poll() is not None:
                pytest.fail(f"a rank exited with {p.returncode} before it was ready")
