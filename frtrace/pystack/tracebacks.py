"""Python ``faulthandler`` output (``dump_traceback``, ``dump_traceback_later``, a registered
signal, a fatal error) and torch's worker-server ``dump_traceback`` handler (faulthandler
written from a C++ thread)."""

from __future__ import annotations

import re

from frtrace.pystack.common import StackFileError, decode_text, guess_main, split_lines
from frtrace.pystack.model import Frame, ProcessStacks, Source, ThreadStack

__all__ = ["parse_traceback"]

_FH_HEADER = re.compile(
    r"^(?P<cur>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+)(?: .*?)? \(most recent call first\):$"
)
_FH_STACK = "Stack (most recent call first):"
_FH_FRAME = re.compile(
    r'^  File (?:"(?P<file>.*)"|\?\?\?), line (?P<line>\d{1,9}|\?\?\?) in (?P<name>.*)$'
)


def _fh_dumps(lines: list[str], path: str, *, complete: bool) -> list[list[ThreadStack]]:
    """Thread blocks grouped into dumps: blocks separated only by blank lines are one dump."""
    dumps: list[list[ThreadStack]] = []
    frames: list[Frame] | None = None
    header: tuple[str | None, bool] = (None, False)
    pending: list[ThreadStack] | None = None  # the dump being read
    gap_clean = False  # only blank lines since the last block ended
    marker = False

    def close() -> None:
        nonlocal frames, marker
        if frames is not None and pending is not None:
            pending.append(
                ThreadStack(
                    thread_id=header[0],
                    name=None,
                    frames=tuple(frames),
                    is_main=False,
                    current=header[1],
                )
            )
        frames, marker = None, False

    for n, line in enumerate(lines, 1):
        hm = _FH_HEADER.match(line)
        if hm is not None or line == _FH_STACK:
            was_open = frames is not None
            close()
            if pending is None or not (gap_clean or was_open):
                pending = []
                dumps.append(pending)
            header = (hm.group("id"), hm.group("cur") == "Current thread") if hm else (None, True)
            frames = []
            gap_clean = False
            continue
        if frames is not None:
            fm = _FH_FRAME.match(line)
            if fm is not None:
                ln = fm.group("line")
                frames.append(
                    Frame(
                        function=fm.group("name"),
                        filename=fm.group("file") or "???",
                        line=int(ln) if ln.isdigit() else None,
                    )
                )
                continue
            if line.startswith("  File "):
                raise StackFileError(path, f"line {n} is a cut-off frame line: {line[:80]!r}")
            if line.startswith("  <") or line in ("  ...", "  Garbage-collecting"):
                marker = True  # <no Python frame>, <tstate is freed>, a cut-off deep stack
                continue
            if not frames and not marker:
                raise StackFileError(path, f"line {n}: a thread header with no frames after it")
            close()
            gap_clean = line.strip() == ""
            continue
        gap_clean = gap_clean and line.strip() == ""
    if frames is not None:
        if not complete and lines[-1]:
            raise StackFileError(path, "the file ends inside a thread's frames (truncated?)")
        if not frames and not marker:
            raise StackFileError(path, "the last thread header has no frames (truncated?)")
        close()
    return [d for d in dumps if d]


def parse_traceback(
    data: bytes | str,
    path: str = "<traceback>",
    *,
    rank: int | None = None,
    source: Source | None = None,
) -> ProcessStacks:
    """faulthandler output, or torch's worker-server ``dump_traceback`` handler.

    Text around the dump (a job log) is ignored; when the file holds several dumps (a
    watchdog that repeats) the last one is read. Source: ``dump_traceback`` when the thread
    that wrote it has no Python frame (torch's handler runs on a C++ server thread),
    otherwise ``faulthandler``; pass ``source`` to say.
    """
    text = decode_text(data, path)
    dumps = _fh_dumps(split_lines(text, path), path, complete=text.endswith("\n"))
    if not dumps:
        raise StackFileError(
            path, "no 'Thread 0x... (most recent call first):' block: not faulthandler output"
        )
    threads = dumps[-1]
    if source is None:
        torch_handler = any(t.current and not t.frames for t in threads)
        source = "dump_traceback" if torch_handler else "faulthandler"
    return ProcessStacks(
        rank=rank,
        pid=None,
        host=None,
        source=source,
        path=path,
        threads=tuple(guess_main(list(threads))),
    )


# --- recorder sidecar --------------------------------------------------------------------
