"""What a file of an incident is by its name, and where a name does not say, by its first bytes:
the rules every reader and every command share (``frtrace.incident.layout`` walks a folder
with them, ``frtrace.incident.archive`` sorts an archive's members, ``frtrace.incident.
compressed`` a file compressed on its own). See ``frtrace.incident.layout`` for the order in
which they are asked. Imports nothing of frtrace but the manifest's name.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Literal

from frtrace.job.manifest import MANIFEST_NAME  # what `collect` knew of each rank

__all__ = [
    "ERROR_FILE_NAME",
    "LOG_NAME",
    "MAX_LOG_BYTES",
    "MAX_STACK_BYTES",
    "RAS_NAME",
    "SNIFF_BYTES",
    "STACK_FILE_NAME",
    "NameKind",
    "SideKind",
    "StackFormat",
    "as_text",
    "kind_by_name",
    "looks_like_stacks",
    "may_be_stacks",
    "parse_dump_name",
    "stack_format",
]

# Extensions a dump may carry; anything else with letters after its last dot is not a dump.
DUMP_SUFFIXES = {"": "auto", ".json": "json", ".pkl": "pickle", ".pickle": "pickle"}
# Dot-separated name parts that mark a file as something else (logs of rank 3, a rotated log,
# torch's trigger pipe `<stem><rank>.pipe`, our own exports...).
NOT_A_DUMP_PARTS = frozenset(
    (
        "pipe log txt md rst out err py sh csv tsv parquet arrow gz bz2 xz zst zip tar lock "
        "tmp yaml yml toml ini html png svg pt pth bin"
    ).split()
)
_RANK_AT_END = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)$")
# A name that says "this is a Python stack sample" (the rank follows somewhere after).
STACK_FILE_NAME = re.compile(
    r"^(?:stacks?|py[-_]?spy|tracebacks?|dump[-_]?traceback|faulthandler)(?:[-_.]|\d|$)",
    re.IGNORECASE,
)
LOG_SUFFIXES = frozenset({".log", ".out", ".err"})
LOG_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?:std(?:out|err)|logs?|slurm|torchrun|console|output)(?:[-_.\d]|$)"
)
ERROR_FILE_NAME = re.compile(r"(?i)^(?:.*[-_])?error(?:[-_]?\d+)?\.json$")
# NCCL RAS's answer as ``ncclras -f json`` prints it (``collect`` saves ``ncclras.json``), or its
# monitor mode's events (``ncclras -m -f json > ncclras_monitor.json``): frtrace.evidence.ras
RAS_NAME = re.compile(r"(?i)^nccl[-_]?ras(?:[-_.][\w.-]*)?$")
MAX_LOG_BYTES = 16 * 1024 * 1024  # only a log's last bytes are read (a failure is at its end)
MAX_STACK_BYTES = 64 * 1024 * 1024  # a py-spy --locals dump of 1,000 threads is ~10 MB
SNIFF_BYTES = 4096  # enough to tell a stack file from a dump by its first lines
# Files looked into for stacks when their name does not say (a name ending in a rank).
_SNIFF_SUFFIXES = frozenset({"", ".txt", ".json", ".log", ".out", ".err", ".stacks"})
_DIGITS_AT_END = re.compile(r"(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PS_PROCESS_ANY = re.compile(r"^Process \d+: ", re.MULTILINE)
_FH_ANY = re.compile(
    r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+(?: .*?)? \(most recent call first\):"
    r"|Stack \(most recent call first\):)$",
    re.MULTILINE,
)

SideKind = Literal["stacks", "log", "error_file", "manifest", "ras"]
NameKind = Literal["manifest", "stacks", "error_file", "dump", "log", "ras"]
StackFormat = Literal["recorder", "py-spy-json", "py-spy-text", "faulthandler"]


@functools.lru_cache(maxsize=1 << 16)  # (the walk and the sets' naming both ask, per file)
def parse_dump_name(name: str) -> tuple[str, int, str] | None:
    """(prefix, rank, encoding) for a dump-like file name, None for anything else."""
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    suffix = f".{ext.lower()}" if dot else ""
    if suffix not in DUMP_SUFFIXES:
        # "nccl_trace_rank_node02.cluster_5" has no extension, its host name has dots.
        stem, suffix = name, ""
    if any(part.lower() in NOT_A_DUMP_PARTS for part in stem.split(".")[1:]):
        return None
    match = _RANK_AT_END.match(stem)
    if match is None or stem.startswith(".") or match["prefix"] in ("core", "core."):
        return None  # core.1234 is a process's core file, not rank 1234's dump
    return match["prefix"], int(match["rank"]), DUMP_SUFFIXES[suffix]


def kind_by_name(name: str) -> tuple[NameKind | None, tuple[str, int, str] | None]:
    """What a file is by its name alone (see the module docstring), and for a dump its
    prefix, rank and encoding; None for none of them."""
    if name == MANIFEST_NAME:
        return "manifest", None
    if RAS_NAME.match(name):  # (before a dump's: ``ncclras_node3.json`` is no rank's dump)
        return "ras", None
    if STACK_FILE_NAME.match(name):
        return "stacks", None
    if ERROR_FILE_NAME.match(name):
        return "error_file", None
    parsed = parse_dump_name(name)
    if parsed is not None:
        return "dump", parsed
    if os.path.splitext(name)[1].lower() in LOG_SUFFIXES or LOG_NAME.search(name):
        return "log", None
    return None, None


def may_be_stacks(name: str, kind: NameKind | None, encoding: str | None, size: int) -> bool:
    """Whether a file not named as a stack sample is looked into for one: one named like a
    dump but not a pickle, or a text file (a log included) whose name ends in a rank."""
    if kind in ("manifest", "stacks", "error_file", "ras") or not 0 < size <= MAX_STACK_BYTES:
        return False
    if kind == "dump":
        return encoding != "pickle"
    digits = _DIGITS_AT_END.search(name.split(".", 1)[0])
    suffix = os.path.splitext(name)[1].lower()
    return suffix in _SNIFF_SUFFIXES and digits is not None and len(digits[1]) <= 9


def as_text(text: str) -> str:
    """Stack dump text as the readers see it: no BOM, no terminal colours, ``\\n`` endings."""
    text = text.removeprefix("\ufeff")
    if "\x1b" in text:
        text = _ANSI.sub("", text)  # py-spy output captured through a terminal
    return text.replace("\r\n", "\n").replace("\r", "\n")


def stack_format(text: str) -> StackFormat | None:
    """Which stack format a (decoded) text is in, or None; does not validate it."""
    head = text.lstrip()
    if head.startswith("{"):
        return "recorder"
    if head.startswith("["):
        return "py-spy-json"
    if head.startswith("Process "):
        return "py-spy-text"
    if _FH_ANY.search(text):
        return "faulthandler"
    if _PS_PROCESS_ANY.search(text):
        return "py-spy-text"
    return None


def looks_like_stacks(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (its first ``SNIFF_BYTES``) is a stack sample:
    py-spy text or faulthandler output, py-spy ``--json`` (a list whose threads have py-spy's
    keys), or the recorder's sidecar (a JSON object of its own format); never a pickle, nor
    any other JSON (a dump), nor binary data."""
    if not head or head[:1] == b"\x80" or b"\x00" in head:  # a pickle, binary: not text
        return False
    text = as_text(head.decode("utf-8", errors="replace"))
    fmt = stack_format(text) if text.strip() else None
    if fmt == "recorder":  # any JSON object: only the sidecar's own format name counts
        return b'"frtrace-stacks"' in head
    if fmt == "py-spy-json":  # any JSON list: only py-spy's thread keys count (not a dump)
        return b'"owns_gil"' in head or b'"os_thread_id"' in head
    return fmt is not None
