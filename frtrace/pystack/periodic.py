"""torch's debug server's periodic dumps: every rank's stacks in one file, one file per moment.

``start_debug_server(dump_dir=..., dump_interval=...)`` makes rank 0's frontend write, every
``dump_interval`` seconds, ``stacks_<YYYYmmdd_HHMMSS>.txt`` (each rank's ``dump_traceback``:
faulthandler text) and, where enabled, ``pyspy_dump_<...>.txt`` (py-spy text), named by the
frontend host's local time::

    PARTIAL DATA: 3/4 workers responded        (only when some rank did not answer)
      Rank 2: Timeout: ...

    === Rank 0: http://node-0:40123/handler/dump_traceback? ===
    Current thread 0x00007f... (most recent call first):
    ...
    === Rank 2: http://node-1:40777/handler/dump_traceback? ===
    Error: 408

The rank numbers are global ranks (the frontend asks ``rank0`` .. ``rank<WORLD_SIZE-1>``); the
host is the one in the rank's worker URL. A section that holds an error, or text that is not a
stack, is left out (the rank simply has no sample at that moment). ``fr_trace_<...>.txt``
holds torchfrtrace's tables, not the entries: it is not read.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import PurePath
from urllib.parse import urlsplit

from frtrace.incident.budget import rank_number
from frtrace.pystack.common import StackFileError, decode_text
from frtrace.pystack.model import ProcessStacks
from frtrace.pystack.pyspy import parse_pyspy_text
from frtrace.pystack.tracebacks import parse_traceback

__all__ = ["PERIODIC_NAME", "is_periodic_name", "parse_periodic", "periodic_time_ns"]

PERIODIC_NAME = re.compile(r"^(?P<kind>stacks|pyspy_dump)_(?P<at>\d{8}_\d{6})\.txt$")
_SECTION = re.compile(r"^=== Rank (?P<rank>\d{1,7}): (?P<url>\S*) ===$", re.MULTILINE)


def is_periodic_name(name: str) -> bool:
    """``stacks_20261126_003741.txt`` or ``pyspy_dump_20261126_003741.txt``."""
    return PERIODIC_NAME.match(PurePath(name).name) is not None


def periodic_time_ns(name: str) -> int | None:
    """When the frontend wrote the file, from its name (read as this machine's local time,
    as the frontend wrote it in its own; the moments of one job's files are apart by their
    true intervals whatever the zone)."""
    m = PERIODIC_NAME.match(PurePath(name).name)
    if m is None:
        return None
    try:
        parsed = time.strptime(m["at"], "%Y%m%d_%H%M%S")
    except ValueError:
        return None
    return int(time.mktime(parsed)) * 1_000_000_000


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def parse_periodic(data: bytes | str, path: str | os.PathLike[str]) -> list[ProcessStacks]:
    """Every rank's sample in one periodic file (ranks that did not answer: none)."""
    name = os.fspath(path)
    text = decode_text(data, name)
    kind_match = PERIODIC_NAME.match(PurePath(name).name)
    pyspy = kind_match is not None and kind_match["kind"] == "pyspy_dump"
    at_ns = periodic_time_ns(name)
    heads = list(_SECTION.finditer(text))
    if not heads:
        raise StackFileError(name, "no '=== Rank N: URL ===' section (not a debug server dump)")
    out: list[ProcessStacks] = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end() : end].strip("\n") + "\n"  # (the file's last line has none)
        if not body.strip() or body.lstrip().startswith("Error:"):
            continue
        rank = rank_number(head["rank"])
        if rank is None:
            continue  # (no rank of any job)
        try:
            if pyspy:
                sample = parse_pyspy_text(body, name, rank=rank)
            else:
                sample = parse_traceback(body, name, rank=rank, source="dump_traceback")
        except StackFileError:
            continue  # a rank's answer that is not a stack: no sample of it at this moment
        out.append(_placed(sample, _host(head["url"]), at_ns))
    return out


def _placed(sample: ProcessStacks, host: str | None, at_ns: int | None) -> ProcessStacks:
    return ProcessStacks(
        rank=sample.rank,
        pid=sample.pid,
        host=host,
        source=sample.source,
        path=sample.path,
        threads=sample.threads,
        taken_at_ns=at_ns,
        trigger="periodic: debug server",
    )
