"""Read one dump file into columns: the only place that unpickles, and that knows key names.

``parse_dump`` is a pure function from one file to a ``ParsedDump`` (an Arrow record batch of
its entries plus small side tables). It runs in worker processes for large sets, and is the
seam where a distributed engine (Ray, Dask) could take over: it needs only the file.

Every torch format is read by the fields present, not by the version string:

- torch 2.2: a bare list of entries with ``seq_id`` and ``time_created_us``;
- FR 1.x (torch 2.3): a dict; ``pg_config`` is ``{pg_id: [ranks]}``; ``seq_id``;
- FR 2.x (torch 2.4+): ``process_group``, ``collective_seq_id``/``p2p_seq_id``, dtypes;
  ``pg_status`` and ``timeout_ms`` (2.4), ``nccl_version`` then ``comm_lib_version``,
  ``thread_id``/``thread_name``; optional ``duration_ms`` and ``frames``.

JSON dumps are normalised to the pickle model: 0 for an unobserved time becomes null, strings
in ``pg_status`` become ints, a missing ``entries`` key is an empty buffer.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import pickle
import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.errors import DumpFormatError, DumpTooLargeError, UnsafePickleError
from frtrace.load import schema
from frtrace.load.discover import MAX_WORLD_SIZE, Candidate

__all__ = [
    "KNOWN_VERSION",
    "MAX_DUMP_BYTES",
    "MAX_ENTRIES",
    "DumpMeta",
    "ParsedDump",
    "parse_dump",
    "read_payload",
    "safe_loads",
]

# The newest Flight Recorder format version this loader knows (torch 2.9 - 2.15 write "2.10").
KNOWN_VERSION = (2, 10)
# A 2,000-entry dump with 20-frame stacks is a few MB; 1 GiB is far beyond any real buffer
# and refuses junk (a core file, a checkpoint) before it is read into memory.
MAX_DUMP_BYTES = 1 << 30
# The recorder keeps TORCH_FR_BUFFER_SIZE entries (2,000 by default). A pickle can repeat one
# entry a million times in a few MB (memo references), and each entry costs ~1 KB here.
MAX_ENTRIES = 1 << 20
# Frames kept per stack (innermost first): real Python stacks are tens of frames deep.
MAX_FRAMES = 1 << 11
# Sizes/dtypes values with more tensors, or shapes with more dimensions, are damage.
_MAX_TENSORS = 1 << 16
_MAX_DIMS = 64
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# At most this many per-field problems are spelled out per file; the rest are counted.
_MAX_DETAILS = 3

# Arrow types whose columns numpy can build in one C loop when no value is missing.
_NUMPY_TYPES = {pa.int64(): np.int64, pa.float64(): np.float64}
# What may reach Arrow's converter for a scalar column. Anything else is nulled first: Arrow's
# error message for a bad value prints the whole value, and a pickle can make a list whose
# text is exponentially long (sub-lists shared through the memo) or nested 100,000 deep.
_SCALARS = frozenset((int, float, bool, type(None)))
_SEQUENCES = frozenset((list, tuple, type(None)))
_ONLY_STR = frozenset((str,))
_ONLY_BOOL = frozenset((bool,))
_ONLY_TUPLE = frozenset((tuple,))
# Leaves (tensor dimensions, dtype names) one sizes/dtypes column may expand to: 8,000 per
# entry of a 2,000-entry dump. A pickle reaches far more by repeating one shared list.
_MAX_LEAVES = 1 << 24
_BAD = object()
_UNSEEN = object()

Frame = tuple[str, str, int]
Stack = tuple[Frame, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpMeta:
    """What one dump file was, beside its entries."""

    rank: int
    path: str
    size_bytes: int
    encoding: str
    format_version: str | None
    layout: str
    backend: str | None
    comm_lib_version: str | None
    entry_count: int
    record_id_min: int | None
    record_id_max: int | None
    wrapped: bool | None
    has_stacks: bool
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedDump:
    """One file, read: entries as an Arrow batch (stack ids local to this file) and side rows."""

    meta: DumpMeta
    entries: pa.RecordBatch  # schema.ENTRIES
    stacks: tuple[Stack, ...]  # local stack id -> frames
    groups: tuple[dict[str, Any], ...]  # rows of schema.GROUPS
    pg_status: tuple[dict[str, Any], ...]  # rows of schema.PG_STATUS


# --------------------------------------------------------------------------------------------
# Reading bytes safely


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: any global (class, function) is refused.

    Flight Recorder pickles hold dicts, lists, tuples, str, int, float, bool and None; they use
    no GLOBAL/STACK_GLOBAL/INST/OBJ/EXT opcodes. Every way a pickle can reach a callable goes
    through ``find_class`` (or ``persistent_load``), so refusing here means nothing in the file
    can be called, and REDUCE/BUILD have nothing to act on.
    """

    def find_class(self, module: str, name: str) -> Any:
        # (the names come from the file: escaped and cut, so the message stays one line)
        raise UnsafePickleError(f"the pickle asks for {_escaped(module)}.{_escaped(name)}")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("the pickle asks for a persistent object")


def safe_loads(data: bytes) -> Any:
    """Unpickle plain data; raise UnsafePickleError for anything that could run code."""
    # A BufferedReader offers peek(), which lets the C unpickler prefetch: 3x faster than
    # reading a bare BytesIO opcode by opcode.
    stream = io.BufferedReader(io.BytesIO(data), buffer_size=1 << 20)
    return _PlainDataUnpickler(stream).load()


def read_payload(path: Path, size_bytes: int) -> tuple[Any, str]:
    """Read and decode one file: (decoded object, "pickle" | "json"), or DumpFormatError."""
    if size_bytes > MAX_DUMP_BYTES:
        raise _too_large(path, size_bytes)
    try:
        with path.open("rb") as f:  # never more than was checked, even if the file grew
            data = f.read(size_bytes + 1)
    except OSError as exc:
        raise DumpFormatError(
            f"{path}: cannot read: {exc.strerror}; check the file's permissions."
        ) from exc
    if len(data) > size_bytes:
        raise DumpFormatError(
            f"{path}: the file grew while it was read (is the job still writing its dumps?); "
            "run again once the dumps are complete."
        )
    if not data:
        raise DumpFormatError(
            f"{path}: empty file: the rank was probably killed while writing its dump; "
            "the other ranks are analysed without it."
        )
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data), "json"
        except (ValueError, RecursionError) as exc:
            raise DumpFormatError(
                f"{path}: not valid JSON ({_short(exc)}): truncated or corrupt; "
                "re-dump the rank or analyse without it."
            ) from exc
    try:
        return safe_loads(data), "pickle"
    except UnsafePickleError as exc:
        raise UnsafePickleError(
            f"{path}: refused to load: {exc}; Flight Recorder dumps contain only plain data. "
            "Do not trust this file; take the dump again from the job."
        ) from None
    except MemoryError:  # a length or memo index far beyond the data (one flipped bit will do)
        raise DumpTooLargeError(
            f"{path}: refused: the pickle asks for more memory than a dump of "
            f"{len(data) / 2**20:.1f} MiB can need (a damaged length or memo index); re-dump "
            "the rank or analyse without it."
        ) from None
    except Exception as exc:  # any decoding failure of a damaged pickle
        kind = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise DumpFormatError(
            f"{path}: not a readable Flight Recorder dump: {kind} pickle "
            f"({type(exc).__name__}: {_short(exc)}); re-dump the rank or analyse without it."
        ) from exc


def _escaped(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, control characters escaped."""
    return repr(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


def _too_large(path: Path, size_bytes: int) -> DumpTooLargeError:
    return DumpTooLargeError(
        f"{path}: refused: {size_bytes / 2**20:.0f} MiB is larger than any Flight Recorder "
        f"dump ({MAX_DUMP_BYTES >> 20} MiB limit); check this is a dump and not another file."
    )


def _short(exc: BaseException) -> str:
    try:
        lines = [line for line in str(exc).splitlines() if line.strip()]
    except Exception:  # e.g. the str() of an int too long to print
        lines = []
    text = _clean(lines[0]) if lines else type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------------------------
# From the decoded object to columns


# Group-local peer ranks: more than 7 digits is damage (and would not fit the int32 column).
_P2P_META = re.compile(
    r"^\s*(?P<a>\d{1,7}|\?)\s*(?P<arrow>->|<-)\s*(?P<b>\d{1,7}|\?)\s*$", re.ASCII
)


def split_profiling_name(name: str) -> tuple[str | None, str, int | None, int | None]:
    """``"nccl:send 1->0"`` -> (backend, op, src_local, dst_local); unknown names kept as-is."""
    backend, colon, rest = name.partition(":")
    if not colon:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    src = dst = None
    match = _P2P_META.match(meta) if meta else None
    if match is not None:
        a = None if match["a"] == "?" else int(match["a"])
        b = None if match["b"] == "?" else int(match["b"])
        src, dst = (a, b) if match["arrow"] == "->" else (b, a)
    return (backend or None), (op or name), src, dst


def _int_or_none(value: Any) -> int | None:
    """An int64 from an int, an integral float or a decimal string; None for anything else."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > 20:  # more digits than an int64 has (and int() of 5,000 raises)
            return None
        try:
            number = int(text)
        except ValueError:
            return None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        return None
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _label(value: Any) -> str | None:
    """A group name, description or version: a string, or a plain number as text.

    Never ``str()`` of a container: a pickle can make one whose text is exponentially long
    (lists that share sub-lists through the memo).
    """
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value) if abs(value) < 1e18 else None
    return None


def _clean(text: str) -> str:
    """Text that Arrow can store: a lone surrogate ("\\udcff", which a pickle or a JSON
    escape can hold but UTF-8 cannot) is spelled out with a backslash."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _strings(values: list[Any]) -> pa.Array:
    """pa.array(values, string), lone surrogates spelled out (see _clean)."""
    try:
        return pa.array(values, type=pa.string())
    except UnicodeEncodeError:
        return pa.array([v if v is None else _clean(v) for v in values], type=pa.string())


def _preview(value: Any) -> str:
    """A short, safe rendering of any decoded value for a message."""
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 1e18 else "a huge number"
    size = f" of {len(value)}" if isinstance(value, list | tuple | dict) else ""
    return f"a {type(value).__name__}{size}"


# Every rank records the default group's member list, "[0, 1, ..., 4095]": the same text
# thousands of times. Parsed once per worker process, and kept as a compact int32 array (a
# list of Python ints would cost 36 bytes a rank, for every rank, in every file).
_RANK_LISTS: dict[str, np.ndarray | None] = {}
_RANK_LIST_CACHE_MAX = 4096
# (7 digits at most: MAX_WORLD_SIZE has 7; longer numbers are damage, and int() of a
# 5,000-digit one raises)
_RANK_TEXT = re.compile(r"\[\s*\d{1,7}(\s*,\s*\d{1,7})*\s*\]|\[\s*\]", re.ASCII)
_MAX_RANK = MAX_WORLD_SIZE - 1


def _parse_rank_list(value: Any) -> np.ndarray | None:
    """``"[0, 1, 2]"`` (2.x), ``[0, 1, 2]`` (1.x): member ranks as int32, without eval."""
    if isinstance(value, str):
        if value in _RANK_LISTS:
            return _RANK_LISTS[value]
        parsed = _parse_rank_text(value)
        if len(_RANK_LISTS) < _RANK_LIST_CACHE_MAX:
            _RANK_LISTS[value] = parsed
        return parsed
    if not isinstance(value, list | tuple) or len(value) > MAX_WORLD_SIZE:
        return None
    items = [_int_or_none(v) for v in value]
    if any(i is None or i < 0 or i > _MAX_RANK for i in items):
        return None
    return np.array(items, dtype=np.int32)


def _parse_rank_text(value: str) -> np.ndarray | None:
    body = value.strip()
    if not _RANK_TEXT.fullmatch(body):
        return None
    inner = body[1:-1].strip()
    if not inner:
        return np.zeros(0, dtype=np.int32)
    numbers = np.fromiter(map(int, inner.split(",")), dtype=np.int64)
    if numbers.size and numbers.max() > _MAX_RANK:
        return None
    ranks: np.ndarray = numbers.astype(np.int32)
    ranks.flags.writeable = False  # shared by every row that recorded the same text
    return ranks


class _Columns:
    """Builds the ENTRIES columns of one file; invalid values become null and are reported."""

    def __init__(self, path: Path, rank: int, entries: list[dict[str, Any]]) -> None:
        self.path = path
        self.rank = rank
        self.entries = entries
        self.problems: list[str] = []

    def values(self, key: str, alt: str | None = None) -> list[Any]:
        """Every entry's ``key`` (else its ``alt``, else None)."""
        try:  # every entry has the key (the usual case): one C-level pass
            return list(map(itemgetter(key), self.entries))
        except KeyError:
            other = alt or key
            return [e[key] if key in e else e.get(other) for e in self.entries]

    def take(self, key: str, type_: pa.DataType, alt: str | None = None) -> pa.Array:
        """Column ``key`` (or ``alt`` where ``key`` is absent), validated by Arrow."""
        return self.convert(key, self.values(key, alt), type_)

    def convert(self, key: str, values: list[Any], type_: pa.DataType) -> pa.Array:
        fast = _NUMPY_TYPES.get(type_)
        # the common case: every value present and a number (numpy reads None as NaN: skip)
        if fast is not None and None not in values:
            try:
                return pa.array(np.fromiter(values, dtype=fast, count=len(values)))
            except (TypeError, ValueError, OverflowError):
                pass
        if pa.types.is_list(type_):
            return self.convert_repeated(key, values, type_)[0].cast(type_)
        if type_ == schema.TEXT:
            return _text(key, values, self)
        if _SCALARS.issuperset(map(type, values)):
            try:
                return pa.array(values, type=type_)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                pass
        return self.convert_slowly(key, values, type_)

    def take_repeated(self, key: str, type_: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        """A list column and its per-entry fingerprints (0 where missing)."""
        return self.convert_repeated(key, [e.get(key) for e in self.entries], type_)

    def convert_repeated(
        self, key: str, values: list[Any], type_: pa.DataType
    ) -> tuple[pa.Array, np.ndarray]:
        """Sizes and dtypes repeat a lot: convert each distinct value once, then gather.

        Arrow converts nested Python lists slowly (~10 us per entry); distinct values are few.
        Returns the column and a fingerprint per entry: CRC-32 of the value's repr, equal
        exactly when the values are equal, deterministic across processes.
        """
        nested = pa.types.is_list(type_.value_type)
        twins: list[Any]
        try:  # a hashable twin of each value, in one comprehension (the hot path)
            if nested:
                twins = [None if v is None else tuple(map(tuple, v)) for v in values]
            else:
                if not _SEQUENCES.issuperset(map(type, values)):
                    raise TypeError("not a list")  # (tuple("Float") would be 5 dtypes)
                twins = [None if v is None else tuple(v) for v in values]
            index: dict[Any, int] = {}
            codes = np.array([index.setdefault(t, len(index)) for t in twins], dtype=np.int32)
            return _repeated_array(codes, list(index), type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            # a value of the wrong shape or type: checked one by one, never hashed or printed
            codes, distinct = self.repeated_slowly(key, values, nested)
            return _repeated_array(codes, distinct, type_, checked=True)

    def shape_columns(self) -> list[tuple[pa.Array, np.ndarray]]:
        """input_sizes, output_sizes, input_dtypes, output_dtypes with their fingerprints.

        The four at once when every entry has them as lists: one hashable key per entry (an
        op's sizes and dtypes repeat together); otherwise column by column, as
        ``take_repeated``, with the same result.
        """
        try:
            rows = list(map(_SHAPE_FIELDS, self.entries))
            if not _LISTS.issuperset(map(type, chain.from_iterable(rows))):
                raise TypeError("not lists")  # (tuple("Float") would be 5 dtypes)
            index: dict[Any, int] = {}
            codes = np.array(
                [
                    index.setdefault(
                        (tuple(map(tuple, a)), tuple(map(tuple, b)), tuple(c), tuple(d)),
                        len(index),
                    )
                    for a, b, c, d in rows
                ],
                dtype=np.int32,
            )
            combos = list(index)
            out = []
            for part, type_ in enumerate(_SHAPE_TYPES):
                inner: dict[Any, int] = {}
                picks = np.array([inner.setdefault(c[part], len(inner)) for c in combos])
                out.append(_repeated_array(picks[codes].astype(np.int32), list(inner), type_))
            return out
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            pairs = zip(_SHAPE_KEYS, _SHAPE_TYPES, strict=True)
            return [self.take_repeated(key, type_) for key, type_ in pairs]

    def repeated_slowly(
        self, key: str, values: list[Any], nested: bool
    ) -> tuple[np.ndarray, list[Any]]:
        """Codes and distinct twins (None first) of a sizes/dtypes column, each value checked
        alone."""
        checked: dict[int, Any] = {}  # id(value) -> twin: a shared value is checked once
        index: dict[Any, int] = {None: 0}
        codes = np.zeros(len(values), dtype=np.int32)
        bad: list[int] = []
        budget = _MAX_LEAVES
        for i, value in enumerate(values):
            if value is None:
                continue
            twin = checked.get(id(value), _UNSEEN)
            if twin is _UNSEEN:
                # what checking it will cost, counted in C before doing it (a value that is
                # not a list of lists raises, and is rejected below at no cost)
                with contextlib.suppress(TypeError):
                    budget -= sum(map(len, value)) if nested else len(value)
                if budget < 0:
                    raise DumpFormatError(
                        f"{self.path}: field {key!r} holds more than {_MAX_LEAVES:,} sizes "
                        "in all, far beyond any real dump; the file is damaged or built to "
                        "exhaust memory."
                    )
                twin = checked[id(value)] = _checked_twin(value, nested)
            if twin is _BAD:
                bad.append(i)
                continue
            codes[i] = index.setdefault(twin, len(index))
        if bad:
            self.report(key, values, bad)
        return codes, list(index)

    def convert_slowly(self, key: str, values: list[Any], type_: pa.DataType) -> pa.Array:
        """Value by value: the bad ones become null and are reported."""
        fits = _FITS.get(type_)
        fixed = list(values)
        bad: list[int] = []
        for i, value in enumerate(values):
            if value is None:
                continue
            if fits is not None:
                ok = fits(value)
            else:  # a type without a rule: ask Arrow, but only about plain scalars
                ok = type(value) in _SCALARS and _arrow_accepts(value, type_)
            if not ok:
                bad.append(i)
                fixed[i] = None
        if bad:
            self.report(key, values, bad)
        return pa.array(fixed, type=type_)

    def report(self, key: str, values: list[Any], bad: list[int]) -> None:
        shown = ", ".join(f"#{i} ({type(values[i]).__name__})" for i in bad[:_MAX_DETAILS])
        more = f" and {len(bad) - _MAX_DETAILS} more" if len(bad) > _MAX_DETAILS else ""
        self.problems.append(
            f"field {key!r} has values of the wrong type in entries {shown}{more}; "
            "they are treated as unknown"
        )


def _repeated_array(
    codes: np.ndarray, distinct: list[Any], type_: pa.DataType, *, checked: bool = False
) -> tuple[pa.Array, np.ndarray]:
    """A dictionary column from per-entry codes into distinct hashable twins (None: null),
    and the per-entry fingerprints. Raises ValueError (or Arrow's errors) for a value no op
    has, unless the twins were ``checked`` one by one already."""
    none_at = distinct.index(None) if None in distinct else -1
    if not checked:
        nested = pa.types.is_list(type_.value_type)
        shapes = list(filter(None, distinct))
        if max(map(len, shapes), default=0) > _MAX_TENSORS or (
            nested and max(map(len, chain.from_iterable(shapes)), default=0) > _MAX_DIMS
        ):
            raise ValueError("more tensors or dimensions than any op has")
    table = pa.array(distinct, type=type_)  # the twins: tuples convert like the lists they are
    if not checked:
        inner = table.flatten()
        if inner.null_count or (nested and inner.flatten().null_count):
            raise ValueError("a None inside a value")  # [[None]]: Arrow takes it as null
    valid = codes != none_at
    crcs = np.fromiter(
        (zlib.crc32(repr(t).encode()) for t in distinct), dtype=np.uint32, count=len(distinct)
    )
    sig = np.where(valid, crcs[codes] if len(crcs) else 0, 0).astype(np.uint32)
    indices = pa.array(codes, type=pa.int32(), mask=~valid)
    return pa.DictionaryArray.from_arrays(indices, table), sig


_SHAPE_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
_SHAPE_FIELDS = itemgetter(*_SHAPE_KEYS)
_SHAPE_TYPES = (schema.SIZES, schema.SIZES, schema.DTYPES, schema.DTYPES)
_LISTS = frozenset((list, tuple))


def _checked_twin(value: Any, nested: bool) -> Any:
    """The hashable twin of one sizes (nested) or dtypes value, or _BAD."""
    if not isinstance(value, list | tuple) or len(value) > _MAX_TENSORS:
        return _BAD
    if not nested:
        return tuple(map(_clean, value)) if all(type(x) is str for x in value) else _BAD
    shapes = []
    for shape in value:
        if not isinstance(shape, list | tuple) or len(shape) > _MAX_DIMS:
            return _BAD
        if not all(type(x) is int and _INT64_MIN <= x <= _INT64_MAX for x in shape):
            return _BAD
        shapes.append(tuple(shape))
    return tuple(shapes)


def _arrow_accepts(value: Any, type_: pa.DataType) -> bool:
    try:
        pa.array([value], type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return False
    return True


def _fits_int64(v: Any) -> bool:
    if type(v) is int:
        return _INT64_MIN <= v <= _INT64_MAX
    return type(v) is float and v.is_integer() and _INT64_MIN <= v <= _INT64_MAX


def _fits_float64(v: Any) -> bool:
    return type(v) in (float, bool) or (type(v) is int and abs(v) <= 2**53)


def _fits_bool(v: Any) -> bool:
    return type(v) is bool


# Which Python values each scalar column accepts (Arrow's rules, without Arrow's messages).
_FITS: dict[pa.DataType, Callable[[Any], bool]] = {
    pa.int64(): _fits_int64,
    pa.float64(): _fits_float64,
    pa.bool_(): _fits_bool,
}


def _entries_batch(
    path: Path, rank: int, entries: list[dict[str, Any]], from_json: bool
) -> tuple[pa.RecordBatch, tuple[Stack, ...], list[str]]:
    cols = _Columns(path, rank, entries)
    n = len(entries)

    names = cols.values("profiling_name")
    if not _ONLY_STR.issuperset(map(type, names)):
        names = [x if isinstance(x, str) else None for x in names]
    name_codes, name_values = _encode(names)
    bad_names = int((name_codes < 0).sum())
    if bad_names:
        cols.problems.append(f"{bad_names} entries have no profiling_name; their op is unknown")
    parts = [split_profiling_name(v) for v in name_values]  # once per distinct name
    backend = _decoded(name_codes, [p[0] for p in parts])
    op_arr = _decoded(name_codes, [p[1] for p in parts])
    src = _gather_ints(name_codes, [p[2] for p in parts])
    dst = _gather_ints(name_codes, [p[3] for p in parts])
    is_send_recv = np.array([p[1] in ("send", "recv") for p in parts] + [False])[name_codes]

    pg_ids = cols.take("pg_id", pa.int64())
    group_name, group_desc = _group_columns(cols.values("process_group"), pg_ids, cols.problems)

    is_p2p_raw = cols.values("is_p2p")
    if _ONLY_BOOL.issuperset(map(type, is_p2p_raw)):  # recorded for every entry (2.4+)
        is_p2p = np.fromiter(is_p2p_raw, dtype=bool, count=n)
    else:  # before 2.4, or damaged: send/recv by name
        is_p2p = np.array(
            [
                v if isinstance(v, bool) else bool(o)
                for v, o in zip(is_p2p_raw, is_send_recv, strict=True)
            ],
            dtype=bool,
        )

    if n and "time_created_ns" not in entries[0] and "time_created_us" in entries[0]:
        created = [_us_to_ns(e.get("time_created_us")) for e in entries]
    else:
        created = cols.values("time_created_ns")

    started = cols.values("time_discovered_started_ns")
    completed = cols.values("time_discovered_completed_ns")
    if from_json:  # JSON writes 0 for "not observed"
        started = [None if v == 0 else v for v in started]
        completed = [None if v == 0 else v for v in completed]

    stack_ids, stacks = _intern_stacks(entries, cols.problems)
    shapes = cols.shape_columns()
    (in_sizes, in_sig), (out_sizes, out_sig) = shapes[0], shapes[1]
    (in_dtypes, in_dt_sig), (out_dtypes, out_dt_sig) = shapes[2], shapes[3]

    arrays = [
        pa.array([rank] * n, type=pa.int32()),
        pa.array(range(n), type=pa.int32()),
        cols.take("record_id", pa.int64()),
        pg_ids,
        group_name,
        group_desc,
        cols.take("collective_seq_id", pa.int64(), alt="seq_id"),
        cols.take("p2p_seq_id", pa.int64()),
        cols.take("op_id", pa.int64()),
        _dictionary(name_codes, name_values),
        backend,
        op_arr,
        pa.array(is_p2p, type=pa.bool_()),
        src,
        dst,
        in_sizes,
        out_sizes,
        in_dtypes,
        out_dtypes,
        cols.take("state", schema.TEXT),
        cols.convert("time_created_ns", created, pa.int64()),
        cols.convert("time_discovered_started_ns", started, pa.int64()),
        cols.convert("time_discovered_completed_ns", completed, pa.int64()),
        cols.take("duration_ms", pa.float64()),
        cols.take("retired", pa.bool_()),
        cols.take("timeout_ms", pa.int64()),
        cols.take("thread_id", schema.TEXT),
        cols.take("thread_name", schema.TEXT),
        pa.array(stack_ids, type=pa.int32()),
        _sig_array(in_sig, in_sizes),
        _sig_array(out_sig, out_sizes),
        _sig_array(in_dt_sig, in_dtypes),
        _sig_array(out_dt_sig, out_dtypes),
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema.ENTRIES)
    return batch, stacks, cols.problems


def _encode(values: list[str | None]) -> tuple[np.ndarray, list[str]]:
    """(int32 codes with -1 for None, distinct strings) of a string list."""
    index: dict[str | None, int] = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int32)
    distinct = list(index)
    if None in index:
        none_at = index[None]
        codes = np.where(codes == none_at, -1, codes - (codes > none_at)).astype(np.int32)
        distinct.remove(None)
    return codes, [str(v) for v in distinct]


def _dictionary(codes: np.ndarray, values: list[Any]) -> pa.Array:
    """A dictionary<int32, string> array from codes (-1: null) and their values."""
    return pa.DictionaryArray.from_arrays(
        pa.array(codes, type=pa.int32(), mask=codes < 0), _strings(values)
    )


def _decoded(codes: np.ndarray, values: list[str | None]) -> pa.Array:
    """Map each code to a (possibly repeated or None) string, dictionary-encoded."""
    inner, distinct = _encode(values)
    mapped = np.append(inner, -1)[codes]  # code -1 picks the appended -1 (null)
    return _dictionary(mapped, distinct)


def _gather_ints(codes: np.ndarray, values: list[int | None]) -> pa.Array:
    table = np.array([-1 if v is None else v for v in values] + [-1], dtype=np.int64)
    picked = table[codes]
    return pa.array(picked, type=pa.int32(), mask=picked < 0)


def _group_columns(
    groups: list[Any], pg_id_column: pa.Array, problems: list[str]
) -> tuple[pa.Array, pa.Array]:
    """group_name, group_desc from ``process_group`` (2.x), else ``str(pg_id)`` (1.x, 2.2)."""
    if _ONLY_TUPLE.issuperset(map(type, groups)):  # a pickle's (name, desc) pairs
        twins = groups
    else:
        twins = [
            g if g.__class__ is tuple else (tuple(g) if g.__class__ is list else None)
            for g in groups
        ]
    if None not in twins:  # every entry names its group: once per distinct pair
        index: dict[Any, int] = {}
        try:
            codes = np.array([index.setdefault(t, len(index)) for t in twins], dtype=np.int32)
        except TypeError:  # a list inside a process_group: the careful loop below
            pass
        else:
            distinct = list(index)
            names = [_label(t[0]) if len(t) >= 1 else None for t in distinct]
            descs = [_label(t[1]) if len(t) > 1 else None for t in distinct]
            unnamed = [i for i, name in enumerate(names) if name is None]
            if unnamed:
                bad = int(np.isin(codes, unnamed).sum())
                problems.append(
                    f"{bad} entries have a malformed process_group; their group is unknown"
                )
            return _decoded(codes, names), _decoded(codes, descs)
    name: list[str | None] = []
    desc: list[str | None] = []
    bad = 0
    for grp, pg_id in zip(groups, pg_id_column.to_pylist(), strict=True):
        if isinstance(grp, list | tuple) and len(grp) >= 1:
            name.append(_label(grp[0]))
            desc.append(_label(grp[1]) if len(grp) > 1 else None)
            bad += name[-1] is None
        else:  # before torch 2.4 only the per-process pg_id identifies the group
            name.append(None if pg_id is None else str(pg_id))
            desc.append(None)
    if bad:
        problems.append(f"{bad} entries have a malformed process_group; their group is unknown")
    return _text("group_name", name), _text("group_desc", desc)


def _sig_array(sig: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.array(sig, type=pa.uint32(), mask=values.is_null().to_numpy(zero_copy_only=False))


def _text(key: str, values: list[Any], cols: _Columns | None = None) -> pa.Array:
    """A dictionary-encoded string column: each distinct string converted once."""
    try:  # all strings or None (the usual case): Arrow converts and encodes in C
        encoded: pa.Array = _strings(values).dictionary_encode()
        return encoded
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        pass
    index: dict[str, int] = {}
    picks: list[int | None] = []
    bad = 0
    for value in values:
        if value is None:
            picks.append(None)
        elif isinstance(value, str):
            at = index.get(value)
            if at is None:
                at = index[value] = len(index)
            picks.append(at)
        else:
            bad += 1
            picks.append(None)
    if bad and cols is not None:
        cols.problems.append(
            f"field {key!r} is not a string in {bad} entries; they are treated as unknown"
        )
    return pa.DictionaryArray.from_arrays(pa.array(picks, type=pa.int32()), _strings(list(index)))


def _us_to_ns(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000
    return value


def _intern_stacks(
    entries: list[dict[str, Any]], problems: list[str]
) -> tuple[list[int | None], tuple[Stack, ...]]:
    """Local stack id per entry; each distinct stack is converted and stored once."""
    lists = [e.get("frames") for e in entries]
    interner = _StackInterner()
    try:  # counted in C: real dumps hold tens of frames per entry
        careful = sum(map(len, filter(None, lists))) > _MAX_LEAVES
    except TypeError:  # a value without a length: the careful loop says it is malformed
        careful = True
    ids = interner.by_list(lists) if careful else interner.by_identity(lists)
    malformed = sum(1 for frames, sid in zip(lists, ids, strict=True) if frames and sid is None)
    if malformed:
        problems.append(f"{malformed} entries have malformed stack frames; stacks not shown")
    return ids, tuple(interner.stacks)


class _StackInterner:
    """Stack ids by the content of the frames (name, filename, line in recorded order)."""

    def __init__(self) -> None:
        self.seen: dict[Any, int | None] = {}
        self.stacks: list[Stack] = []

    def by_identity(self, lists: list[Any]) -> list[int | None]:
        """torch's pickler writes a frame shared by many entries once (memoized by pointer),
        so a dump decodes to a few hundred frame dicts referenced ~10^5 times: entries whose
        frames are the same objects get their id from one look at the content."""
        keys = [tuple(map(id, f)) if f.__class__ is list and f else None for f in lists]
        # (the frame objects stay alive with ``lists``, so their ids cannot be reused)
        distinct = dict(zip(keys, lists, strict=True))  # one frames list per key
        ids = {key: self.stack_id(frames) for key, frames in distinct.items()}
        ids[None] = None
        return list(map(ids.__getitem__, keys))

    def by_list(self, lists: list[Any]) -> list[int | None]:
        """A pickle can give every entry the same long frames list (a memo reference): each
        list's stack id is worked out once, from its innermost MAX_FRAMES frames, so the work
        stays proportional to the file, not to entries x frames."""
        by_list: dict[int, int | None] = {}
        out: list[int | None] = []
        for frames in lists:
            if not frames or not isinstance(frames, list):
                out.append(None)
                continue
            sid = by_list.get(id(frames), -1)
            if sid == -1:
                sid = by_list[id(frames)] = self.stack_id(frames[:MAX_FRAMES])
            out.append(sid)
        return out

    def stack_id(self, frames: Any) -> int | None:
        """The id of this frames list's stack (None: no frames, or malformed ones)."""
        if not frames or not isinstance(frames, list):
            return None
        key: Any
        try:  # cheap identity of a stack: its frames' values in recorded order
            key = tuple(map(_FRAME_FIELDS, frames))
            hash(key)
        except (KeyError, TypeError):  # a frame that is not a dict, lacks a field, unhashable
            key = None
        sid = self.seen.get(key, -1) if key is not None else -1
        if sid != -1:
            return sid
        stack = _convert_stack(frames)
        if stack is None:
            sid = None
        else:
            sid = len(self.stacks)
            self.stacks.append(stack)
        if key is not None:
            self.seen[key] = sid
        return sid


_FRAME_FIELDS = itemgetter("name", "filename", "line")


def _convert_stack(frames: list[Any]) -> Stack | None:
    out: list[Frame] = []
    for f in frames:
        if not isinstance(f, dict):
            return None
        name, filename, line = f.get("name"), f.get("filename"), _int_or_none(f.get("line"))
        if not isinstance(name, str) or not isinstance(filename, str):
            return None
        out.append((_clean(name), _clean(filename), -1 if line is None else line))
    return tuple(out)


def _group_rows(rank: int, pg_config: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_config, dict):
        if pg_config is not None:
            problems.append("pg_config is not a mapping; process-group membership unknown")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_config.items():
        if isinstance(value, dict):  # 2.x: {name: {"name", "desc", "ranks": "[0, 1]"}}
            name = _label(value.get("name", key))
            if name is None:
                name = _label(key)
            desc = value.get("desc")
            raw_ranks = value.get("ranks")
            pg_id = None
        else:  # 1.x: {pg_id: [ranks]}
            name = _label(key)
            desc = None
            raw_ranks = value
            pg_id = _int_or_none(key)
        if name is None:
            problems.append(f"pg_config entry {_preview(key)} has no usable name; ignored")
            continue
        ranks = _parse_rank_list(raw_ranks)
        note = None
        if name == "":
            note = (
                "Gloo records every group under the name '' and keeps only the last one's "
                "ranks; membership must come from the entries"
            )
        elif ranks is None:
            note = f"unreadable ranks {_preview(raw_ranks)}"
        rows.append(
            {
                "rank": rank,
                "group_name": name,
                "group_desc": _clean(desc) if isinstance(desc, str) else None,
                "ranks": ranks,
                "pg_id": pg_id,
                "trusted": note is None,
                "note": note,
            }
        )
    return rows


def _pg_status_rows(rank: int, pg_status: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_status, dict):
        if pg_status is not None:
            problems.append("pg_status is not a mapping; ignored")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_status.items():
        pg_id = _int_or_none(key)
        if pg_id is None or not isinstance(value, dict):
            problems.append(f"pg_status entry {_preview(key)} is malformed; ignored")
            continue
        rows.append(
            {
                "rank": rank,
                "pg_id": pg_id,
                "last_enqueued": _int_or_none(value.get("last_enqueued_collective")),
                "last_started": _int_or_none(value.get("last_started_collective")),
                "last_completed": _int_or_none(value.get("last_completed_collective")),
            }
        )
    return rows


_VERSION = re.compile(r"(\d{1,9})(?:\.(\d{1,9}))?", re.ASCII)


def _parse_version(version: Any, problems: list[str]) -> str | None:
    if version is None:
        return None
    text = _label(version)
    if text is None:
        problems.append(f"format version is {_preview(version)}; read by the fields present")
        return None
    match = _VERSION.fullmatch(text)
    if match is None:
        problems.append(f"unrecognised format version {_preview(text)}; read by the fields present")
        return text[:100]
    if (int(match[1]), int(match[2] or 0)) > KNOWN_VERSION:
        problems.append(
            f"format version {text} is newer than this frtrace knows "
            f"({KNOWN_VERSION[0]}.{KNOWN_VERSION[1]}); loaded best-effort, unknown fields "
            "ignored. Upgrade frtrace if the analysis looks wrong."
        )
    return text


def parse_dump(cand: Candidate) -> ParsedDump:
    """Read one candidate file. Raises DumpFormatError (one line) when it cannot be read."""
    payload, encoding = read_payload(cand.path, cand.size_bytes)
    return parse_payload(payload, encoding, cand)


def parse_payload(payload: Any, encoding: str, cand: Candidate) -> ParsedDump:
    """Turn a decoded dump (list or dict) into a ParsedDump."""
    path, rank = cand.path, cand.rank
    problems: list[str] = []
    top: dict[str, Any]
    if isinstance(payload, list):  # torch 2.2: the entries themselves
        top = {"entries": payload}
        layout = "list"
    elif isinstance(payload, dict):
        top = payload
        layout = "2.x"
    else:
        raise DumpFormatError(
            f"{path}: decoded to a {type(payload).__name__}, not a Flight Recorder dump "
            "(a dict with 'entries', or a list of entries); check this file is a dump."
        )
    if layout == "2.x" and not ({"entries", "version", "pg_config", "pg_status"} & top.keys()):
        raise DumpFormatError(
            f"{path}: a mapping without any Flight Recorder keys (entries, version, pg_config); "
            "check this file is a dump."
        )
    raw_entries = top.get("entries", [])
    if raw_entries is None:
        raw_entries = []
    if not isinstance(raw_entries, list):
        raise DumpFormatError(
            f"{path}: 'entries' is a {type(raw_entries).__name__}, not a list; the file is "
            "damaged or not a dump."
        )
    if len(raw_entries) > MAX_ENTRIES:
        raise DumpFormatError(
            f"{path}: refused: {len(raw_entries):,} entries, more than any Flight Recorder "
            f"buffer holds ({MAX_ENTRIES:,} limit; TORCH_FR_BUFFER_SIZE is 2,000 by default); "
            "the file is damaged or built to exhaust memory."
        )
    entries = [e for e in raw_entries if isinstance(e, dict)]
    if len(entries) != len(raw_entries):
        problems.append(f"{len(raw_entries) - len(entries)} entries are not mappings; skipped")
    if layout == "list" and raw_entries and not entries:
        raise DumpFormatError(f"{path}: a list, but not of Flight Recorder entries.")

    version = _parse_version(top.get("version"), problems)
    if layout == "2.x":
        first = entries[0] if entries else {}
        old = "seq_id" in first and "collective_seq_id" not in first
        pg_config = top.get("pg_config")
        old_config = isinstance(pg_config, dict) and any(
            isinstance(v, list) for v in pg_config.values()
        )
        if old or old_config or (version or "").startswith("1."):
            layout = "1.x"

    batch, stacks, entry_problems = _entries_batch(path, rank, entries, encoding == "json")
    problems.extend(entry_problems)
    groups = _group_rows(rank, top.get("pg_config"), problems)
    pg_status = _pg_status_rows(rank, top.get("pg_status"), problems)

    span = pc.min_max(batch.column("record_id"))
    lowest, highest = span["min"].as_py(), span["max"].as_py()
    lib = top.get("comm_lib_version", top.get("nccl_version"))
    counts = pc.value_counts(batch.column("backend").dictionary_decode().drop_null())
    backends = Counter(
        {
            v: n
            for v, n in zip(
                counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
            )
            if v
        }
    )
    backend = backends.most_common(1)[0][0] if backends else None
    if backend is None and lib == "":
        backend = "gloo"  # the generic recorder writes "" as Gloo's library version
    meta = DumpMeta(
        rank=rank,
        path=str(path),
        size_bytes=cand.size_bytes,
        encoding=encoding,
        format_version=version,
        layout=layout,
        backend=backend,
        comm_lib_version=_label(lib),
        entry_count=len(entries),
        record_id_min=lowest,
        record_id_max=highest,
        wrapped=(lowest > 0) if lowest is not None else None,
        has_stacks=bool(stacks),
        problems=tuple(problems),
    )
    return ParsedDump(
        meta=meta,
        entries=batch,
        stacks=stacks,
        groups=tuple(groups),
        pg_status=tuple(pg_status),
    )


def load_all(
    candidates: Sequence[Candidate],
    on_done: Callable[[int], None] | None = None,
) -> list[ParsedDump | DumpFormatError]:
    """Parse every candidate in order (single process); errors are returned, not raised."""
    out: list[ParsedDump | DumpFormatError] = []
    for i, cand in enumerate(candidates):
        out.append(try_parse(cand))
        if on_done is not None:
            on_done(i + 1)
    return out


def try_parse(cand: Candidate) -> ParsedDump | DumpFormatError:
    """parse_dump, with any failure turned into a one-line DumpFormatError naming the file."""
    # A dump is a few hundred thousand small containers that all stay alive until the file is
    # converted: the cyclic GC would scan them again and again for nothing (they hold no
    # cycles). Off while one file is read; its previous state is restored.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_dump(cand)
    except DumpFormatError as exc:
        return exc
    except MemoryError:  # past the worker's memory limit (frtrace.load.parallel): refused
        return DumpTooLargeError(
            f"{cand.path}: refused: reading it needs more memory than a dump of "
            f"{cand.size_bytes / 2**20:.1f} MiB ever does (real dumps need about 10 times "
            "their size); the file is damaged or built to exhaust memory."
        )
    except Exception as exc:  # a bug or an input we never imagined: still one line
        return DumpFormatError(
            f"{cand.path}: could not be read ({type(exc).__name__}: {_short(exc)}); "
            "the other ranks are analysed without it. Please report this file."
        )
    finally:
        if enabled:
            gc.enable()
