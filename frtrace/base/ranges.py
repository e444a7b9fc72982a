"""Rank lists as compact ranges: ``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"``."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["format_ranks", "parse_ranks"]


def format_ranks(ranks: Iterable[int]) -> str:
    """Sorted, de-duplicated ranks written as comma-separated ranges."""
    items = sorted(set(ranks))
    if not items:
        return "-"
    parts: list[str] = []
    start = prev = items[0]
    for r in items[1:]:
        if r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = r
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def parse_ranks(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` -> (0, 1, 2, 3, 8); raises ValueError naming the bad part."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            if dash:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"{part!r} is not a rank or a range like 4-7") from None
    return tuple(sorted(out))
