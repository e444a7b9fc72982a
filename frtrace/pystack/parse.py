"""Read the Python stacks people collect from a hung job's ranks.

Formats (each verified against real output; see tests/fixtures/pystack/README.md):

* ``py-spy dump --pid PID`` text, with or without ``--locals`` / ``--native`` /
  ``--subprocesses`` (:func:`parse_pyspy_text`, :func:`parse_pyspy_text_all`);
* ``py-spy dump --json`` (:func:`parse_pyspy_json`);
* Python ``faulthandler`` output (``dump_traceback``, ``dump_traceback_later``, a registered
  signal, a fatal error) and torch's worker-server ``dump_traceback`` handler, which is
  faulthandler written from a C++ thread (:func:`parse_traceback`);
* the frtrace recorder sidecar (:func:`parse_recorder`; format in
  :mod:`frtrace.job.sidecar`).

:func:`sniff` tells them apart by content. Every parser raises :class:`StackFileError`, and
nothing else, on input it cannot read.
"""

from __future__ import annotations

import os
from typing import Any

from frtrace.incident.budget import MAX_WORLD_SIZE
from frtrace.incident.layout import read_regular, stack_format
from frtrace.job.sidecar import FORMAT_NAME, FORMAT_VERSION, TRIGGER_KINDS
from frtrace.pystack.common import (
    MAX_FILE_BYTES,
    MAX_LINE_CHARS,
    StackFileError,
    decode_text,
    dict_items,
    get_field,
    guess_main,
    load_json,
    need_field,
    rank_from_filename,
)
from frtrace.pystack.model import Frame, ProcessStacks, Source, ThreadStack
from frtrace.pystack.pyspy import parse_pyspy_json, parse_pyspy_text, parse_pyspy_text_all
from frtrace.pystack.tracebacks import parse_traceback

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
    "read_stack_bytes",
    "read_stack_file",
    "sniff",
]


def parse_recorder(
    data: bytes | str, path: str = "<stacks>", *, rank: int | None = None
) -> ProcessStacks:
    """An frtrace-stacks sidecar (:mod:`frtrace.job.sidecar`). ``rank`` is the fallback
    when the sidecar's own rank is null."""
    doc = load_json(data, path)
    return _recorder_from_doc(doc, path, rank)


def _recorder_from_doc(doc: Any, path: str, rank: int | None) -> ProcessStacks:
    if not isinstance(doc, dict):
        raise StackFileError(path, f"a sidecar is a JSON object, this is {type(doc).__name__}")
    fmt = doc.get("format")
    if fmt != FORMAT_NAME:
        raise StackFileError(path, f"a JSON object whose format is {fmt!r}, not {FORMAT_NAME!r}")
    version = need_field(doc, "version", int, path, "the sidecar")
    if version > FORMAT_VERSION:
        raise StackFileError(
            path,
            f"sidecar version {version} is newer than {FORMAT_VERSION}",
            "upgrade frtrace to read it",
        )
    if version < 1:
        raise StackFileError(path, f"sidecar version {version} does not exist")
    own_rank = get_field(doc, "rank", int, path, "the sidecar")
    if own_rank is not None and not 0 <= own_rank < MAX_WORLD_SIZE:
        raise StackFileError(path, f"rank {str(own_rank)[:20]} is no rank of any job")
    trigger = doc.get("trigger")
    trigger_text: str | None = None
    if trigger is not None:
        if not isinstance(trigger, dict):
            raise StackFileError(path, "'trigger' is not an object")
        kind = need_field(trigger, "kind", str, path, "trigger")
        if kind not in TRIGGER_KINDS:
            raise StackFileError(path, f"trigger kind {kind!r} is not one of {TRIGGER_KINDS}")
        detail = get_field(trigger, "detail", str, path, "trigger")
        trigger_text = f"{kind}: {detail}" if detail else kind
    threads: list[ThreadStack] = []
    for i, t in dict_items(doc.get("threads"), path, "'threads'"):
        where = f"thread {i}"
        frames: list[Frame] = []
        for j, f in dict_items(t.get("frames"), path, f"{where} frames"):
            fw = f"{where} frame {j}"
            frames.append(
                Frame(
                    function=need_field(f, "name", str, path, fw),
                    filename=need_field(f, "filename", str, path, fw),
                    line=get_field(f, "line", int, path, fw),
                )
            )
        tid = get_field(t, "id", (str, int), path, where)
        threads.append(
            ThreadStack(
                thread_id=None if tid is None else str(tid),
                name=get_field(t, "name", str, path, where),
                frames=tuple(frames),
                is_main=bool(get_field(t, "is_main", bool, path, where)),
            )
        )
    if not threads:
        raise StackFileError(path, "the sidecar lists no threads")
    return ProcessStacks(
        rank=own_rank if own_rank is not None else rank,
        pid=get_field(doc, "pid", int, path, "the sidecar"),
        host=get_field(doc, "host", str, path, "the sidecar"),
        source="recorder",
        path=path,
        threads=tuple(guess_main(threads)),
        taken_at_ns=get_field(doc, "dumped_at_ns", int, path, "the sidecar"),
        trigger=trigger_text,
    )


# --- sniffing ----------------------------------------------------------------------------


def detect_format(data: bytes | str) -> Source | None:
    """Which format the content is, or None; does not validate it (the rule every reader
    and the discovery share: ``frtrace.incident.layout.stack_format``)."""
    try:
        text = decode_text(data, "<data>")
    except StackFileError:
        return None
    return stack_format(text)


def sniff(path: str | os.PathLike[str], data: bytes | str) -> ProcessStacks:
    """Parse ``data`` (the content of ``path``) in whichever format it is.

    The rank is the file's own (a sidecar's ``rank``) when it has one, else the digits at
    the end of the file name's stem (``pyspy_rank_5.txt``, ``traceback_rank_5.txt``,
    ``stacks_rank_5.json``, ``rank5.txt``), else None.
    """
    name = os.fspath(path)
    fmt = detect_format(data)
    if fmt is None:
        decode_text(data, name)  # the precise reason when it is empty, binary or too large
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
    return sniff(os.fspath(path), read_stack_bytes(path))


def read_stack_bytes(path: str | os.PathLike[str]) -> bytes:
    """A stack file's bytes; unreadable or oversized files raise StackFileError."""
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        if size > MAX_FILE_BYTES:
            raise StackFileError(
                name, f"{size:,} bytes, more than the {MAX_FILE_BYTES:,} any stack dump needs"
            )
        data = read_regular(name, MAX_FILE_BYTES + 1, follow=True)  # (never a FIFO)
    except OSError as exc:
        raise StackFileError(
            name, f"cannot read it ({exc.strerror or exc})", "check the path"
        ) from None
    return data
