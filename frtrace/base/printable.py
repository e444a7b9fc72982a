"""Text from dumps made safe to print: control characters spelled out.

A dump's strings (frame names, file names, group names, thread names, profiling names) reach
the terminal report. A crafted or damaged dump could hold terminal escape sequences (ESC
moves the cursor, rewrites lines, sets the window title...) or Unicode bidirectional
controls (text that reads differently than it is). Every line frtrace prints or writes as
text goes through ``printable``: such characters are shown as escapes, never interpreted.
"""

from __future__ import annotations

import re

__all__ = ["clean", "json_safe", "printable", "short_message", "utf8_text"]

# C0 controls but tab and newline, DEL, C1 controls, the bidirectional formatting marks, and
# lone surrogates (how Python spells a file name's bytes that are not UTF-8: no encoder can
# write them, so a strict UTF-8 stdout would fail on them).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character other than tab and newline escaped."""
    return _UNSAFE.sub(_escape, text)


def json_safe(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with the same characters as
    ``\\uXXXX`` escapes: still valid JSON, decoding to the same strings, and left alone by
    ``printable``. (Outside strings JSON text has no such characters.)"""
    if text.isascii() and "\x7f" not in text:  # (its other ASCII controls are escaped)
        return text
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_text(text: str) -> str:
    """``text`` with its lone surrogates (how Python spells a file name's bytes that are not
    UTF-8) written out as ``\\udcXX``, as ``printable`` shows them: text every UTF-8
    encoder (Arrow's, a strict stdout's) can write."""
    if text.isascii():  # (most text: nothing to look for)
        return text
    return _SURROGATE.sub(_escape, text)


def clean(text: str) -> str:
    """Text that Arrow can store: a lone surrogate ("\\udcff", which a pickle or a JSON
    escape can hold but UTF-8 cannot) is spelled out with a backslash."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def short_message(exc: BaseException) -> str:
    """An exception's first non-blank line, storable (``clean``), at most 120 characters."""
    try:
        lines = [line for line in str(exc).splitlines() if line.strip()]
    except Exception:  # e.g. the str() of an int too long to print
        lines = []
    text = clean(lines[0]) if lines else type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
