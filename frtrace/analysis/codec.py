"""A Report (or any frozen dataclass of this package) as JSON-compatible data, and back.

``encode_report`` and ``decode_report`` are exact inverses: ``decode_report(encode_report(r))
== r``, and every reporter renders both alike. The walker is driven by the dataclasses' type
hints, never by the data: decoding builds only the classes the hints name, so a damaged or
hostile file can fail to decode but never runs code (no pickle).

It is strict both ways. A value must have exactly the hinted type (a list where a tuple is
hinted, a bool where an int is, a subclass of a dataclass: ``CodecError``), a dataclass is a
dict with exactly its fields (an unknown or a missing key: ``CodecError``), and the envelope
names the codec's ``FORMAT``. Supported hints: the dataclasses themselves, ``int``, ``float``
(an int is kept an int: JSON tells them apart), ``str``, ``bool``, ``None``, ``X | None``,
``Literal[...]``, ``tuple[X, ...]``, fixed ``tuple[X, Y]``, ``dict[K, V]`` (as [key, value]
pairs: JSON keys are strings only), enums (by value) and a union of dataclasses (``A | B``,
or ``A | B | None``: as ``{"type": class name, "value": ...}``, only the hinted classes).
Anything else is refused when first met, so a new field of a new kind fails the round-trip
tests rather than a user's cache.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from frtrace.model import Report

__all__ = ["FORMAT", "CodecError", "decode", "decode_report", "encode", "encode_report"]

# 3: notes, stragglers, stacks' reading and places typed; 4: named; 5: why suspected, clocks
FORMAT = "frtrace-report-6"

_Fn = Callable[[Any], Any]


class CodecError(ValueError):
    """The value or the data does not have the hinted type (or the codec cannot say it)."""


def encode_report(report: Report) -> dict[str, Any]:
    """The report as JSON-compatible data (dicts, lists, str, int, float, bool, None)."""
    return {"format": FORMAT, "report": encode(Report, report)}


def decode_report(data: object) -> Report:
    """The report ``encode_report`` gave; ``CodecError`` for anything else."""
    if not isinstance(data, dict) or set(data) != {"format", "report"}:
        raise CodecError("not an encoded report")
    if data["format"] != FORMAT:
        raise CodecError(f"format {data['format']!r}, not {FORMAT!r}")
    report: Report = decode(Report, data["report"])
    return report


def encode(hint: Any, value: Any) -> Any:
    """``value`` (of type ``hint``) as JSON-compatible data."""
    return _codec(hint)[0](value)


def decode(hint: Any, data: Any) -> Any:
    """The value of type ``hint`` that ``encode(hint, value)`` gave ``data`` for."""
    return _codec(hint)[1](data)


_CODECS: dict[Any, tuple[_Fn, _Fn]] = {}


def _codec(hint: Any) -> tuple[_Fn, _Fn]:
    """The encoder and decoder of one hint, built once."""
    try:
        return _CODECS[hint]
    except KeyError:
        pass
    codec = _build(hint)
    _CODECS[hint] = codec
    return codec


def _build(hint: Any) -> tuple[_Fn, _Fn]:
    origin, args = get_origin(hint), get_args(hint)
    if hint in (int, str, bool, type(None)):
        return _exact(hint)
    if hint is float:
        return _float()
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) > 1 and all(isinstance(a, type) and dataclasses.is_dataclass(a) for a in rest):
            tagged = _tagged(tuple(rest))
            return tagged if len(rest) == len(args) else _optional_codec(tagged)
        if len(rest) != 1 or len(args) != 2:
            raise CodecError(f"{hint}: only X | None and unions of dataclasses are supported")
        return _optional(rest[0])
    if origin is Literal:
        return _literal(args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(args[0])
        return _fixed(args)
    if origin in (dict, Mapping):
        return _pairs(*args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint)
    raise CodecError(f"{hint}: no codec for this type")


def _name(value: object) -> str:
    return type(value).__name__


def _exact(kind: type) -> tuple[_Fn, _Fn]:
    def check(value: Any) -> Any:
        if type(value) is not kind:
            raise CodecError(f"a {_name(value)}, not a {kind.__name__}")
        return value

    return check, check


def _float() -> tuple[_Fn, _Fn]:
    def check(value: Any) -> Any:
        if type(value) is not float and type(value) is not int:
            raise CodecError(f"a {_name(value)}, not a float")
        return value

    return check, check


def _optional(hint: Any) -> tuple[_Fn, _Fn]:
    return _optional_codec(_codec(hint))


def _optional_codec(codec: tuple[_Fn, _Fn]) -> tuple[_Fn, _Fn]:
    enc, dec = codec
    return (lambda v: None if v is None else enc(v)), (lambda d: None if d is None else dec(d))


def _tagged(classes: tuple[type[Any], ...]) -> tuple[_Fn, _Fn]:
    """One of several dataclasses, named by its class: ``{"type": name, "value": fields}``."""
    by_name = {cls.__name__: cls for cls in classes}
    if len(by_name) != len(classes):
        raise CodecError(f"{classes}: two classes of one name")

    def encode_one(value: Any) -> dict[str, Any]:
        cls = type(value)
        if by_name.get(cls.__name__) is not cls:
            raise CodecError(f"a {_name(value)}, none of {sorted(by_name)}")
        return {"type": cls.__name__, "value": _codec(cls)[0](value)}

    def decode_one(data: Any) -> Any:
        if type(data) is not dict or set(data) != {"type", "value"}:
            raise CodecError("not a {type, value} pair")
        cls = by_name.get(data["type"]) if type(data["type"]) is str else None
        if cls is None:
            raise CodecError(f"{data['type']!r} is none of {sorted(by_name)}")
        return _codec(cls)[1](data["value"])

    return encode_one, decode_one


def _literal(allowed: tuple[Any, ...]) -> tuple[_Fn, _Fn]:
    def check(value: Any) -> Any:
        if not any(type(value) is type(a) and value == a for a in allowed):
            raise CodecError(f"{value!r} is none of {allowed}")
        return value

    return check, check


def _sequence(hint: Any) -> tuple[_Fn, _Fn]:
    enc, dec = _codec(hint)

    def encode_all(value: Any) -> list[Any]:
        if type(value) is not tuple:
            raise CodecError(f"a {_name(value)}, not a tuple")
        return [enc(v) for v in value]

    def decode_all(data: Any) -> tuple[Any, ...]:
        if type(data) is not list:
            raise CodecError(f"a {_name(data)}, not a list")
        return tuple([dec(d) for d in data])

    return encode_all, decode_all


def _fixed(hints: tuple[Any, ...]) -> tuple[_Fn, _Fn]:
    codecs = [_codec(h) for h in hints]

    def encode_all(value: Any) -> list[Any]:
        if type(value) is not tuple or len(value) != len(codecs):
            raise CodecError(f"not a tuple of {len(codecs)}")
        return [c[0](v) for c, v in zip(codecs, value, strict=True)]

    def decode_all(data: Any) -> tuple[Any, ...]:
        if type(data) is not list or len(data) != len(codecs):
            raise CodecError(f"not a list of {len(codecs)}")
        return tuple([c[1](d) for c, d in zip(codecs, data, strict=True)])

    return encode_all, decode_all


def _pairs(key: Any, item: Any) -> tuple[_Fn, _Fn]:
    key_enc, key_dec = _codec(key)
    item_enc, item_dec = _codec(item)

    def encode_all(value: Any) -> list[Any]:
        if type(value) is not dict:
            raise CodecError(f"a {_name(value)}, not a dict")
        return [[key_enc(k), item_enc(v)] for k, v in value.items()]

    def decode_all(data: Any) -> dict[Any, Any]:
        if type(data) is not list:
            raise CodecError(f"a {_name(data)}, not a list of pairs")
        out = {}
        for pair in data:
            if type(pair) is not list or len(pair) != 2:
                raise CodecError("not a [key, value] pair")
            k = key_dec(pair[0])
            if k in out:
                raise CodecError(f"key {k!r} twice")
            out[k] = item_dec(pair[1])
        return out

    return encode_all, decode_all


def _enum(cls: type[enum.Enum]) -> tuple[_Fn, _Fn]:
    kinds = {type(m.value) for m in cls}
    if len(kinds) != 1 or not kinds <= {int, str}:
        raise CodecError(f"{cls.__name__}: only enums of int or str values are supported")
    (kind,) = kinds

    def encode_one(value: Any) -> Any:
        if type(value) is not cls:
            raise CodecError(f"a {_name(value)}, not a {cls.__name__}")
        return value.value

    def decode_one(data: Any) -> Any:
        if type(data) is not kind:
            raise CodecError(f"a {_name(data)}, not a {cls.__name__} value")
        try:
            return cls(data)
        except ValueError:
            raise CodecError(f"{data!r} is no {cls.__name__}") from None

    return encode_one, decode_one


def _dataclass(cls: type[Any]) -> tuple[_Fn, _Fn]:
    # Filled on first use, so that a class may contain itself (PrefixNode).
    fields: list[tuple[str, _Fn, _Fn]] = []

    def table() -> list[tuple[str, _Fn, _Fn]]:
        if not fields:
            hints = get_type_hints(cls)
            built = []
            for f in dataclasses.fields(cls):
                if not f.init:
                    raise CodecError(f"{cls.__name__}.{f.name}: not set by the constructor")
                built.append((f.name, *_codec(hints[f.name])))
            fields.extend(built)
        return fields

    def encode_one(value: Any) -> dict[str, Any]:
        if type(value) is not cls:
            raise CodecError(f"a {_name(value)}, not a {cls.__name__}")
        out = {}
        for name, enc, _ in table():
            try:
                out[name] = enc(getattr(value, name))
            except CodecError as exc:
                raise CodecError(f"{cls.__name__}.{name}: {exc}") from None
        return out

    def decode_one(data: Any) -> Any:
        known = table()
        if type(data) is not dict:
            raise CodecError(f"a {_name(data)}, not a {cls.__name__}")
        if len(data) != len(known) or any(name not in data for name, _, _ in known):
            names = {name for name, _, _ in known}
            unknown, missing = sorted(set(data) - names), sorted(names - set(data))
            raise CodecError(f"{cls.__name__}: unknown fields {unknown}, missing {missing}")
        values = {}
        for name, _, dec in known:
            try:
                values[name] = dec(data[name])
            except CodecError as exc:
                raise CodecError(f"{cls.__name__}.{name}: {exc}") from None
        return cls(**values)

    return encode_one, decode_one
