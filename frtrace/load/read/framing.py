"""Where a pickle's frames end: a stream whose FRAME ends inside a read is refused.

Protocol 4 cuts a pickle into frames (a FRAME opcode, then that many bytes of opcodes); each
read an opcode makes (its code, an argument, a length, the bytes that length counts, a line)
lies within one frame or wholly after it, and a frame starts only where the last one ended.
``pickle.loads`` does not look: it only checks that a frame's bytes are there and reads on
across its end, so a frame that ends inside a read is read one way by it (and by the C reader,
which reads as it does) and another by an unpickler that reads the file a frame at a time (the
C unpickler reading a file, for a frame past its read-ahead, drops the rest of the frame; the
Python one refuses). Such a stream was never written by a pickler, so both readers refuse it,
with pickle's own words: ``check_frames`` before the unpickler, and the same rule in _tree.c.

The walk reads each opcode's length only (no values); a stream it cannot walk (an unknown
opcode, the data ending early, a frame longer than the data) is left to the unpickler, which
gives the error.
"""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Callable

__all__ = ["NEW_FRAME_INSIDE", "STRADDLE", "check_frames"]

STRADDLE = "pickle exhausted before end of frame"
NEW_FRAME_INSIDE = "beginning of a new frame before end of current frame"

_STOP, _FRAME = 0x2E, 0x95
_LINE = -1  # the argument is a line (protocol 0): up to and with the next newline
_TWO_LINES = -2  # GLOBAL, INST: two lines
_UNKNOWN = -3

# opcode -> the size of its fixed argument, or one of the kinds above; a counted argument (a
# length, then that many bytes) is in _COUNTED instead
_ARG = [_UNKNOWN] * 256
for _ops, _size in (
    (b"(.012NQRabdelostu]})\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98", 0),
    (b"KqhCU\x80\x82", 1),
    (b"M\x83", 2),
    (b"Jrj\x84", 4),
    (b"G", 8),
    (b"IFLSVPpg", _LINE),
    (b"ci", _TWO_LINES),
):
    for _op in _ops:
        _ARG[_op] = _size
_ARG[_FRAME] = 8
# opcode -> (width of its little-endian length, signed)
_COUNTED = {
    0x8A: (1, False),  # LONG1
    0x8B: (4, True),  # LONG4 (a negative length: the unpickler's error)
    ord("T"): (4, True),  # BINSTRING
    ord("U"): (1, False),  # SHORT_BINSTRING
    ord("X"): (4, False),  # BINUNICODE
    0x8C: (1, False),  # SHORT_BINUNICODE
    0x8D: (8, False),  # BINUNICODE8
    ord("B"): (4, False),  # BINBYTES
    ord("C"): (1, False),  # SHORT_BINBYTES
    0x8E: (8, False),  # BINBYTES8
    0x96: (8, False),  # BYTEARRAY8
}
for _op in _COUNTED:
    _ARG[_op] = _UNKNOWN - 1  # (counted: looked up in _COUNTED)
_COUNTED_ARG = _UNKNOWN - 1


def _class(ops: bytes) -> bytes:
    return b"[" + b"".join(re.escape(bytes([op])) for op in ops) + b"]"


_SHORT = 48  # (the short counted opcodes matched in a run up to this length)


@functools.cache
def _run() -> Callable[[bytes, int, int], re.Match[bytes] | None]:
    """A run of opcodes of a fixed size (not STOP nor FRAME) and of the short counted ones
    that fill a dump (ints past 2**31, names: each length apart), matched at C speed."""
    fixed = (
        _class(bytes(op for op in range(256) if _ARG[op] == size and op not in (_STOP, _FRAME)))
        + b"." * size
        for size in (0, 1, 2, 4, 8)
    )
    counted = (
        re.escape(bytes([op, count])) + b"." * count
        for op, most in ((0x8A, 9), (0x8C, _SHORT), (ord("C"), _SHORT), (ord("U"), _SHORT))
        for count in range(most)
    )
    return re.compile(b"(?:" + b"|".join([*fixed, *counted]) + b")*+", re.DOTALL).match


def check_frames(data: bytes) -> None:
    """Raise ``pickle.UnpicklingError`` where a frame of ``data`` ends inside a read (or a
    frame starts inside another); None for any other stream, readable or not."""
    if b"\x95" not in data:  # (no FRAME opcode can be in it: nothing to walk)
        return
    n = len(data)
    pos = 0
    end = 0  # where the current frame ends (at or before pos: no frame)
    arg, run = _ARG, _run()
    while True:
        # (within a frame the run stops at its end: the opcode there is looked at below)
        matched = run(data, pos, end if pos < end else n)
        pos = matched.end() if matched else pos
        if pos >= n:
            return
        op = data[pos]
        pos += 1
        size = arg[op]
        if size >= 0:  # a fixed argument (across the frame's end, or FRAME, or STOP)
            if op == _STOP:
                return
            if pos < end < pos + size:
                raise pickle.UnpicklingError(STRADDLE)
            pos += size
            if op == _FRAME:
                if pos > n:
                    return
                if pos < end:
                    raise pickle.UnpicklingError(NEW_FRAME_INSIDE)
                end = pos + int.from_bytes(data[pos - 8 : pos], "little")
                if end > n:
                    return  # (longer than the data: the unpickler says truncated)
            elif pos > n:
                return
            continue
        if size == _COUNTED_ARG:  # the length, then the bytes it counts: two reads
            width, signed = _COUNTED[op]
            if pos < end < pos + width:
                raise pickle.UnpicklingError(STRADDLE)
            count = int.from_bytes(data[pos : pos + width], "little", signed=signed)
            pos += width
            if count < 0 or pos > n:
                return
            if pos < end < pos + count:
                raise pickle.UnpicklingError(STRADDLE)
            pos += count
            continue
        if size == _UNKNOWN:
            return
        for _ in range(1 if size == _LINE else 2):  # lines: each must end in the frame it starts
            newline = data.find(b"\n", pos)
            if newline < 0:
                return
            if pos < end <= newline:
                raise pickle.UnpicklingError(STRADDLE)
            pos = newline + 1
