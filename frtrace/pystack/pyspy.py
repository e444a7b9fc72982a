"""``py-spy dump`` output, text (with or without ``--locals``, ``--native``,
``--subprocesses``) and ``--json``, as verified against py-spy 0.4."""

from __future__ import annotations

import re

from frtrace.pystack.common import (
    StackFileError,
    decode_text,
    dict_items,
    get_field,
    guess_main,
    load_json,
    need_field,
    split_lines,
)
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack

__all__ = ["parse_pyspy_json", "parse_pyspy_text", "parse_pyspy_text_all"]

_PS_PROCESS = re.compile(r"^Process (\d{1,10}): ?(.*)$")
_PS_PYTHON = re.compile(r"^Python v\d+\.\d+")
_PS_PARENT = re.compile(r"^Parent Process \d+: ?")
_PS_THREAD = re.compile(r'^Thread (\S+)(?: \((idle|active\+gil|active|gil)\))?(?:: "(.*)")?$')
_PS_FRAME = re.compile(r"^    (?=\S)(.*) \(([^()]*?)(?::(\d{1,9}))?\)$")
_PS_SEPARATOR = re.compile(r"^-{20,}$")
_STATUS = {
    "idle": (False, None),
    "active+gil": (True, True),
    "active": (True, False),
    "gil": (None, True),
    None: (None, None),
}


def _ps_frame(m: re.Match[str]) -> Frame:
    name, loc, line = m.groups()
    if line is not None:
        return Frame(function=name, filename=loc, line=int(line))
    # no line: a native frame ("clock_nanosleep (libc.so.6)") or a line-0 Python frame
    return Frame(function=name, filename=loc, native=not loc.endswith(".py"))


class _PyspyBlock:
    __slots__ = ("pid", "threads")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads: list[tuple[str, str | None, str | None, list[Frame]]] = []


def _pyspy_blocks(lines: list[str], path: str) -> list[_PyspyBlock]:
    blocks: list[_PyspyBlock] = []
    block: _PyspyBlock | None = None
    state = "start"  # start | header | parent | threads
    frames: list[Frame] | None = None
    in_locals = False
    for n, line in enumerate(lines, 1):
        if frames is not None and not in_locals:
            fm = _PS_FRAME.match(line)
            if fm is not None:  # most lines: a frame, "name (file:line)" or native "name (lib)"
                frames.append(_ps_frame(fm))
                continue
        pm = _PS_PROCESS.match(line) if line.startswith("Process ") else None
        if pm is not None and state in ("start", "threads"):
            block = _PyspyBlock(int(pm.group(1)))
            blocks.append(block)
            state, frames, in_locals = "header", None, False
            continue
        if state == "start":
            if line.startswith(("Error:", "error:")):
                raise StackFileError(path, f"py-spy failed: {line[:200]}")
            continue  # text before the first "Process" line (a shell prompt, a log line)
        if state == "header":  # the command line may span lines; "Python v..." ends it
            if _PS_PYTHON.match(line):
                state = "parent"
            elif _PS_THREAD.match(line):
                raise StackFileError(path, f"line {n}: a thread before the 'Python v' line")
            continue
        if state == "parent":  # optional "Parent Process" (its command line may span lines)
            if _PS_THREAD.match(line):
                state = "threads"
            elif line.startswith("Error:"):
                raise StackFileError(path, f"py-spy failed: {line[:200]}")
            else:
                continue
        assert block is not None
        tm = _PS_THREAD.match(line)
        if tm is not None:
            frames = []
            block.threads.append((tm.group(1), tm.group(2), tm.group(3), frames))
            in_locals = False
            continue
        fm = _PS_FRAME.match(line) if frames is not None else None
        if fm is not None and frames is not None:  # the first frame after a locals block
            frames.append(_ps_frame(fm))
            in_locals = False
            continue
        stripped = line.strip()
        if stripped in ("Arguments:", "Locals:") and line.startswith("        "):
            in_locals = True
            continue
        if in_locals or not stripped or _PS_SEPARATOR.match(line):
            continue  # a local's repr (may span lines), a blank, the --subprocesses rule
        if line.startswith("Error:"):
            raise StackFileError(path, f"py-spy failed: {line[:200]}")
        raise StackFileError(
            path, f"line {n} is not a py-spy thread or frame line: {line[:80]!r} (truncated?)"
        )
    if not blocks:
        raise StackFileError(path, "no 'Process PID: ...' line: not py-spy dump output")
    if state != "threads":
        raise StackFileError(path, "the py-spy header has no threads after it (truncated?)")
    return blocks


def _pyspy_process(block: _PyspyBlock, path: str, rank: int | None) -> ProcessStacks:
    threads: list[ThreadStack] = []
    for tid, status, name, frames in block.threads:
        active, gil = _STATUS[status]
        is_main = name == "MainThread" or (name is None and tid == str(block.pid))
        threads.append(
            ThreadStack(
                thread_id=tid,
                name=name,
                frames=tuple(frames),
                is_main=is_main,
                active=active,
                owns_gil=gil,
            )
        )
    if not threads:
        raise StackFileError(path, f"process {block.pid} has no threads (truncated?)")
    return ProcessStacks(
        rank=rank,
        pid=block.pid,
        host=None,
        source="py-spy-text",
        path=path,
        threads=tuple(guess_main(threads)),
    )


def parse_pyspy_text_all(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> tuple[ProcessStacks, ...]:
    """Every process of a ``py-spy dump`` text (several with ``--subprocesses``)."""
    text = decode_text(data, path)
    if not text.endswith("\n"):  # py-spy ends every line, the last one too
        raise StackFileError(path, "the file ends mid-line (truncated?)")
    blocks = _pyspy_blocks(split_lines(text, path), path)
    return tuple(_pyspy_process(b, path, rank) for b in blocks)


def parse_pyspy_text(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> ProcessStacks:
    """The first (with ``--subprocesses``: the top) process of a ``py-spy dump`` text."""
    return parse_pyspy_text_all(data, path, rank=rank)[0]


# --- JSON helpers ------------------------------------------------------------------------


def parse_pyspy_json(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> ProcessStacks:
    """``py-spy dump --json``: a list of threads, each with its frames innermost first."""
    doc = load_json(data, path)
    if not isinstance(doc, list):
        raise StackFileError(path, f"py-spy --json output is a list, this is {type(doc).__name__}")
    threads: list[ThreadStack] = []
    pids: set[int] = set()
    for i, t in dict_items(doc, path, "the thread list"):
        where = f"thread {i}"
        pid = get_field(t, "pid", int, path, where)
        if pid is not None:
            pids.add(pid)
        tid = get_field(t, "thread_id", int, path, where)
        os_tid = get_field(t, "os_thread_id", int, path, where)
        name = get_field(t, "thread_name", str, path, where)
        frames: list[Frame] = []
        for j, f in dict_items(t.get("frames"), path, f"{where} frames"):
            fw = f"{where} frame {j}"
            fname = need_field(f, "name", str, path, fw)
            filename = need_field(f, "filename", str, path, fw)
            line = get_field(f, "line", int, path, fw)
            native = (line is None or line == 0) and not filename.endswith(".py")
            frames.append(
                Frame(
                    function=fname,
                    filename=filename,
                    line=line if line else None,
                    native=native,
                )
            )
        is_main = name == "MainThread" or (
            name is None and os_tid is not None and pid is not None and os_tid == pid
        )
        threads.append(
            ThreadStack(
                thread_id=str(os_tid)
                if os_tid is not None
                else (None if tid is None else hex(tid)),
                name=name,
                frames=tuple(frames),
                is_main=is_main,
                active=get_field(t, "active", bool, path, where),
                owns_gil=get_field(t, "owns_gil", bool, path, where),
            )
        )
    if not threads:
        raise StackFileError(path, "an empty thread list")
    return ProcessStacks(
        rank=rank,
        pid=min(pids) if pids else None,
        host=None,
        source="py-spy-json",
        path=path,
        threads=tuple(guess_main(threads)),
    )


# --- faulthandler / torch dump_traceback -------------------------------------------------
