# The C pass over decoded entries (_scan.c); frtrace.load.native wraps it.
from typing import Any

INT64: int
FLOAT64: int
BOOL: int
TEXT: int
PAIR: int
FRAMES: int
NONE: int
SHAPES: int

def columns(
    entries: list[dict[str, Any]],
    specs: tuple[tuple[str | tuple[str, ...], int, bool], ...],
    max_leaves: int,
) -> list[Any]: ...
