"""The command line's values coerced without pydantic where they are plain.

typer 0.29 coerces each parameter's value through a pydantic ``TypeAdapter``
(``typer._coercion.build_runtime_param``): the first parameter of every command imports
pydantic and builds its schema, ~0.1 s of a command's start (a cached ``analyze`` takes
~0.4 s in all). The values frtrace's parameters take on a command line are plain (a text,
a decimal number, a path, a choice by its exact name, a list of texts), and for those
``install`` puts a coercion here in front of typer's: it gives what typer's gives, and for
anything else (another type, a value out of range, a path that fails its checks, a value
typer would reject) it hands the value to typer's own coercion, so what is accepted and
every error message stay typer's (``tests/test_cli_coercion.py`` compares the two on each
parameter of each command). Where typer is not the version this was written against,
nothing is installed.

Written here rather than taken from a library: the cost is typer's own, and no option of
typer's turns it off.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.core

__all__ = ["install", "installed", "lean_runtime_param"]

# The typer whose internals this reaches into (``pyproject.toml`` pins it).
TYPER_SERIES = "0.29."

# What a plain number looks like on a command line (what ``int`` and ``float`` read alike
# with pydantic; pydantic's other spellings, " 5", "1_000", "1e3", go to typer's coercion).
_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})")


class _Miss:
    """The value is not plain: typer's own coercion takes it."""


MISS = _Miss()

Fast = Callable[[Any, Any, Any], Any]


def installed() -> bool:
    """Whether typer's parameters are coerced here first."""
    return getattr(typer.core, "build_runtime_param", None) is _build


def install() -> bool:
    """Put this coercion in front of typer's (idempotent); False where this typer is not
    the one it was written against (nothing changed then)."""
    if installed():
        return True
    if not typer.__version__.startswith(TYPER_SERIES) or _TYPERS is None:
        return False
    typer.core.build_runtime_param = _build  # type: ignore[attr-defined]
    return True


def _typer_internals() -> tuple[Any, Any] | None:
    """typer's ``RuntimeParam`` and its ``build_runtime_param``, where they are as expected."""
    try:
        from typer import _coercion
    except ImportError:
        return None
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(typer.core, "build_runtime_param", None)
    fields = getattr(base, "__dataclass_fields__", {})
    if base is None or build is not _coercion.build_runtime_param:
        return None
    if set(fields) != {"parameter_info", "annotation"}:
        return None
    return base, build


_TYPERS = _typer_internals()


def _build(descriptor: Any) -> Any:
    """typer's ``build_runtime_param``, with a plain parameter's coercion here first."""
    assert _TYPERS is not None
    lean = lean_runtime_param(descriptor)
    return lean if lean is not None else _TYPERS[1](descriptor)


def lean_runtime_param(descriptor: Any) -> Any | None:
    """The coercion of a parameter (typer's ``TypeDescriptor``) that tries this module's
    first; None where the parameter is not of a kind coerced here."""
    if _TYPERS is None:
        return None
    fast = _fast_for(descriptor.annotation, descriptor.parameter_info)
    if fast is None or descriptor.file_annotation is not None:
        return None
    return _lean_class()(
        parameter_info=descriptor.parameter_info,
        annotation=descriptor.annotation,
        descriptor=descriptor,
        fast=fast,
    )


def _fast_for(annotation: Any, info: Any) -> Fast | None:
    """The plain coercion of a parameter's values, None where there is none."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation is int or annotation is float:
        return _number(annotation, info)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _choice(annotation) if info.case_sensitive else None
    if annotation is Path and info.path_type in (None, Path) and not info.resolve_path:
        return _path(info)
    if getattr(annotation, "__origin__", None) is list and annotation.__args__ == (str,):
        return _texts
    return None


def _text(value: Any, param: Any, ctx: Any) -> Any:
    return value if type(value) is str else MISS


def _flag(value: Any, param: Any, ctx: Any) -> Any:
    return value if type(value) is bool else MISS


def _texts(value: Any, param: Any, ctx: Any) -> Any:
    if type(value) in (list, tuple) and all(type(v) is str for v in value):
        return list(value)
    return MISS


def _number(kind: type, info: Any) -> Fast | None:
    if info.clamp or not (info.min is None or isinstance(info.min, int | float)):
        return None
    if not (info.max is None or isinstance(info.max, int | float)):
        return None
    spelled = _INT if kind is int else _FLOAT

    def number(value: Any, param: Any, ctx: Any) -> Any:
        if type(value) is kind:
            got = value
        elif type(value) is str and spelled.fullmatch(value):
            got = kind(value)
        else:
            return MISS
        if (info.min is not None and got < info.min) or (info.max is not None and got > info.max):
            return MISS  # (typer says why)
        return got

    return number


def _choice(kind: type[enum.Enum]) -> Fast:
    by_name: dict[str, enum.Enum] = {}
    for member in kind:  # (typer takes the first of equal spellings)
        by_name.setdefault(str(member.value), member)

    def choice(value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, kind):
            return value
        if type(value) is not str or (ctx is not None and ctx.token_normalize_func is not None):
            return MISS
        return by_name.get(value, MISS)

    return choice


def _path(info: Any) -> Fast:
    """typer's path checks (``_param_types.coerce_cli_path``) where they pass; a path that
    fails one is typer's to describe."""

    def path(value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, Path):  # (a default)
            got = value
        elif type(value) is str:
            got = Path(value)
        else:
            return MISS
        try:
            st = os.stat(got)
        except ValueError:  # (a NUL in it)
            return MISS
        except OSError:
            return MISS if info.exists else got
        if (not info.file_okay and stat.S_ISREG(st.st_mode)) or (
            not info.dir_okay and stat.S_ISDIR(st.st_mode)
        ):
            return MISS
        if (info.readable and not os.access(got, os.R_OK)) or (
            info.writable and not os.access(got, os.W_OK)
        ):
            return MISS
        return got

    return path


_LEAN: type | None = None


def _lean_class() -> type:
    """A subclass of typer's ``RuntimeParam`` (made once, when first needed)."""
    global _LEAN
    if _LEAN is None:
        assert _TYPERS is not None
        base, build = _TYPERS

        @dataclass(frozen=True)
        class LeanRuntimeParam(base):  # type: ignore[misc,valid-type]
            """A plain value coerced here; any other, typer's way."""

            descriptor: Any
            fast: Fast

            def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
                got = self.fast(value, param, ctx)
                if got is MISS:
                    return build(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
                return got

        _LEAN = LeanRuntimeParam
    return _LEAN
