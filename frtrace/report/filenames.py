"""One spelling per source file in a report: the shortest that is unique among its files.

The same file reaches a report spelled several ways: absolute in the recorder's sidecar and in
a Flight Recorder entry's stack (``/abs/job/train.py``), cut to its package part or last parts
by the stage that wrote a sentence (``job/train.py``), bare in py-spy's text (``train.py``).
Spellings that are path suffixes of one another (by whole folder names) are one file, named
by its longest spelling; each file is then shown by its shortest suffix that no other file of
the report ends with (``train.py``, or ``a/train.py`` and ``b/train.py`` where both are named).
A spelling that is a suffix of two files (``train.py`` beside ``a/train.py`` and
``b/train.py``) cannot be told apart, and is shown as written.

Every renderer applies it to what it shows (text, markdown and HTML through the document; the
JSON to its display fields: summaries, evidence, next steps, statements), so one report names
a file one way; the JSON's structured fields keep their paths as they are.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping

from frtrace.model import Report

__all__ = ["FileNames", "file_names"]

# A Python source file as sentences and frame labels write it: ``train.py``, ``job/train.py``,
# ``/abs/job/train.py``, ``C:\\job\\train.py``; followed by ``:line``, a closing parenthesis,
# punctuation, a space or the end.
_FILE = re.compile(
    r"(?<![\w./\\@+~-])((?:[A-Za-z]:)?[\w.@+~/\\-]*\w\.pyw?)(?=(?::\d+)?(?:[)\s,;:`'\"]|$))"
)


def _parts(spelling: str) -> tuple[str, ...]:
    return tuple(p for p in spelling.replace("\\", "/").split("/") if p and p != ".")


class FileNames:
    """The display spelling of each file among ``spellings`` (see the module docstring)."""

    def __init__(self, spellings: Iterable[str]) -> None:
        longest: dict[tuple[str, ...], str] = {}
        for s in spellings:
            parts = _parts(s)
            if parts and (parts not in longest or len(s) > len(longest[parts])):
                longest[parts] = s  # "/a/b.py" over "a/b.py": the same file, absolute
        # every suffix of every spelling -> the spellings that end with it
        ends: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        for parts in longest:
            for k in range(1, len(parts) + 1):
                ends.setdefault(parts[-k:], set()).add(parts)
        files = {p for p in longest if ends[p] == {p}}  # no longer spelling ends with it
        shown: dict[tuple[str, ...], str] = {}
        for parts in files:
            k = next(k for k in range(1, len(parts) + 1) if ends[parts[-k:]] & files == {parts})
            short = "/".join(parts[-k:])
            shown[parts] = longest[parts].replace("\\", "/") if k == len(parts) else short
        self._files = files
        self._shown = shown
        self._names: dict[tuple[str, ...], str | None] = {}  # spelling -> name, once asked

    def name(self, spelling: str) -> str:
        """How the report shows the file written ``spelling``: the name of the one file it
        is a suffix of; as written when it is none's or several files'."""
        parts = _parts(spelling)
        if parts not in self._names:
            owners = [f for f in self._files if f[-len(parts) :] == parts] if parts else []
            self._names[parts] = self._shown[owners[0]] if len(owners) == 1 else None
        return self._names[parts] or spelling

    def text(self, text: str) -> str:
        """``text`` with every file it names spelled the report's way."""
        if ".py" not in text or not self._files:
            return text
        return _FILE.sub(lambda m: self.name(m.group(1)), text)


def _strings(value: object) -> Iterator[str]:
    """Every string inside a report's dataclasses, tuples and mappings (not rank lists)."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if ".py" in v:
                yield v
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            todo.extend(getattr(v, f.name) for f in dataclasses.fields(v))
        elif isinstance(v, tuple | list):
            if v and isinstance(v[0], int | float | bool):
                continue  # ranks, sizes, sequence numbers
            todo.extend(v)
        elif isinstance(v, Mapping):
            todo.extend(v.values())


def file_names(report: Report) -> FileNames:
    """The spellings of every file the report names (its findings, stacks, failures)."""
    return FileNames(m.group(1) for s in _strings(report) for m in _FILE.finditer(s))
