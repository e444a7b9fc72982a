"""A process that looks like a rank to ``frtrace collect`` (RANK in its environment), for the
security tests in tests/collect/test_collect_security.py. Standard library only, so it runs
as another (unprivileged) user under whatever Python that user may execute:

    python3 fake_rank.py pipe ACTION STEM PREFIX RANK [TARGET]
    python3 fake_rank.py signal-exit | signal-noop
    python3 fake_rank.py recorder-then-handler DUMP_DIR     (needs frtrace and torch)

``pipe``: answers the NCCL debug pipe ``<STEM><RANK>.pipe`` the way its ACTION says, once per
byte written into it: ``write`` writes a dump to ``<PREFIX><RANK>`` (what NCCL does);
``symlink`` makes ``<PREFIX><RANK>`` a symbolic link to TARGET; ``rename`` moves TARGET there
(a file of another user); ``linkpipe``: the pipe itself is a symbolic link to TARGET.
``signal-exit``: SIGUSR1 makes it exit with code 42 (as a SLURM requeue handler would);
``signal-noop``: a SIGUSR1 handler that does nothing. ``recorder-then-handler``:
``frtrace.recorder.enable()``, then its own SIGUSR1 handler that exits with code 42 (what
Lightning does on SLURM). Each prints ``ready`` when set up and runs until killed.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time


def _exit_42(signum: int, frame: object) -> None:
    os._exit(42)


def _pipe(action: str, stem: str, prefix: str, rank: str, target: str | None) -> None:
    fifo = f"{stem}{rank}.pipe"
    if action == "linkpipe":
        os.symlink(str(target), fifo)
        print("ready", flush=True)
        time.sleep(120)
        return
    os.mkfifo(fifo, 0o600)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(fifo, os.O_WRONLY)  # a writer of its own: no end of file between requests
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([rfd], [], [], 1.0)
        if not ready or not os.read(rfd, 64):
            continue
        dump = f"{prefix}{rank}"
        if action == "write":
            with open(dump, "wb") as fh:
                fh.write(b"DUMP OF RANK " + rank.encode())
        elif action == "symlink":
            os.symlink(str(target), dump)
        elif action == "rename":
            os.rename(str(target), dump)
    os.close(keep)


def main() -> None:
    mode = sys.argv[1]
    if mode == "pipe":
        target = sys.argv[6] if len(sys.argv) > 6 else None
        _pipe(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], target)
        return
    if mode == "recorder-then-handler":
        import frtrace.recorder

        frtrace.recorder.enable(sys.argv[2], verbose=False)
        # a job that hangs has torch imported: the dump's own import of it is no part of
        # what collect's --timeout bounds
        import torch.distributed  # noqa: F401

        signal.signal(signal.SIGUSR1, _exit_42)
    elif mode == "signal-exit":
        signal.signal(signal.SIGUSR1, _exit_42)
    elif mode == "signal-noop":
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("ready", flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()
