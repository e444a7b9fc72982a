"""One ``frtrace collect`` run: one snapshot of the job, or two some seconds apart
(``--twice``: ``DIR/snap1``, ``DIR/snap2``, to tell stuck from slow), from this host's rank
processes or from every rank through torch's debug server (``--store``). The waiting between
snapshots is here; the command line only says what it got."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from frtrace.collect.run import CollectOptions, CollectResult, collect, collect_from_store
from frtrace.collect.store import parse_store_address
from frtrace.errors import CollectError

__all__ = ["Snapshot", "collect_incident", "env_match"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """What one snapshot collected, and where."""

    folder: Path
    result: CollectResult


def env_match(items: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` options as a mapping; a malformed one is a ``CollectError``."""
    match: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise CollectError(f"--env {item!r}: give NAME=VALUE, e.g. --env MASTER_PORT=29500")
        match[key] = value
    return match


def collect_incident(
    out_dir: Path,
    options: CollectOptions,
    *,
    store: str | None = None,
    twice_s: float | None = None,
    each: Callable[[Snapshot], None] = lambda snapshot: None,
) -> list[Snapshot]:
    """Collect into ``out_dir`` (or its ``snap1`` and ``snap2``, ``twice_s`` apart), from
    this host's rank processes or, with ``store`` (``HOST:PORT``), from every rank the job's
    debug server registered; ``each`` is told of every snapshot as it is taken. A snapshot
    that found no rank is a ``CollectError`` saying why."""
    if store is not None and (options.match_env or options.any_user):
        raise CollectError("--store collects every rank the job registered: no --env or --any-user")
    address = None if store is None else parse_store_address(store)
    folders = [out_dir] if twice_s is None else [out_dir / "snap1", out_dir / "snap2"]
    taken: list[Snapshot] = []
    for i, folder in enumerate(folders):
        if i:
            time.sleep(twice_s or 0)
        try:
            result = (
                collect(folder, options)
                if address is None
                else collect_from_store(folder, *address, options)
            )
        except OSError as exc:
            raise CollectError(f"{folder}: cannot collect there ({exc.strerror})") from None
        snapshot = Snapshot(folder=folder, result=result)
        each(snapshot)
        if not result.ranks:
            raise CollectError(_nothing_found(store, options, result))
        taken.append(snapshot)
    return taken


def _nothing_found(store: str | None, options: CollectOptions, result: CollectResult) -> str:
    if store is not None:
        return f"the store at {store} names no usable worker server"
    wanted = options.match_env or {}
    return (
        "no rank process found on this host (no process with RANK in its environment"
        + (f" and {', '.join(f'{k}={v}' for k, v in wanted.items())}" if wanted else "")
        + " that this user can read); run it as the job's user, on a host of the job"
        + (f"; {others_left_alone(result)}" if result.others else "")
    )


def others_left_alone(result: CollectResult) -> str:
    """The rank processes of other users that were not collected, in a line ("" if none)."""
    if not result.others:
        return ""
    s = "es" if result.others != 1 else ""
    return (
        f"{result.others} rank process{s} of other users left alone (--any-user to "
        "collect them, as root)"
    )
