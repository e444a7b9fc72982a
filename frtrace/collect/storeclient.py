"""The debug server registry read from the job's TCPStore by torch's own client, in a child
process (``python -m frtrace.collect.storeclient HOST PORT TIMEOUT``) that ``store.py`` kills
at its deadline: torch's client can block past its own timeout (a port that accepts and never
answers holds its first ping forever), and holds whatever a store sends in memory.

The child says ``{"imported": true}`` once torch is imported (the deadline starts then), then
one JSON line: ``{"values": {"rank<N>": "<url>", ...}}`` or ``{"error": "...", "why": "..."}``.
Its data segment is limited (``_MEMORY``) past what torch's import took; each value is cut to
``MAX_VALUE`` characters, and only keys ``rank<N>`` with N below ``MAX_RANKS`` are read.
"""

from __future__ import annotations

import json
import re
import resource
import sys
from datetime import timedelta
from typing import Any

__all__ = ["MAX_RANKS", "MAX_VALUE", "REGISTRY_PREFIX", "main"]

REGISTRY_PREFIX = "debug_server"  # torch.distributed.debug._store.tcpstore_client's prefix
MAX_RANKS = 1 << 20  # as frtrace.incident.discover.MAX_WORLD_SIZE
MAX_VALUE = 256  # a worker server's URL, http://HOST:PORT
_KEY = re.compile(r"^rank(\d{1,7})$")
_PROBE_GAP = 64  # without list_keys: ranks probed past the last one found
_BATCH = 4096  # keys per multi_get
_MEMORY = 1 << 30  # bytes of data segment past what the import took


def _say(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def _limit_memory() -> None:
    with open("/proc/self/status", encoding="ascii") as f:
        data_kib = next((int(ln.split()[1]) for ln in f if ln.startswith("VmData:")), 0)
    limit = data_kib * 1024 + _MEMORY
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def _registered_keys(store: Any) -> list[str]:
    """The registry's keys, ``rank<N>``: by listing the store where torch can, else by
    asking for rank 0, 1, ... until ``_PROBE_GAP`` in a row are missing."""
    lead = f"{REGISTRY_PREFIX}/"
    try:
        keys = store.list_keys()
    except (AttributeError, RuntimeError, NotImplementedError):
        keys = None
    if keys is not None:
        found = [k[len(lead) :] for k in keys if k.startswith(lead)]
        return [k for k in found if (m := _KEY.match(k)) and int(m[1]) < MAX_RANKS]
    probed: list[str] = []
    rank, gap = 0, 0
    while gap < _PROBE_GAP and rank < MAX_RANKS:
        key = f"rank{rank}"
        if store.check([f"{lead}{key}"]):
            probed.append(key)
            gap = 0
        else:
            gap += 1
        rank += 1
    return probed


def main(argv: list[str]) -> int:
    host, port, timeout_s = argv[0], int(argv[1]), float(argv[2])
    try:
        import torch.distributed as dist
    except ImportError:
        _say({"error": "torch"})
        return 0
    _say({"imported": True})
    _limit_memory()
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            host_name=host,
            port=port,
            is_master=False,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except Exception as exc:  # torch's errors are RuntimeError, DistStoreError, ValueError...
        _say({"error": "connect", "why": _first_line(exc)})
        return 0
    try:
        keys = _registered_keys(store)
        values: dict[str, str] = {}
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            got = store.multi_get([f"{REGISTRY_PREFIX}/{k}" for k in batch])
            for key, raw in zip(batch, got, strict=True):
                values[key] = bytes(raw[: MAX_VALUE * 4]).decode("utf-8", "replace")[:MAX_VALUE]
    except MemoryError:
        _say({"error": "store", "why": "its answers did not fit in collect's memory budget"})
        return 0
    except Exception as exc:
        _say({"error": "store", "why": _first_line(exc)})
        return 0
    _say({"values": values})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
