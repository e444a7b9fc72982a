"""NCCL RAS's view of the job, saved beside the dumps: ``ncclras -f json`` run where the
binary is installed (NCCL 2.28.7+ prints JSON), its answer written as ``ncclras.json``
(``frtrace.evidence.ras`` reads it).

It never touches the job: ``ncclras`` asks the RAS thread of a local NCCL process over
``localhost:28028`` (NCCL's own client socket) and prints what the job's RAS network knows. It
is bounded: RAS's own wait for other processes (``-t``) and ours for the client (killed past
it: the client, never a rank); its output is kept only where it exited cleanly and printed
JSON, and never past ``MAX_RAS_BYTES``. Where ``ncclras`` is not installed, nothing is done
and nothing said.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from typing import BinaryIO

from frtrace.base.files import OutDir, write_file
from frtrace.incident.budget import MAX_RAS_BYTES

__all__ = ["RAS_FILE_NAME", "RAS_TIMEOUT_S", "save_ras_status"]

RAS_FILE_NAME = "ncclras.json"
RAS_TIMEOUT_S = 5  # RAS's wait for the job's other processes (``ncclras -t``; its default)
_MARGIN_S = 5.0  # ours beyond it: the client's own connect and print


def save_ras_status(
    folder: OutDir,
    *,
    timeout_s: int = RAS_TIMEOUT_S,
    which: Callable[[str], str | None] = shutil.which,
) -> tuple[str, ...]:
    """``ncclras -f json`` saved as ``folder/ncclras.json``; a line saying why it was not
    (none where ``ncclras`` is not installed, or where it was saved)."""
    exe = which("ncclras")
    if exe is None:
        return ()
    said: list[str] = []

    def run(out: BinaryIO) -> None:
        try:  # (its own session: stopped with whatever it started, never a rank)
            proc = subprocess.Popen(
                [exe, "-f", "json", "-t", str(timeout_s)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            said.append(f"cannot run it ({exc.strerror or exc})")
            return
        try:
            err = proc.communicate(timeout=timeout_s + _MARGIN_S)[1]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            said.append(f"no answer in {timeout_s + _MARGIN_S:.0f} s (the client was stopped)")
            return
        if proc.returncode != 0:
            why = err.decode("utf-8", "replace").strip().splitlines()
            said.append(f"exit {proc.returncode}" + (f": {why[-1][:160]}" if why else ""))
            return
        out.flush()
        size = os.fstat(out.fileno()).st_size
        if not 0 < size <= MAX_RAS_BYTES:
            said.append(f"an answer of {size:,} bytes (JSON needs NCCL 2.28.7+)")

    written = write_file(folder, RAS_FILE_NAME, run, lambda: not said)
    if written is not None:
        return ()
    return (f"ncclras: {said[0] if said else 'nothing saved'}; NCCL RAS's view not saved",)
