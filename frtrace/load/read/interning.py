"""Stack interning: each distinct stack converted and stored once per file.

torch's pickler shares frame dicts between entries, so identity is tried first; a crafted pickle
that repeats one long list is handled by list identity and a frame limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from frtrace.load.read.values import MAX_LEAVES, clean, int_or_none

__all__ = ["MAX_FRAMES", "Frame", "Stack", "StackInterner", "intern_coded_stacks", "intern_stacks"]

Frame = tuple[str, str, int]
Stack = tuple[Frame, ...]
# Frames kept per stack (innermost first): real Python stacks are tens of frames deep.
MAX_FRAMES = 1 << 11


def intern_stacks(
    lists: Sequence[Any], problems: list[str]
) -> tuple[list[int | None], tuple[Stack, ...]]:
    """Local stack id per entry from each entry's ``frames`` (None where it has none); each
    distinct stack is converted and stored once."""
    interner = StackInterner()
    try:  # counted in C: real dumps hold tens of frames per entry
        careful = sum(map(len, filter(None, lists))) > MAX_LEAVES
    except TypeError:  # a value without a length: the careful loop says it is malformed
        careful = True
    ids = interner.by_list(lists) if careful else interner.by_identity(lists)
    malformed = sum(1 for frames, sid in zip(lists, ids, strict=True) if frames and sid is None)
    _note_malformed(malformed, problems)
    return ids, tuple(interner.stacks)


def intern_coded_stacks(
    codes: np.ndarray, lists: list[Any], problems: list[str]
) -> tuple[np.ndarray, tuple[Stack, ...]]:
    """``intern_stacks`` where each entry's frames list is already known by a code (-1: no
    frames) into distinct ``lists`` told apart by the identity of their frames (the C pass,
    frtrace.load.read.native): the same ids (int32, -1 for none) and problems."""
    interner = StackInterner()
    ids = [interner.stack_id(frames) for frames in lists]
    unknown = [code for code, sid in enumerate(ids) if sid is None]
    if unknown:
        _note_malformed(int(np.isin(codes, unknown).sum()), problems)
    table = np.array([-1 if sid is None else sid for sid in ids] + [-1], dtype=np.int32)
    return table[codes], tuple(interner.stacks)  # (code -1 picks the -1 appended)


def _note_malformed(count: int, problems: list[str]) -> None:
    if count:
        problems.append(f"{count} entries have malformed stack frames; stacks not shown")


class StackInterner:
    """Stack ids by the content of the frames (name, filename, line in recorded order)."""

    def __init__(self) -> None:
        self.seen: dict[Any, int | None] = {}
        self.stacks: list[Stack] = []

    def by_identity(self, lists: Sequence[Any]) -> list[int | None]:
        """torch's pickler writes a frame shared by many entries once (memoized by pointer),
        so a dump decodes to a few hundred frame dicts referenced ~10^5 times: entries whose
        frames are the same objects get their id from one look at the content."""
        keys: list[Any]
        if _ONLY_LISTS.issuperset(map(type, lists)):  # (every entry has frames: in C)
            keys = list(map(tuple, map(map, repeat(id), lists)))  # [] -> (): no stack either
        else:
            keys = [tuple(map(id, f)) if f.__class__ is list and f else None for f in lists]
        # (the frame objects stay alive with ``lists``, so their ids cannot be reused)
        distinct = dict(zip(keys, lists, strict=True))  # one frames list per key
        ids = {key: self.stack_id(frames) for key, frames in distinct.items()}
        ids[None] = None
        return list(map(ids.__getitem__, keys))

    def by_list(self, lists: Sequence[Any]) -> list[int | None]:
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
_ONLY_LISTS = frozenset((list,))


def _convert_stack(frames: list[Any]) -> Stack | None:
    out: list[Frame] = []
    for f in frames:
        if not isinstance(f, dict):
            return None
        name, filename, line = f.get("name"), f.get("filename"), int_or_none(f.get("line"))
        if not isinstance(name, str) or not isinstance(filename, str):
            return None
        out.append((clean(name), clean(filename), -1 if line is None else line))
    return tuple(out)
