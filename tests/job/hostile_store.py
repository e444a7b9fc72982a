"""A hostile client of a job's TCPStore, and a store to play it against in-process.

The job's store has no authentication: whoever reaches its port may list, read, write and
delete every key. :func:`flood`, :func:`pre_claim` and :func:`poison` do to the watch's keys
what such a client can (the names the watch used before it named its keys from a secret,
names it might guess, and every ``frtrace/`` key it lists), on any store with TCPStore's
methods: :class:`FakeStore` (tests/job/test_watch_store.py) or a real client::

    python3 tests/job/hostile_store.py PORT SECONDS [STOP_FILE]

connects to the TCPStore on 127.0.0.1:PORT (again whenever the server drops it), attacks
for SECONDS at most (until STOP_FILE exists) and prints how many rounds it made. It never
touches a key outside ``frtrace/`` (the job's own rendezvous keys): what it tests is the
watch, not the job.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

OLD = "frtrace/watch"  # the watch's keys before it named them from a secret
POINTER = f"{OLD}/key"  # where rank 0 publishes its key's digest (left alone by flood)
GUESSES = ("", "/none/0", "/0", "/run/0")  # run/restart prefixes a guesser would try
_INT = re.compile(rb"\s*[+-]?\d+")
_OLD_KEY = re.compile(r"frtrace/watch(/[^/]+){0,2}/(alarm|raise/\d+)")  # kept as flooded


def pre_claim(store: Any, alarms: int = 200) -> None:
    """Count 1 first at every leader's key the watch used (``raise/1..200``), under guessed
    prefixes too, and publish a digest of no key (rank 0's own overwrites it)."""
    for prefix in GUESSES:
        for g in range(1, alarms + 1):
            store.add(f"{OLD}{prefix}/raise/{g}", 1)
    store.set(POINTER, "0" * 32)


def flood(store: Any, step: int) -> None:
    """One round of flooding: the old alarm counter up by one (and up by a lot, set), old
    dump counters set high, and every ``frtrace/`` key listed set to a number or text."""
    for prefix in GUESSES:
        store.set(f"{OLD}{prefix}/alarm", str(1000 + step))  # (a number again after poison)
        store.add(f"{OLD}{prefix}/alarm", 1)
        store.set(f"{OLD}{prefix}/dumped/{step % 7 + 1}", str(10**6))
    store.set(f"{OLD}/alarm/{step}", "1")  # a guess at numbered alarm keys
    for key in store.list_keys():
        if key.startswith("frtrace/") and key != POINTER and _OLD_KEY.fullmatch(key) is None:
            store.set(key, str(step * 1000) if step % 2 else "poison")


def poison(store: Any, *, pointer: bool = True) -> None:
    """The old alarm counter, under every guessed prefix, set to text and to a number past
    64 bits; with ``pointer``, rank 0's digest overwritten by 100 kB that are no digest (rank 0
    puts its own back at its next check; a client that overwrote it without end would keep
    the ranks from the key: a denial of service, which such a client has anyway)."""
    for prefix in GUESSES:
        store.set(f"{OLD}{prefix}/alarm", "not a number")
        store.set(f"{OLD}{prefix}/alarm/1", "9" * 40)
    if pointer:
        store.set(POINTER, "x" * 100_000)


class FakeStore:
    """TCPStore's data and semantics in one process: ``client()`` is one connection. ``add``
    on a value that is not a 64-bit integer fails and closes that connection (TCPStore's
    server drops a client whose request it cannot parse); ``get`` of a missing key fails
    (TCPStore waits for its timeout first)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def client(self) -> FakeClient:
        return FakeClient(self)


class FakeClient:
    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.closed = False

    def _open(self) -> dict[str, bytes]:
        if self.closed:
            raise RuntimeError("Connection was likely closed")
        return self.store.data

    def set(self, key: str, value: str | bytes) -> None:
        with self.store.lock:
            self._open()[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key: str) -> bytes:
        with self.store.lock:
            data = self._open()
            if key not in data:
                raise RuntimeError(f"Wait timeout for key {key}")
            return data[key]

    def add(self, key: str, amount: int) -> int:
        with self.store.lock:
            data = self._open()
            old = data.get(key, b"0")
            match = _INT.match(old)
            value = int(match.group()) if match is not None else None
            if value is None or not -(2**63) <= value + amount < 2**63:
                self.closed = True
                raise RuntimeError("Failed to recv, got 0 bytes. Connection was likely closed")
            data[key] = str(value + amount).encode()
            return value + amount

    def check(self, keys: list[str]) -> bool:
        with self.store.lock:
            data = self._open()
            return all(key in data for key in keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        with self.store.lock:
            data = self._open()
            if key not in data:
                if expected == "":
                    data[key] = desired.encode()
                    return desired.encode()
                return expected.encode()
            if data[key] == expected.encode():
                data[key] = desired.encode()
            return data[key]

    def delete_key(self, key: str) -> bool:
        with self.store.lock:
            return self._open().pop(key, None) is not None

    def list_keys(self) -> list[str]:
        with self.store.lock:
            return list(self._open())


def _connect(port: int) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=False,
        timeout=timedelta(seconds=5),
        wait_for_workers=False,
    )


def main() -> None:
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    stop = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    deadline = time.monotonic() + seconds
    store: Any = None
    requests = step = 0
    claimed = poisoned = False
    while time.monotonic() < deadline and not (stop is not None and stop.exists()):
        try:
            if store is None:
                store = _connect(port)
            if not claimed:
                pre_claim(store)
                claimed = True
            if step % 10 == 5 or not poisoned:
                poison(store, pointer=not poisoned)
                poisoned = True
            flood(store, step)
            requests += 1
        except Exception:  # the server dropped us (an add on text): connect again
            store = None
            time.sleep(0.05)
        step += 1
        time.sleep(0.02)
    print(f"hostile: {requests} rounds", flush=True)


if __name__ == "__main__":
    main()
