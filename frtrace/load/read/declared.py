"""What a pickle declares it will need, read before it is unpickled in a process with no limit.

The C unpickler trusts what a few bytes declare: ``LONG_BINPUT`` with index ``i`` has it
allocate and zero a memo of ``2 * i`` pointers (a 7 KB file asked for 24 GB), and a length
(``BINBYTES8``, ``BYTEARRAY8``, ``FRAME``...) past the end of the data has it allocate that
length before it finds the data missing. A watched worker has an address-space limit for
this (``frtrace.load.workers.parallel``); a file read in this very process (the library without
workers, a Dask worker) has none, so ``declared_bytes`` walks the opcodes first (plain Python,
used only where the C reader declined the file) and the caller refuses a file whose
declarations exceed what reading it may take (``frtrace.incident.memory.file_allowance``).

The walk follows the opcode arguments only; it stops at ``STOP``, at anything that names a
global (the unpickler refuses it there) and at an opcode pickle does not know (the unpickler
fails there): nothing past those points is ever unpickled.
"""

from __future__ import annotations

import pickletools

__all__ = ["declared_bytes"]

# Bytes a memo slot takes in the C unpickler, which grows its memo to twice the index put.
_MEMO_SLOT_BYTES = 2 * 8
# How each opcode's argument is laid out: (fixed bytes, or a length prefix of n bytes (-n),
# or a line (0)); None: no argument; opcodes missing stop the walk.
_LINE = 0
_STOPS = frozenset(b"c\x93io\x81\x92RbPQ\x82\x83\x84.")  # globals, calls, extensions, STOP
_PUTS = {ord("p"): _LINE, ord("q"): 1, ord("r"): 4}
_LAYOUT: dict[int, int | None] = {}
for _op in pickletools.opcodes:
    _code = _op.code.encode("latin-1")[0]
    if _code in _STOPS:
        continue
    _arg = _op.arg
    if _arg is None:
        _LAYOUT[_code] = None
    elif _arg.n > 0:
        _LAYOUT[_code] = _arg.n
    elif _arg.n == pickletools.UP_TO_NEWLINE:
        _LAYOUT[_code] = _LINE
    else:
        _LAYOUT[_code] = -{
            pickletools.TAKEN_FROM_ARGUMENT1: 1,
            pickletools.TAKEN_FROM_ARGUMENT4: 4,
            pickletools.TAKEN_FROM_ARGUMENT4U: 4,
            pickletools.TAKEN_FROM_ARGUMENT8U: 8,
        }[_arg.n]
_FRAME = ord("\x95")
_BINSTRING = ord("T")


def declared_bytes(data: bytes) -> int:
    """The most memory the pickle in ``data`` declares beyond what its bytes can hold: the
    memo its largest index asks for, or a length that runs past the end of the data (which
    the unpickler would allocate before finding it missing). Small for any real dump."""
    end = len(data)
    at = 0
    memo = 0  # largest memo index put
    beyond = 0  # a length claimed past the end
    layout = _LAYOUT
    while at < end:
        code = data[at]
        at += 1
        if code not in layout:
            break  # STOP, a global (refused there), or junk (the unpickler fails there)
        size = layout[code]
        if size is None:
            continue
        if size > 0:
            if code in _PUTS:
                memo = max(memo, int.from_bytes(data[at : at + size], "little"))
            elif code == _FRAME:  # (a frame's length only announces the opcodes that follow)
                length = int.from_bytes(data[at : at + 8], "little")
                beyond = max(beyond, length - (end - at - 8))
            at += size
        elif size == _LINE:
            line_end = data.find(b"\n", at)
            if line_end < 0:
                break  # (truncated: the unpickler says so)
            if code in _PUTS:
                digits = data[at:line_end].strip()
                if digits.isdigit() and len(digits) < 20:
                    memo = max(memo, int(digits))
            at = line_end + 1
        else:
            prefix = -size
            length = int.from_bytes(data[at : at + prefix], "little", signed=code == _BINSTRING)
            at += prefix
            if length < 0:
                break  # (BINSTRING's negative count: the unpickler refuses it)
            if length > end - at:
                beyond = max(beyond, length)
                break  # (it runs past the end: the unpickler stops there)
            at += length
    return max(memo * _MEMO_SLOT_BYTES, beyond)
