"""Read the Python stacks people collect from a hung job's ranks.

Formats (each verified against real output; see tests/fixtures/pystack/README.md):

* ``py-spy dump --pid PID`` text, with or without ``--locals`` / ``--native`` /
  ``--subprocesses`` (:func:`parse_pyspy_text`, :func:`parse_pyspy_text_all`);
* ``py-spy dump --json`` (:func:`parse_pyspy_json`);
* Python ``faulthandler`` output (``dump_traceback``, ``dump_traceback_later``, a registered
  signal, a fatal error) and torch's worker-server ``dump_traceback`` handler, which is
  faulthandler written from a C++ thread (:func:`parse_traceback`);
* the frtrace recorder sidecar (:func:`parse_recorder`; format in
  :mod:`frtrace.pystack.record`).

:func:`sniff` tells them apart by content. Every parser raises :class:`StackFileError`, and
nothing else, on input it cannot read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from frtrace.pystack.model import Frame, ProcessStacks, Source, ThreadStack
from frtrace.pystack.record import FORMAT_NAME, FORMAT_VERSION, TRIGGER_KINDS

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_CHARS",
    "StackFileError",
    "detect_format",
    "parse_pyspy_json",
    "parse_pyspy_text",
    "parse_pyspy_text_all",
    "parse_recorder",
    "parse_traceback",
    "rank_from_filename",
    "read_stack_file",
    "sniff",
]

MAX_FILE_BYTES = 64 * 1024 * 1024  # a py-spy --locals dump of 1,000 threads is ~10 MB
MAX_LINE_CHARS = 1024 * 1024  # faulthandler cuts strings at 500 chars; py-spy reprs at ~1 KB
_MAX_THREADS = 100_000

_HINT = (
    "expected py-spy dump text or --json, faulthandler/dump_traceback output, or an "
    "frtrace-stacks sidecar; collect it again or leave this file out"
)


class StackFileError(ValueError):
    """A stack file that cannot be read: one line naming the file, the problem, what next."""

    def __init__(self, path: str, problem: str, hint: str = _HINT) -> None:
        self.path = path
        self.problem = " ".join(problem.split())
        super().__init__(f"{path}: {self.problem}; {hint}")


# --- shared helpers ----------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _text(data: bytes | str, path: str) -> str:
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > MAX_FILE_BYTES:
            raise StackFileError(
                path, f"{len(raw):,} bytes, more than the {MAX_FILE_BYTES:,} any stack dump needs"
            )
        if b"\x00" in raw:
            raise StackFileError(path, "binary data (NUL bytes), not a text stack dump")
        text = raw.decode("utf-8", errors="replace")
    elif isinstance(data, str):
        if len(data) > MAX_FILE_BYTES:
            raise StackFileError(path, f"{len(data):,} characters, too large for a stack dump")
        if "\x00" in data:
            raise StackFileError(path, "binary data (NUL characters), not a text stack dump")
        text = data
    else:
        raise StackFileError(path, f"cannot read a {type(data).__name__} as a stack dump")
    text = text.removeprefix("\ufeff")
    if "\x1b" in text:
        text = _ANSI.sub("", text)  # py-spy output captured through a terminal
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise StackFileError(path, "empty file")
    return text


def _lines(text: str, path: str) -> list[str]:
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise StackFileError(
                path, f"line {n} is {len(line):,} characters long, not a stack dump line"
            )
    return lines


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    """The digits at the end of the file's stem: ``pyspy_rank_5.txt``, ``rank5.json`` -> 5."""
    stem = PurePath(os.fspath(path)).name.split(".", 1)[0]
    m = re.search(r"(\d+)$", stem)
    return int(m.group(1)) if m and len(m.group(1)) <= 9 else None


_BOOTSTRAP = frozenset({"_bootstrap", "Thread._bootstrap", "_bootstrap_inner"})


def _started_by_threading(frames: tuple[Frame, ...]) -> bool:
    py = [f for f in frames if not f.native]
    if not py:
        return False
    outer = py[-1]
    return outer.function in _BOOTSTRAP and outer.filename.endswith("threading.py")


def _guess_main(threads: list[ThreadStack]) -> list[ThreadStack]:
    """Mark as main the one thread not started by threading (formats that do not say)."""
    if any(t.is_main for t in threads):
        return threads
    cands = [i for i, t in enumerate(threads) if t.frames and not _started_by_threading(t.frames)]
    if not cands:
        return threads
    module = [i for i in cands if _outer_function(threads[i]) == "<module>"]
    pick = (module or cands)[-1]  # faulthandler lists the newest thread first, main last
    t = threads[pick]
    threads[pick] = ThreadStack(
        thread_id=t.thread_id,
        name=t.name,
        frames=t.frames,
        is_main=True,
        active=t.active,
        owns_gil=t.owns_gil,
        current=t.current,
    )
    return threads


def _outer_function(t: ThreadStack) -> str | None:
    py = [f for f in t.frames if not f.native]
    return py[-1].function if py else None


# --- py-spy text -------------------------------------------------------------------------

_PS_PROCESS = re.compile(r"^Process (\d+): ?(.*)$")
_PS_PYTHON = re.compile(r"^Python v\d+\.\d+")
_PS_PARENT = re.compile(r"^Parent Process \d+: ?")
_PS_THREAD = re.compile(r'^Thread (\S+)(?: \((idle|active\+gil|active|gil)\))?(?:: "(.*)")?$')
_PS_FRAME = re.compile(r"^    (?=\S)(.*) \(([^()]*?)(?::(\d+))?\)$")
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
        threads=tuple(_guess_main(threads)),
    )


def parse_pyspy_text_all(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> tuple[ProcessStacks, ...]:
    """Every process of a ``py-spy dump`` text (several with ``--subprocesses``)."""
    text = _text(data, path)
    if not text.endswith("\n"):  # py-spy ends every line, the last one too
        raise StackFileError(path, "the file ends mid-line (truncated?)")
    blocks = _pyspy_blocks(_lines(text, path), path)
    return tuple(_pyspy_process(b, path, rank) for b in blocks)


def parse_pyspy_text(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> ProcessStacks:
    """The first (with ``--subprocesses``: the top) process of a ``py-spy dump`` text."""
    return parse_pyspy_text_all(data, path, rank=rank)[0]


# --- JSON helpers ------------------------------------------------------------------------


def _load_json(data: bytes | str, path: str) -> Any:
    text = _text(data, path)
    try:
        return json.loads(text)
    except RecursionError:  # json's C decoder stops cleanly at the recursion limit
        raise StackFileError(path, "JSON nested deeper than any stack dump") from None
    except ValueError as exc:
        raise StackFileError(path, f"not valid JSON ({exc}) (truncated?)") from None


def _get(
    obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str, where: str
) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind):
        raise StackFileError(path, f"{where}: {key!r} is a boolean, expected {_kind(kind)}")
    if not isinstance(value, kind):
        raise StackFileError(
            path, f"{where}: {key!r} is {type(value).__name__}, expected {_kind(kind)}"
        )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def _need(obj: dict[str, Any], key: str, kind: type, path: str, where: str) -> Any:
    value = _get(obj, key, kind, path, where)
    if value is None:
        raise StackFileError(path, f"{where}: {key!r} is missing")
    return value


def _dicts(value: Any, path: str, where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if not isinstance(value, list):
        raise StackFileError(path, f"{where} is {type(value).__name__}, expected a list")
    if len(value) > _MAX_THREADS:
        raise StackFileError(path, f"{where} has {len(value):,} items, more than any real dump")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise StackFileError(path, f"{where}[{i}] is {type(item).__name__}, expected an object")
        yield i, item


# --- py-spy --json -----------------------------------------------------------------------


def parse_pyspy_json(
    data: bytes | str, path: str = "<py-spy>", *, rank: int | None = None
) -> ProcessStacks:
    """``py-spy dump --json``: a list of threads, each with its frames innermost first."""
    doc = _load_json(data, path)
    if not isinstance(doc, list):
        raise StackFileError(path, f"py-spy --json output is a list, this is {type(doc).__name__}")
    threads: list[ThreadStack] = []
    pids: set[int] = set()
    for i, t in _dicts(doc, path, "the thread list"):
        where = f"thread {i}"
        pid = _get(t, "pid", int, path, where)
        if pid is not None:
            pids.add(pid)
        tid = _get(t, "thread_id", int, path, where)
        os_tid = _get(t, "os_thread_id", int, path, where)
        name = _get(t, "thread_name", str, path, where)
        frames: list[Frame] = []
        for j, f in _dicts(t.get("frames"), path, f"{where} frames"):
            fw = f"{where} frame {j}"
            fname = _need(f, "name", str, path, fw)
            filename = _need(f, "filename", str, path, fw)
            line = _get(f, "line", int, path, fw)
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
                active=_get(t, "active", bool, path, where),
                owns_gil=_get(t, "owns_gil", bool, path, where),
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
        threads=tuple(_guess_main(threads)),
    )


# --- faulthandler / torch dump_traceback -------------------------------------------------

_FH_HEADER = re.compile(
    r"^(?P<cur>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+)(?: .*?)? \(most recent call first\):$"
)
_FH_STACK = "Stack (most recent call first):"
_FH_FRAME = re.compile(
    r'^  File (?:"(?P<file>.*)"|\?\?\?), line (?P<line>\d+|\?\?\?) in (?P<name>.*)$'
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
    text = _text(data, path)
    dumps = _fh_dumps(_lines(text, path), path, complete=text.endswith("\n"))
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
        threads=tuple(_guess_main(list(threads))),
    )


# --- recorder sidecar --------------------------------------------------------------------


def parse_recorder(
    data: bytes | str, path: str = "<stacks>", *, rank: int | None = None
) -> ProcessStacks:
    """An frtrace-stacks sidecar (:mod:`frtrace.pystack.record`). ``rank`` is the fallback
    when the sidecar's own rank is null."""
    doc = _load_json(data, path)
    return _recorder_from_doc(doc, path, rank)


def _recorder_from_doc(doc: Any, path: str, rank: int | None) -> ProcessStacks:
    if not isinstance(doc, dict):
        raise StackFileError(path, f"a sidecar is a JSON object, this is {type(doc).__name__}")
    fmt = doc.get("format")
    if fmt != FORMAT_NAME:
        raise StackFileError(path, f"a JSON object whose format is {fmt!r}, not {FORMAT_NAME!r}")
    version = _need(doc, "version", int, path, "the sidecar")
    if version > FORMAT_VERSION:
        raise StackFileError(
            path,
            f"sidecar version {version} is newer than {FORMAT_VERSION}",
            "upgrade frtrace to read it",
        )
    if version < 1:
        raise StackFileError(path, f"sidecar version {version} does not exist")
    own_rank = _get(doc, "rank", int, path, "the sidecar")
    trigger = doc.get("trigger")
    trigger_text: str | None = None
    if trigger is not None:
        if not isinstance(trigger, dict):
            raise StackFileError(path, "'trigger' is not an object")
        kind = _need(trigger, "kind", str, path, "trigger")
        if kind not in TRIGGER_KINDS:
            raise StackFileError(path, f"trigger kind {kind!r} is not one of {TRIGGER_KINDS}")
        detail = _get(trigger, "detail", str, path, "trigger")
        trigger_text = f"{kind}: {detail}" if detail else kind
    threads: list[ThreadStack] = []
    for i, t in _dicts(doc.get("threads"), path, "'threads'"):
        where = f"thread {i}"
        frames: list[Frame] = []
        for j, f in _dicts(t.get("frames"), path, f"{where} frames"):
            fw = f"{where} frame {j}"
            frames.append(
                Frame(
                    function=_need(f, "name", str, path, fw),
                    filename=_need(f, "filename", str, path, fw),
                    line=_get(f, "line", int, path, fw),
                )
            )
        tid = _get(t, "id", (str, int), path, where)
        threads.append(
            ThreadStack(
                thread_id=None if tid is None else str(tid),
                name=_get(t, "name", str, path, where),
                frames=tuple(frames),
                is_main=bool(_get(t, "is_main", bool, path, where)),
            )
        )
    if not threads:
        raise StackFileError(path, "the sidecar lists no threads")
    return ProcessStacks(
        rank=own_rank if own_rank is not None else rank,
        pid=_get(doc, "pid", int, path, "the sidecar"),
        host=_get(doc, "host", str, path, "the sidecar"),
        source="recorder",
        path=path,
        threads=tuple(_guess_main(threads)),
        taken_at_ns=_get(doc, "dumped_at_ns", int, path, "the sidecar"),
        trigger=trigger_text,
    )


# --- sniffing ----------------------------------------------------------------------------

_PS_PROCESS_ANY = re.compile(r"^Process \d+: ", re.MULTILINE)
_FH_ANY = re.compile(
    r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+(?: .*?)? \(most recent call first\):"
    r"|Stack \(most recent call first\):)$",
    re.MULTILINE,
)


def detect_format(data: bytes | str) -> Source | None:
    """Which format the content is, or None; does not validate it."""
    try:
        text = _text(data, "<data>")
    except StackFileError:
        return None
    head = text.lstrip()
    if head.startswith("{"):
        return "recorder"
    if head.startswith("["):
        return "py-spy-json"
    if head.startswith("Process "):
        return "py-spy-text"
    if _FH_ANY.search(text):
        return "faulthandler"
    if _PS_PROCESS_ANY.search(text):
        return "py-spy-text"
    return None


def sniff(path: str | os.PathLike[str], data: bytes | str) -> ProcessStacks:
    """Parse ``data`` (the content of ``path``) in whichever format it is.

    The rank is the file's own (a sidecar's ``rank``) when it has one, else the digits at
    the end of the file name's stem (``pyspy_rank_5.txt``, ``traceback_rank_5.txt``,
    ``stacks_rank_5.json``, ``rank5.txt``), else None.
    """
    name = os.fspath(path)
    fmt = detect_format(data)
    if fmt is None:
        _text(data, name)  # the precise reason when it is empty, binary or too large
        raise StackFileError(name, "not a stack dump in any known format")
    rank = rank_from_filename(name)
    if fmt == "recorder":
        return parse_recorder(data, name, rank=rank)
    if fmt == "py-spy-json":
        return parse_pyspy_json(data, name, rank=rank)
    if fmt == "py-spy-text":
        return parse_pyspy_text(data, name, rank=rank)
    return parse_traceback(data, name, rank=rank)


def read_stack_file(path: str | os.PathLike[str]) -> ProcessStacks:
    """Read and :func:`sniff` one file; unreadable or oversized files raise StackFileError."""
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        if size > MAX_FILE_BYTES:
            raise StackFileError(
                name, f"{size:,} bytes, more than the {MAX_FILE_BYTES:,} any stack dump needs"
            )
        with open(name, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise StackFileError(
            name, f"cannot read it ({exc.strerror or exc})", "check the path"
        ) from None
    return sniff(name, data)
