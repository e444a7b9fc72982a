"""Validated Arrow columns from a list of entry dicts: the fast paths and the careful ones.

Each column is built in one C-level pass where every value is what it should be (the C pass
of ``native`` for most, else map/itemgetter passes), and value by value otherwise: a
wrong-typed value becomes null and is reported per field, never raised.
Sizes and dtypes, which repeat, are converted once per distinct value and dictionary-encoded.
"""

from __future__ import annotations

import contextlib
import marshal
from collections.abc import Callable, Collection, Sequence
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.errors import DumpFormatError
from frtrace.load import schema
from frtrace.load.read import native
from frtrace.load.read.arrays import MAX_DIMS, MAX_TENSORS, distinct_values
from frtrace.load.read.plain import Col, Column, plain_text, to_arrow
from frtrace.load.read.values import (
    INT64_MAX,
    INT64_MIN,
    MAX_LEAVES,
    clean,
    first_seen_codes,
    strings,
)

__all__ = ["Columns", "text_column"]

# At most this many per-field problems are spelled out per file; the rest are counted.
_MAX_DETAILS = 3

# Arrow types whose columns numpy can build in one C loop when no value is missing.
_NUMPY_TYPES = {pa.int64(): np.int64, pa.float64(): np.float64}
# What may reach Arrow's converter for a scalar column. Anything else is nulled first: Arrow's
# error message for a bad value prints the whole value, and a pickle can make a list whose
# text is exponentially long (sub-lists shared through the memo) or nested 100,000 deep.
_SCALARS = frozenset((int, float, bool, type(None)))
_SEQUENCES = frozenset((list, tuple, type(None)))
_BAD = object()
_UNSEEN = object()


class Columns:
    """Builds the ENTRIES columns of one file; invalid values become null and are reported."""

    def __init__(self, path: Path, rank: int, entries: Sequence[dict[str, Any]]) -> None:
        self.path = path
        self.rank = rank
        self.entries = entries
        self.problems: list[str] = []
        self.fetched: dict[str, Sequence[Any]] = {}
        self.scanned: dict[str | tuple[str, ...], Any] = {}
        self.scanned_by_c = False  # (what the C pass gave up on is not asked of it again)

    def scan(self, specs: Sequence[native.Spec], prefetch: Collection[str]) -> None:
        """Read the columns of ``specs`` in one C pass where it is built (``native``); those
        it gives up on (a value not of the plain kind expected), or all of them where it is not
        built, those of them in ``prefetch`` in one Python pass. ``take`` and friends then read
        from these."""
        scanned = native.columns(self.entries, specs) if self.entries else None
        self.scanned = scanned or {}
        self.scanned_by_c = scanned is not None
        read = [key for key, _, _ in specs if isinstance(key, str) and key not in self.scanned]
        self.prefetch([key for key in read if key in prefetch])

    def prefetch(self, keys: Sequence[str]) -> None:
        """Read ``keys`` (those the first entry has) from every entry in one C-level pass,
        and turn the rows into columns in another; nothing when an entry lacks one of them
        (each column is then read on its own, as ``values`` does)."""
        present = [k for k in keys if k in self.entries[0]] if self.entries else []
        if len(present) < 2:  # (itemgetter of one key gives the value, not a row)
            return
        try:
            rows = list(map(itemgetter(*present), self.entries))
        except KeyError:
            return
        self.fetched = dict(zip(present, zip(*rows, strict=True), strict=True))

    def values(self, key: str, alt: str | None = None) -> Sequence[Any]:
        """Every entry's ``key`` (else its ``alt``, else None)."""
        fetched = self.fetched.get(key)
        if fetched is not None:
            return fetched
        try:  # every entry has the key (the usual case): one C-level pass
            return list(map(itemgetter(key), self.entries))
        except KeyError:
            if alt is None:  # (duration_ms: only where the op's time was measured)
                return list(map(methodcaller("get", key), self.entries))
            return [e[key] if key in e else e.get(alt) for e in self.entries]

    def take(self, key: str, type_: pa.DataType, alt: str | None = None) -> Col:
        """Column ``key`` (or ``alt`` where ``key`` is absent), validated by Arrow."""
        scanned = self.scanned.get(key)
        if scanned is None:
            return self.convert(key, self.values(key, alt), type_)
        if type_ == schema.TEXT:
            codes, distinct = scanned
            if plain_text(distinct):
                return Column(codes, codes >= 0, distinct)
            return text_column(key, self.values(key), self)
        values, valid = scanned
        return Column(values, valid)

    def take_time(self, key: str, from_json: bool) -> Col:
        """An int64 time column; in JSON, where 0 means "not observed", 0 is null."""
        scanned = self.scanned.get(key)
        if scanned is not None:
            values, valid = scanned
            if from_json and (values == 0).any():
                valid = values != 0 if valid is None else valid & (values != 0)
            return Column(values, valid)
        read = self.values(key)
        if from_json:
            read = [None if v == 0 else v for v in read]
        return self.convert(key, read, pa.int64())

    def convert(self, key: str, values: Sequence[Any], type_: pa.DataType) -> pa.Array:
        fast = _NUMPY_TYPES.get(type_)
        # the common case: every value present and a number (numpy reads None as NaN: skip)
        if fast is not None and None not in values:
            try:
                return pa.array(np.fromiter(values, dtype=fast, count=len(values)))
            except (TypeError, ValueError, OverflowError):
                pass
        if pa.types.is_list(type_):
            return to_arrow(self.convert_repeated(key, values, type_)[0], type_).cast(type_)
        if type_ == schema.TEXT:
            return text_column(key, values, self)
        if _SCALARS.issuperset(map(type, values)):
            try:
                return pa.array(values, type=type_)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                pass
        return self.convert_slowly(key, values, type_)

    def take_repeated(self, key: str, type_: pa.DataType) -> tuple[Column, np.ndarray]:
        """A list column and its per-entry fingerprints (0 where missing)."""
        return self.convert_repeated(key, [e.get(key) for e in self.entries], type_)

    def convert_repeated(
        self, key: str, values: Sequence[Any], type_: pa.DataType
    ) -> tuple[Column, np.ndarray]:
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

    def shape_columns(self) -> list[tuple[Column, np.ndarray]]:
        """input_sizes, output_sizes, input_dtypes, output_dtypes with their fingerprints.

        The four at once when every entry has them as well-formed lists: one key per entry
        (an op's sizes and dtypes repeat together), made by the C pass (``native``) or, without
        it, as the ``marshal`` bytes of the four values; the first entry with each key is
        checked, and its values stand for the others. Otherwise column by column, as
        ``take_repeated``, with the same result.
        """
        combos: dict[tuple[Any, ...], int] = {}
        if native.active():  # keyed in C; any value it does not take is checked one by one
            try:
                if self.scanned_by_c:
                    keyed, firsts = self.scanned[SHAPE_KEYS]  # (KeyError: given up)
                else:
                    keyed, firsts = native.shapes(self.entries, SHAPE_KEYS)
            except LookupError:
                return self.shapes_one_by_one()
            picks = []
            for first in firsts:
                combo = _shape_combo(_SHAPE_FIELDS(self.entries[first]))
                if combo is None:
                    return self.shapes_one_by_one()
                picks.append(combos.setdefault(combo, len(combos)))
            codes = np.array(picks, dtype=np.int32)[keyed]
        else:
            try:  # (marshal writes a value shared through the pickle's memo once, by reference)
                keys = list(map(marshal.dumps, map(_SHAPE_FIELDS, self.entries)))
            except (KeyError, TypeError, ValueError):  # a field missing; nested past the limit
                return self.shapes_one_by_one()
            # equal values can encode differently (marshal marks objects referenced more than
            # once), so the decoded values are what is compared
            distinct: dict[bytes, int] = dict.fromkeys(keys, 0)
            for key in distinct:
                combo = _shape_combo(marshal.loads(key))
                if combo is None:
                    return self.shapes_one_by_one()
                distinct[key] = combos.setdefault(combo, len(combos))
            codes = np.fromiter(map(distinct.__getitem__, keys), dtype=np.int32, count=len(keys))
        out = []
        try:
            for part, type_ in enumerate(_SHAPE_TYPES):
                inner: dict[Any, int] = {}
                picks = [inner.setdefault(c[part], len(inner)) for c in combos]
                picked = np.array(picks, np.int32)[codes]
                out.append(_repeated_array(picked, list(inner), type_, checked=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            return self.shapes_one_by_one()  # (_shape_combo leaves Arrow nothing to refuse)
        return out

    def shapes_one_by_one(self) -> list[tuple[Column, np.ndarray]]:
        pairs = zip(SHAPE_KEYS, _SHAPE_TYPES, strict=True)
        return [self.take_repeated(key, type_) for key, type_ in pairs]

    def repeated_slowly(
        self, key: str, values: Sequence[Any], nested: bool
    ) -> tuple[np.ndarray, list[Any]]:
        """Codes and distinct twins (None first) of a sizes/dtypes column, each value checked
        alone."""
        checked: dict[int, Any] = {}  # id(value) -> twin: a shared value is checked once
        index: dict[Any, int] = {None: 0}
        codes = np.zeros(len(values), dtype=np.int32)
        bad: list[int] = []
        budget = MAX_LEAVES
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
                        f"{self.path}: field {key!r} holds more than {MAX_LEAVES:,} sizes "
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

    def convert_slowly(self, key: str, values: Sequence[Any], type_: pa.DataType) -> pa.Array:
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

    def report(self, key: str, values: Sequence[Any], bad: list[int]) -> None:
        shown = ", ".join(f"#{i} ({type(values[i]).__name__})" for i in bad[:_MAX_DETAILS])
        more = f" and {len(bad) - _MAX_DETAILS} more" if len(bad) > _MAX_DETAILS else ""
        self.problems.append(
            f"field {key!r} has values of the wrong type in entries {shown}{more}; "
            "they are treated as unknown"
        )


def _repeated_array(
    codes: np.ndarray, distinct: list[Any], type_: pa.DataType, *, checked: bool = False
) -> tuple[Column, np.ndarray]:
    """A dictionary column from per-entry codes into distinct hashable twins (None: null),
    and the per-entry fingerprints. Raises ValueError (or Arrow's errors) for a value no op
    has, unless the twins were ``checked`` one by one already."""
    none_at = distinct.index(None) if None in distinct else -1
    table, crcs, listed = distinct_values(tuple(distinct), type_, checked)
    if none_at < 0:  # (every entry has a value: no mask to make)
        return Column(codes, None, listed, table), crcs[codes]
    valid = codes != none_at
    sig = np.where(valid, crcs[codes] if len(crcs) else 0, 0).astype(np.uint32)
    return Column(codes, valid, listed, table), sig


SHAPE_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
_SHAPE_FIELDS = itemgetter(*SHAPE_KEYS)
_SHAPE_TYPES = (schema.SIZES, schema.SIZES, schema.DTYPES, schema.DTYPES)
_SHAPE_NESTED = (True, True, False, False)


def _shape_combo(values: Any) -> tuple[Any, ...] | None:
    """The four twins of one entry's sizes and dtypes, or None unless each is well formed
    and stored as it is (no text to clean): what the column-by-column path then agrees with."""
    twins = tuple(map(_checked_twin, values, _SHAPE_NESTED))
    if _BAD in twins:
        return None
    if twins[2] != tuple(values[2]) or twins[3] != tuple(values[3]):
        return None  # a lone surrogate in a dtype: the careful path spells it out
    return twins


def _checked_twin(value: Any, nested: bool) -> Any:
    """The hashable twin of one sizes (nested) or dtypes value, or _BAD."""
    if not isinstance(value, list | tuple) or len(value) > MAX_TENSORS:
        return _BAD
    if not nested:
        return tuple(map(clean, value)) if all(type(x) is str for x in value) else _BAD
    shapes = []
    for shape in value:
        if not isinstance(shape, list | tuple) or len(shape) > MAX_DIMS:
            return _BAD
        if not all(type(x) is int and INT64_MIN <= x <= INT64_MAX for x in shape):
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
        return INT64_MIN <= v <= INT64_MAX
    return type(v) is float and v.is_integer() and INT64_MIN <= v <= INT64_MAX


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


def text_column(key: str, values: Sequence[Any], cols: Columns | None = None) -> pa.Array:
    """A dictionary-encoded string column: each distinct string converted once."""
    try:  # all strings or None (the usual case): encoded in C, each distinct string once
        codes, distinct = first_seen_codes(values)
        if plain_text(distinct):
            return to_arrow(Column(codes, codes >= 0, distinct), schema.TEXT)
        encoded: pa.Array = strings(values).dictionary_encode()  # (text to clean: see clean)
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
    return pa.DictionaryArray.from_arrays(pa.array(picks, type=pa.int32()), strings(list(index)))
