# The C pass over decoded entries (_scan.c); frtrace.load.read.native wraps it.
from collections.abc import Iterator
from typing import Any

INT64: int
FLOAT64: int
BOOL: int
TEXT: int
PAIR: int
FRAMES: int
NONE: int
SHAPES: int

class Entries:
    """A dump's list of entries read from its pickle; each entry is made when asked for."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def all_dicts(self) -> bool: ...
    def columns(
        self,
        specs: tuple[tuple[str | tuple[str, ...], int, bool], ...],
        max_leaves: int,
    ) -> list[Any]: ...

def read(data: bytes) -> Any: ...
def columns(
    entries: list[dict[str, Any]],
    specs: tuple[tuple[str | tuple[str, ...], int, bool], ...],
    max_leaves: int,
) -> list[Any]: ...
def scatter(
    part: Any,
    rows: int,
    at: int,
    targets: list[Any],
    widths: tuple[int, ...],
    remaps: list[Any],
    zeroed: list[Any],
) -> None: ...
def runs_order(
    key: Any, wide: bool, rank: Any, span: int, order: Any, first: Any
) -> int | None: ...
