"""An older attempt's or run's files added beside an incident, as a real folder holds them:
plain functions ``(src, dst) -> None`` like ``tests/transforms.py``'s, each writing a copy of
the incident folder ``src`` at ``dst`` with the leftovers of an earlier attempt or run of the
same job in the same folders (the dumps of ranks the newest did not overwrite), written two
hours before the newest's entries, by other processes (other pids), with file times as that
job left them. The newest attempt's verdict must not change
(``tests/test_invariants_beside.py``).

* ``older_larger_world``: an earlier run of the job on two more ranks: its ranks ``W`` and
  ``W + 1`` (``W``: one past the set's highest dumped rank) are copies of the set's highest
  rank's dump with every entry time two hours earlier and the default group's members (where
  recorded) the larger world's; their recorder sidecars (where the set has sidecars) say that
  world (``world_size``), another pid and a dump time two hours earlier.
* ``older_init_death``: an earlier attempt that died in ``init_process_group``: for each rank
  the set has no dump of (else rank ``W``), what ``frtrace.recorder`` writes on the exception
  then: a dump of the set's format with no op and no group, and (where the set has sidecars)
  a sidecar saying Gloo's ``connectFullMesh ... Connection refused``, two hours before the
  set's first op.

``applies(src)``: whether the transforms can write such files for the set (dumps they can
read and write as they are, in one folder: not compressed, not in an archive, not torch 2.2's
bare list, not snapshots in several folders; an op recorded). ``says_its_world(src)``: whether
the set's own dumps say its world, which ``older_larger_world`` needs (a Gloo dump records no
group's members: without the recorder's ``world_size`` an older run's rank ``W`` reads as
one of this run's ranks without a dump).
Deterministic: the same ``src`` gives the same bytes.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "BESIDE",
    "EARLIER_NS",
    "applies",
    "older_init_death",
    "older_larger_world",
    "says_its_world",
]

EARLIER_NS = 2 * 3600 * 1_000_000_000  # the older attempt ran two hours before the newest
_TIMES = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")
_INIT_ERROR = (
    "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
    "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:33165$2"
)


def _dumps(src: Path) -> list[tuple[int, Path]]:
    """The set's dump files (rank, path), as frtrace's discovery finds them."""
    from frtrace.incident.discover import discover

    found = discover(src).candidates
    return [(c.rank, Path(c.path)) for c in found if c.data is None]


def _read(path: Path) -> tuple[Any, str]:
    data = path.read_bytes()
    if data[:1] == b"\x80":
        return pickle.loads(data), "pickle"  # (this repository's fixtures: plain data)
    return json.loads(data), "json"


def _write(doc: Any, kind: str) -> bytes:
    return pickle.dumps(doc, protocol=2) if kind == "pickle" else json.dumps(doc).encode()


def applies(src: Path) -> bool:
    """Whether the set's dumps are plain files in one folder (not snapshots in several, not
    compressed, not in an archive) of a format that records its groups (not torch 2.2's)."""
    try:
        dumps = _dumps(src)
    except Exception:  # (no dump, several sets: not a set these apply to)
        return False
    if not dumps or len({p.parent for p in _every_dump(src)}) > 1:
        return False
    try:
        docs = [_read(path)[0] for _, path in dumps]
    except Exception:
        return False
    plain = all(isinstance(d, dict) and isinstance(d.get("entries"), list) for d in docs)
    return plain and any(_first_entry_ns(d) for d in docs)


def _every_dump(src: Path) -> list[Path]:
    """Every file under ``src`` that can be a dump, whichever set it is of."""
    from frtrace.incident.discover import list_files

    return [Path(c.path) for c in list_files(src).candidates]


def says_its_world(src: Path) -> bool:
    """Whether the set's own dumps say its world: a default group's members (``pg_config``)
    or the recorder sidecars' ``world_size`` (a Gloo dump records no group's members)."""
    for rank, path in _dumps(src):
        doc, _ = _read(path)
        groups = doc.get("pg_config") if isinstance(doc, dict) else None
        for group in groups.values() if isinstance(groups, dict) else ():
            default = isinstance(group, dict) and group.get("desc") == "default_pg"
            if default and group.get("ranks") not in (None, [], "[]"):
                return True
        side = _sidecar(path.parent, rank)
        if side.is_file() and isinstance(json.loads(side.read_text()).get("world_size"), int):
            return True
    return False


def _sidecar(folder: Path, rank: int) -> Path:
    return folder / f"stacks_rank_{rank}.json"


def _first_entry_ns(doc: Any) -> int:
    entries = doc.get("entries") if isinstance(doc, dict) else None
    times = [e.get("time_created_ns") for e in entries or () if isinstance(e, dict)]
    return min((t for t in times if isinstance(t, int) and t), default=0)


def _newest_entry_ns(doc: dict[str, Any]) -> int:
    return max(
        (e[k] for e in doc["entries"] for k in _TIMES if isinstance(e.get(k), int) and e[k]),
        default=0,
    )


def _widened(config: Any, world: int, wider: int) -> Any:
    """A pg_config with the default group's members (the whole world) made ``wider``'s."""
    if not isinstance(config, dict):
        return config
    whole, out = list(range(world)), {}
    for key, value in config.items():
        if isinstance(value, list) and value == whole:  # (format 1.x: {pg_id: [ranks]})
            value = list(range(wider))
        elif isinstance(value, dict) and value.get("ranks") in (whole, str(whole)):
            ranks = list(range(wider))
            value = {**value, "ranks": ranks if isinstance(value["ranks"], list) else str(ranks)}
        out[key] = value
    return out


def _touch(path: Path, at_ns: int) -> None:
    os.utime(path, ns=(at_ns, at_ns))


def older_larger_world(src: Path, dst: Path) -> None:
    """``src`` with an earlier run's dumps of ranks ``W`` and ``W + 1`` beside (see the
    module docstring)."""
    shutil.copytree(src, dst, symlinks=True)
    dumps = _dumps(src)
    top, path = max(dumps)
    world, wider = top + 1, top + 3
    doc, kind = _read(path)
    for entry in doc["entries"]:
        for key in _TIMES:
            if isinstance(entry.get(key), int) and entry[key]:  # (JSON's 0: never observed)
                entry[key] -= EARLIER_NS
    doc["pg_config"] = _widened(doc.get("pg_config"), world, wider)
    written = _newest_entry_ns(doc) + 1_000_000_000
    folder = dst / path.relative_to(src).parent
    side = _sidecar(src / path.relative_to(src).parent, top)
    for rank in (world, world + 1):
        out = folder / re.sub(r"\d+(?=(\.json)?$)", str(rank), path.name)
        out.write_bytes(_write(doc, kind))
        _touch(out, written)
        if side.is_file():
            said = json.loads(side.read_text())
            said |= {"rank": rank, "pid": 50_000 + rank, "world_size": wider}
            said["dumped_at_ns"] = written
            _sidecar(folder, rank).write_text(json.dumps(said, indent=1) + "\n")
            _touch(_sidecar(folder, rank), written)


def older_init_death(src: Path, dst: Path) -> None:
    """``src`` with an earlier attempt's dumps of processes that died in init beside (see
    the module docstring)."""
    shutil.copytree(src, dst, symlinks=True)
    dumps = _dumps(src)
    top, path = max(dumps)
    have = {r for r, _ in dumps}
    ranks = [r for r in range(top + 1) if r not in have] or [top + 1]
    doc, kind = _read(path)
    firsts = [_first_entry_ns(_read(p)[0]) for _, p in dumps]
    written = min(t for t in firsts if t) - EARLIER_NS
    empty = {"version": doc.get("version", "2.10"), "pg_config": {}, "pg_status": {}}
    empty |= {"comm_lib_version": "", "entries": []}
    folder = dst / path.relative_to(src).parent
    side = _sidecar(src / path.relative_to(src).parent, top)
    for rank in ranks:
        out = folder / re.sub(r"\d+(?=(\.json)?$)", str(rank), path.name)
        out.write_bytes(_write(empty, kind))
        _touch(out, written)
        if side.is_file():
            said = json.loads(side.read_text())
            said |= {"rank": rank, "pid": 60_000 + rank, "dumped_at_ns": written}
            said["trigger"] = {"kind": "exception", "detail": _INIT_ERROR}
            _sidecar(folder, rank).write_text(json.dumps(said, indent=1) + "\n")
            _touch(_sidecar(folder, rank), written)


BESIDE: dict[str, Callable[[Path, Path], None]] = {
    "older_larger_world": older_larger_world,
    "older_init_death": older_init_death,
}
