"""The readers of a pickle against each other and against ``pickle.loads``, on any bytes.

``check_readers(data)`` is the property the frame tests, the fuzz run (``fuzz_readers.py``)
and the sanitizer run check: every stream the C reader (``_scan.read``) or the careful
unpickler (``unpickle.safe_loads``) accepts decodes to exactly what ``pickle.loads`` gives
(value, type, sharing); and a frame's end is judged as the Python unpickler
(``pickle._Unpickler``, the reference of PEP 3154) judges it: a stream it refuses for its
frames the careful unpickler refuses (and the C reader declines), and one the careful
unpickler refuses for its frames it refuses too. ``reframe`` puts a stream into frames that
end anywhere (inside opcodes too) for both to be tried on.
"""

from __future__ import annotations

import io
import pickle
import random
import struct
from typing import Any

from frtrace.load.read import framing, native, unpickle
from frtrace.load.read.declared import declared_bytes

try:
    from frtrace.load.read import _scan
except ImportError:  # (the careful unpickler is still checked against pickle)
    _scan = None  # type: ignore[assignment]

FRAME_PROBLEMS = (framing.STRADDLE, framing.NEW_FRAME_INSIDE)


# ---- the comparison: values and sharing --------------------------------------------------


def _items(value: Any) -> list[Any] | None:
    """The items of a list, tuple or view (None: not one of those)."""
    if _scan is not None and isinstance(value, _scan.Entries):
        return [value[i] for i in range(len(value))]
    if type(value) in (list, tuple):
        return list(value)
    return None


def _same_leaf(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):  # (bit for bit: NaN, -0.0)
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, set | frozenset):  # (the careful unpickler makes them: NaN != NaN)
        return repr(a) == repr(b)
    return bool(a == b)


def _path(where: tuple[Any, ...] | None) -> str:
    steps: list[str] = []
    while where is not None:
        where, step = where
        steps.append(step)
    return "top" + "".join(reversed(steps))


def mismatch(got: Any, want: Any) -> str | None:
    """Where ``got`` (the reader's result, views taken as lists) and ``want`` (pickle's) differ
    in value, type or sharing; None where they are the same graph of objects: every object of
    one stands for exactly one of the other. Iterative: any depth, cycles included."""
    forth: dict[int, Any] = {}  # id(got's object) -> want's object
    back: dict[int, Any] = {}  # id(want's object) -> got's object
    # (where: (parent's where, step), formatted only for a difference: any depth stays linear)
    todo: list[tuple[Any, Any, tuple[Any, ...] | None]] = [(got, want, None)]
    while todo:
        a, b, where = todo.pop()
        items_a, items_b = _items(a), _items(b)
        if items_a is None and items_b is None and type(b) is not dict:
            # a leaf: where pickle shares it, so does the reader (not the other way round:
            # CPython keeps one b"\x00" and such, which pickle makes anew and the reader not)
            if id(b) in back and back[id(b)] is not a:
                return f"{_path(where)}: pickle shares {b!r}, the reader does not"
            back[id(b)] = a
            if not _same_leaf(a, b):
                return f"{_path(where)}: {a!r} vs {b!r}"
            continue
        if id(a) in forth or id(b) in back:
            if forth.get(id(a)) is not b or back.get(id(b)) is not a:
                kinds = f"{type(a).__name__} vs {type(b).__name__}"
                return f"{_path(where)}: sharing differs ({kinds})"
            continue
        forth[id(a)] = b
        back[id(b)] = a
        if items_b is not None or items_a is not None:
            kind_a = list if _scan is not None and isinstance(a, _scan.Entries) else type(a)
            if items_a is None or items_b is None or kind_a is not type(b):
                return f"{_path(where)}: {type(a).__name__} vs {type(b).__name__}"
            if len(items_a) != len(items_b):
                return f"{_path(where)}: {len(items_a)} items vs {len(items_b)}"
            todo.extend(
                (x, y, (where, f"[{i}]"))
                for i, (x, y) in enumerate(zip(items_a, items_b, strict=True))
            )
        else:
            if type(a) is not dict or len(a) != len(b):
                return f"{_path(where)}: {type(a).__name__} vs dict of {len(b)}"
            for i, ((ka, va), (kb, vb)) in enumerate(zip(a.items(), b.items(), strict=True)):
                todo.append((ka, kb, (where, f" key {i}")))
                todo.append((va, vb, (where, f"[{kb!r}]")))
    return None


# ---- the readers ---------------------------------------------------------------------------


class _PurePlainUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """The Python unpickler, refusing globals as the careful one does (fuzzed bytes can spell
    any module name: nothing is imported or called)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id")


def _outcome(read: Any, data: bytes) -> tuple[bool, Any]:
    """(True, value) or (False, the exception)."""
    try:
        return True, read(data)
    except RecursionError:
        raise
    except Exception as exc:
        return False, exc


def _pure(data: bytes) -> Any:
    return _PurePlainUnpickler(io.BytesIO(data)).load()


def _frame_problem(exc: Any) -> bool:
    return isinstance(exc, pickle.UnpicklingError) and str(exc) in FRAME_PROBLEMS


def _bomb(data: bytes) -> bool:
    """Whether the stream declares far more memory than its size (a memo index, a length past
    its end): the unpicklers would allocate it (the Python one zero-fills a BYTEARRAY8), where
    read_payload refuses it first (declared.py)."""
    return declared_bytes(data) > (64 << 20)


def check_readers(data: bytes) -> str:
    """Raise AssertionError where the readers break the property; else what happened
    ("c": the C reader read it, "careful": only the careful one, "refused", "frames": refused
    for its frames)."""
    got = None if _scan is None else _scan.read(data)
    if got is None and _bomb(data):
        return "refused"  # (read_payload refuses it unread, or a worker's limit does)
    careful_ok, careful = _outcome(unpickle.safe_loads, data)
    if got is None and not careful_ok and not _frame_problem(careful):
        # (neither accepts it: pickle is not asked, a damaged memo index can make it
        # allocate gigabytes; its frames are still judged below where the careful one
        # judged them)
        return "refused"
    pure_ok, pure = _outcome(_pure, data)
    if _frame_problem(careful):
        assert got is None, f"{data!r}: the C reader read what the careful one refuses"
        assert not pure_ok, f"{data!r}: refused for its frames, read by pickle._Unpickler"
        return "frames"
    assert not (_frame_problem(pure) and careful_ok), (
        f"{data!r}: the careful unpickler read what pickle._Unpickler refuses: {pure}"
    )
    loads_ok, want = _outcome(pickle.loads, data)
    for name, ok, value in (("C reader", got is not None, got), ("careful", careful_ok, careful)):
        if not ok:
            continue
        assert loads_ok, f"{data!r}: the {name} read it, pickle.loads raises {want!r}"
        problem = mismatch(value, want)
        assert problem is None, f"{data!r}: the {name} and pickle.loads differ: {problem}"
    if got is not None:
        assert careful_ok, f"{data!r}: the C reader read it, the careful one raises {careful!r}"
        return "c"
    return "careful" if careful_ok else "refused"


def body(data: bytes) -> bytes:
    """A pickle's opcodes after its PROTO and outside its frames (as pickletools walks them),
    or the bytes as they are where they do not walk."""
    import pickletools

    try:
        ops = list(pickletools.genops(data))
    except Exception:
        return data[2:] if data[:1] == b"\x80" else data
    out = bytearray()
    for k, (op, _, at) in enumerate(ops):
        end = ops[k + 1][2] if k + 1 < len(ops) else len(data)
        if op.name not in ("PROTO", "FRAME") and at is not None:
            out += data[at:end]
    return bytes(out)


def opcode_starts(stream: bytes) -> list[int]:
    """Where each opcode of ``stream`` (as ``body`` gives it) starts, as far as it walks."""
    import pickletools

    starts = []
    try:
        for _, _, at in pickletools.genops(b"\x80\x04" + stream):
            if at is not None:
                starts.append(at - 2)
    except Exception:
        pass
    return starts


def reframe(stream: bytes, frames: list[tuple[int, int]], protocol: int = 4) -> bytes:
    """``stream`` (opcodes without PROTO or frames) as protocol ``protocol`` with a FRAME put
    before the byte at each ``start`` claiming the bytes up to ``end`` (positions in
    ``stream``; FRAMEs put between them counted): where a pickler puts them, a start is where
    an opcode starts and the end where the next FRAME is; anything else is a frame that ends
    inside an opcode, or before the next FRAME (then opcodes outside a frame), or past it."""
    out = bytearray(b"\x80" + bytes([protocol]))
    starts = sorted({start for start, _ in frames})
    last = 0
    for start, end in sorted(frames):
        between = sum(1 for other in starts if start < other < end)
        out += stream[last:start]
        out += b"\x95" + max(end - start + 9 * between, 0).to_bytes(8, "little")
        last = start
    return bytes(out + stream[last:])


def frames_anywhere(stream: bytes, rng: random.Random) -> list[tuple[int, int]]:
    """Frames for ``reframe``: most at opcode starts, each ending at the next frame, inside
    the frame (mid-opcode or not), a little past the next one, or at any point."""
    starts = opcode_starts(stream) or [0]
    chosen = sorted({rng.choice(starts) for _ in range(rng.randrange(1, 6))} | {0})
    if rng.random() < 0.2:
        chosen = sorted({*chosen, rng.randrange(len(stream) + 1)})
    frames = []
    for k, start in enumerate(chosen):
        nxt = chosen[k + 1] if k + 1 < len(chosen) else len(stream)
        how = rng.randrange(6)
        if how <= 2:
            end = nxt
        elif how == 3:
            end = rng.randint(start, nxt)
        elif how == 4:
            end = nxt + rng.choice((1, 2, 4, 9))
        else:
            end = rng.randint(start, len(stream) + 2)
        frames.append((start, end))
    return frames


def mutate(data: bytes, rng: random.Random, seeds: list[bytes] | None = None) -> bytes:
    """One mutation of a pickle: a byte flipped, set, dropped or repeated, a run cut out or
    copied, a splice with another seed, or its frames cut anew (anywhere, lengths lying)."""
    buf = bytearray(data)
    how = rng.randrange(9)
    if not buf or how == 0:
        stream = body(bytes(buf))
        return reframe(stream, frames_anywhere(stream, rng), rng.choice((4, 5)))
    at = rng.randrange(len(buf))
    if how == 1:
        buf[at] ^= 1 << rng.randrange(8)
    elif how == 2:
        buf[at] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, 0x95, rng.randrange(256)))
    elif how == 3:
        del buf[at]
    elif how == 4:
        buf[at:at] = buf[at : at + rng.randrange(1, 9)]
    elif how == 5:
        del buf[at : at + rng.randrange(1, 64)]
    elif how == 6:
        start = rng.randrange(len(buf))
        buf[at:at] = buf[start : start + rng.randrange(1, 64)]
    elif how == 7 and seeds:
        other = rng.choice(seeds)
        buf = buf[:at] + other[rng.randrange(len(other) + 1) :]
    else:
        buf[at : at + 8] = rng.randbytes(min(8, len(buf) - at))
    return bytes(buf)


def active() -> bool:
    """Whether the C reader is there to compare (built, and not turned off)."""
    return _scan is not None and native.active()
