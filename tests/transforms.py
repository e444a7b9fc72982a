"""What a real incident folder goes through between the job and frtrace, as plain functions
``(src, dst) -> None``: each writes a copy of the incident folder ``src`` at ``dst`` (a
folder it makes) changed in one way that must not change the answer (the invariant harness,
``tests/test_invariants_transforms.py``). Add one by writing a function and putting it in
``TRANSFORMS``.

``permuted_ranks`` (the ranks renumbered) and ``only_active`` (the dumps as torch writes
them with onlyActive) change the answer in a known way or only for some sets: their harness is
``tests/test_invariants_permute.py``.

Deterministic: the same ``src`` gives the same bytes (gzip's header time 0, the files'
names in sorted order); every file's modification time is kept unless the transform is about
times.
"""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import json
import lzma
import os
import pickle
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "COMPRESSIONS",
    "PREFIX",
    "SKEWS",
    "TRANSFORMS",
    "Transform",
    "bz2_each",
    "gzip_each",
    "has_zstandard",
    "only_active",
    "permuted_ranks",
    "reversed_ranks",
    "scrambled_times",
    "skewed_ahead",
    "skewed_behind",
    "two_hosts_skewed",
    "under_prefix",
    "uploaded",
    "xz_each",
    "zst_each",
]

Transform = Callable[[Path, Path], None]
# Where an upload to object storage puts one node's files (a job, its attempt, the node).
PREFIX = "job-7f3a/attempt-0/node-0"


def _files(src: Path) -> list[Path]:
    """Every file under ``src``, in sorted path order (hidden ones too: a copy is whole)."""
    return sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink())


# A file already compressed is copied as it is (as ``gzip -r`` leaves ``x.gz``).
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".tgz", ".zip")


def _each(src: Path, dst: Path, suffix: str, compress: Callable[[bytes], bytes]) -> None:
    """Every file of ``src`` compressed on its own to ``dst/<its path><suffix>``, with its
    modification time (one compressed already: copied)."""
    for path in _files(src):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.name.lower().endswith(_COMPRESSED):
            shutil.copy2(path, out)
            continue
        target = out.with_name(out.name + suffix)
        target.write_bytes(compress(path.read_bytes()))
        info = path.stat()
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def gzip_each(src: Path, dst: Path) -> None:
    """Every file gzipped on its own (``rank_1.gz``, ``train.log.gz``), header time 0."""
    _each(src, dst, ".gz", lambda data: gzip.compress(data, mtime=0))


def bz2_each(src: Path, dst: Path) -> None:
    """Every file compressed with bzip2 on its own (``rank_1.bz2``)."""
    _each(src, dst, ".bz2", bz2.compress)


def xz_each(src: Path, dst: Path) -> None:
    """Every file compressed with xz on its own (``rank_1.xz``)."""
    _each(src, dst, ".xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ))


def has_zstandard() -> bool:
    return importlib.util.find_spec("zstandard") is not None


def zst_each(src: Path, dst: Path) -> None:
    """Every file compressed with zstd on its own (``rank_1.zst``; needs ``zstandard``)."""
    import zstandard  # type: ignore[import-not-found,unused-ignore]

    compressor = zstandard.ZstdCompressor(level=3)
    _each(src, dst, ".zst", compressor.compress)


def under_prefix(src: Path, dst: Path) -> None:
    """The whole set under an object-storage style prefix (``job-7f3a/attempt-0/node-0/``)."""
    shutil.copytree(src, dst / PREFIX, symlinks=True)


def uploaded(src: Path, dst: Path) -> None:
    """As an upload to object storage leaves it: every file gzipped on its own, under a
    prefix."""
    gzip_each(src, dst / PREFIX)


def scrambled_times(src: Path, dst: Path) -> None:
    """The files' times as a checkout (or a copy that did not keep them) leaves them, at their
    worst: all of them new (a year and more after the job), in reverse path order (an earlier
    snapshot's files newer than a later one's, a stale dump newer than today's); as
    ``tests/incident/test_incident_fixtures.py``'s ``checkout`` does."""
    shutil.copytree(src, dst, symlinks=True)
    files = _files(dst)
    later = max((p.stat().st_mtime for p in files), default=0.0) + 400 * 86400
    for i, path in enumerate(reversed(files)):
        os.utime(path, (later + i, later + i))


# The absolute times a dump's entry records (its host's wall clock; FORMAT.md, "Clocks").
_ENTRY_TIMES = (
    "time_created_ns",
    "time_created_us",  # (torch 2.2's)
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
)
_RANK_OF_NAME = re.compile(r"(\d{1,7})(?:\.json|\.pkl|\.pickle)?$")


def _read_doc(data: bytes) -> tuple[Any, str] | None:
    """A dump's or a recorder sidecar's document and its format ("pickle" or "json"), or
    None for any other file (a log, an archive, a compressed file)."""
    try:
        if data[:1] == b"\x80":
            return pickle.loads(data), "pickle"  # (this repository's fixtures: plain data)
        return json.loads(data), "json"
    except Exception:
        return None


def _shifted(doc: Any, offset_ns: int) -> tuple[Any, int | None]:
    """A dump's or a sidecar's document with its absolute times moved by ``offset_ns`` (its
    host's clock ahead or behind), and its rank where it says or None (a dump: from its
    name); ``(None, None)`` for a document that is neither."""
    entries = doc.get("entries") if isinstance(doc, dict) else doc
    if isinstance(doc, dict) and doc.get("format") == "frtrace-stacks":
        if isinstance(doc.get("dumped_at_ns"), int):
            doc["dumped_at_ns"] += offset_ns
        return doc, doc.get("rank") if isinstance(doc.get("rank"), int) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None, None
    for entry in entries:
        for key in _ENTRY_TIMES:
            if isinstance(entry.get(key), int) and entry[key]:  # (JSON's 0: never observed)
                scale = 1_000 if key.endswith("_us") else 1
                entry[key] += offset_ns // scale
    return doc, None


def two_hosts_skewed(src: Path, dst: Path, offset_s: float) -> None:
    """The job as two hosts leave it, the second's clock ``offset_s`` ahead (behind where
    negative) of the first's (no NTP): the upper half of the ranks' dumps (ranks from
    ``world // 2``, the world the highest rank's) and recorder sidecars moved into a
    ``host-b/`` folder beside where they were, every absolute time in them moved by
    ``offset_s``; the lower half's into ``host-a/``, as they are. Other files (logs,
    manifests, compressed files) stay as they are; every file keeps its modification time."""
    offset_ns = round(offset_s * 1e9)
    shutil.copytree(src, dst, symlinks=True)
    found: list[tuple[Path, Any, str, int]] = []
    for path in _files(dst):
        read = _read_doc(path.read_bytes())
        if read is None:
            continue
        doc, rank = _shifted(read[0], 0)
        m = _RANK_OF_NAME.search(path.name)
        rank = rank if rank is not None else (int(m[1]) if m and doc is not None else None)
        if doc is not None and rank is not None:
            found.append((path, read[0], read[1], rank))
    world = max((rank for *_, rank in found), default=0) + 1
    for path, doc, kind, rank in found:
        upper = world > 1 and rank >= world // 2
        if upper:
            _shifted(doc, offset_ns)
        info = path.stat()
        target = path.parent / ("host-b" if upper else "host-a") / path.name
        target.parent.mkdir(exist_ok=True)
        if upper:
            data = pickle.dumps(doc, protocol=2) if kind == "pickle" else json.dumps(doc).encode()
            target.write_bytes(data)
            path.unlink()
        else:
            path.rename(target)
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def skewed_ahead(src: Path, dst: Path) -> None:
    """Two hosts, the second's clock 7 minutes ahead (``two_hosts_skewed``)."""
    two_hosts_skewed(src, dst, 420)


def skewed_behind(src: Path, dst: Path) -> None:
    """Two hosts, the second's clock 7 minutes behind (``two_hosts_skewed``)."""
    two_hosts_skewed(src, dst, -420)


# ---- files rewritten one by one, through the compression they came in ----------------------

_PACK: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    ".gz": (gzip.decompress, lambda data: gzip.compress(data, mtime=0)),
    ".bz2": (bz2.decompress, bz2.compress),
    ".xz": (lzma.decompress, lambda data: lzma.compress(data, format=lzma.FORMAT_XZ)),
}
# A file's new name and bytes from its folder, name and bytes (compressed: those inside).
Rewrite = Callable[[Path, str, bytes], tuple[str, bytes]]


def _through_compression(
    name: str, data: bytes, folder: Path, change: Rewrite
) -> tuple[str, bytes]:
    """``change`` applied to what a file compressed on its own holds (``rank_1.gz``: the
    dump inside, named ``rank_1``), packed again the same way; any other file as it is."""
    suffix = next((s for s in (*_PACK, ".zst") if name.lower().endswith(s)), None)
    if suffix is None or (suffix == ".zst" and not has_zstandard()):
        return change(folder, name, data)
    if suffix == ".zst":
        import zstandard  # type: ignore[import-not-found,unused-ignore]

        unpack: Callable[[bytes], bytes] = zstandard.ZstdDecompressor().decompressobj().decompress
        pack: Callable[[bytes], bytes] = zstandard.ZstdCompressor(level=3).compress
    else:
        unpack, pack = _PACK[suffix]
    inner, changed = change(folder, name[: -len(suffix)], unpack(data))
    return inner + name[-len(suffix) :], pack(changed)


def _rewrite_each(src: Path, dst: Path, change: Rewrite, folders: Callable[[Path], Path]) -> None:
    """Every file of ``src`` rewritten by ``change`` (given its folder) to
    ``dst/<folders(its folder)>/<its new name>``, with its times."""
    for path in _files(src):
        rel = path.relative_to(src)
        name, data = _through_compression(path.name, path.read_bytes(), path.parent, change)
        out = dst / folders(rel.parent) / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            raise ValueError(f"{path}: two files rewritten to {out}")
        out.write_bytes(data)
        info = path.stat()
        os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))


def _write_doc(doc: Any, kind: str) -> bytes:
    return pickle.dumps(doc, protocol=2) if kind == "pickle" else json.dumps(doc).encode()


def _entries(doc: Any) -> list[Any] | None:
    """A dump's entries (torch 2.2's dump is the list itself), or None: not a dump."""
    if isinstance(doc, list):
        return doc if all(isinstance(e, dict) for e in doc) else None
    if not isinstance(doc, dict) or doc.get("format") in ("frtrace-stacks", "frtrace-collect"):
        return None
    if "entries" in doc or "pg_config" in doc or "pg_status" in doc:
        entries = doc.get("entries", [])
        return entries if isinstance(entries, list) else None
    return None


# ---- onlyActive ---------------------------------------------------------------------------


def _active(entry: Any) -> bool:
    """torch keeps an entry in an onlyActive dump unless its completion was discovered
    (``time_discovered_completed_``: None in a pickle, 0 in JSON; "completed" is the state
    torch writes from the same field)."""
    if not isinstance(entry, dict):
        return True
    if "time_discovered_completed_ns" in entry:
        return not entry["time_discovered_completed_ns"]
    return entry.get("state") != "completed"


def _only_active_file(folder: Path, name: str, data: bytes) -> tuple[str, bytes]:
    read = _read_doc(data)
    entries = None if read is None else _entries(read[0])
    if read is None or entries is None:
        return name, data
    doc, kind = read
    version = str(doc.get("version", "")) if isinstance(doc, dict) else ""
    if not re.match(r"[2-9]\.", version):  # torch 2.2 and 2.3 (format 1.x) had no onlyActive
        return name, data
    kept = [e for e in entries if _active(e)]
    if kept or kind == "pickle":
        doc["entries"] = kept
    else:  # torch's JSON leaves the key out where no entry is left
        doc.pop("entries", None)
    return name, _write_doc(doc, kind)


def only_active(src: Path, dst: Path) -> None:
    """Every dump as torch writes it with ``onlyActive=True`` (torch 2.13's
    ``FlightRecorderDetail.hpp``, ``getCollectiveTrace`` and ``dump_json``: an entry whose
    completion was discovered is skipped; ``pg_config``, ``pg_status``, the version and the
    frames of the entries kept are as they were; JSON leaves ``entries`` out when it is
    empty, a pickle keeps ``[]``). NVIDIA's collectors and the debug server's NCCL pages dump
    this way. A Gloo dump is unchanged (its entries never complete: FORMAT.md section 8).
    Every other file is copied as it is; a file compressed on its own is unpacked, changed
    and packed again."""
    _rewrite_each(src, dst, _only_active_file, lambda folder: folder)


# ---- ranks renumbered ---------------------------------------------------------------------


def reversed_ranks(world: int, rotate: int = 0) -> list[int]:
    """``r -> (world - 1 - r + rotate) mod world``: the ranks reversed, then rotated (a
    reflection of the ring of ranks: neighbours stay neighbours). ``rotate=1`` keeps rank 0
    where it is (``r -> -r mod world``)."""
    return [(world - 1 - r + rotate) % world for r in range(world)]


# In a file's name: "rank_3", "rank-3", "rank.3", "rank3" between separators.
_NAME_RANK = re.compile(r"(?i)(?<![a-z])(rank[-_.]?)(\d{1,7})(?=$|[-_.])")
_TRAILING = re.compile(r"(\d{1,7})((?:\.json|\.pkl|\.pickle)?)$")
_ATTEMPT_DIR = re.compile(r"^attempt_\d{1,6}$")
_MPI_RANK_DIR = re.compile(r"(?i)^(rank[._-]?)(\d{1,7})$")
_POD_NAME = re.compile(r"^(?P<job>.+)-(?P<role>master|worker)-(?P<i>\d{1,6})(?P<ext>\.log|\.txt)?$")
# In text (logs, error files, stack samples, torch's messages): a --tee or c10d prefix
# ("[default3]:", "[rank3]:"); "rank 3", "Rank 3", "Ranks 2, 3", "rank=3", "rank: 3",
# "local_rank: 3", "world_rank=3", "rank_3" (a file's name), never node_rank, group_rank,
# role_rank (a node's number); a torchrun log folder "attempt_0/3/".
_TEXT_RANK = re.compile(
    r"(?P<tag>\[[A-Za-z_]{1,40}?)(?P<t>\d{1,7})(?=\]:)"
    r"|(?P<word>(?<![A-Za-z])(?<!node_)(?<!group_)(?<!role_)(?i:ranks?)"
    r"(?:[ \t]*[:=][ \t]*|[ \t]+|[-_.]))(?P<n>\d{1,7}(?:,[ \t]*\d{1,7})*)(?!\d|\.\d)"
    r"|(?P<att>attempt_\d{1,6}/)(?P<a>\d{1,7})(?=/)"
)
_NUMBER = re.compile(r"\d+")
_ARCHIVE = re.compile(r"\.(?:tar(?:\.\w+)?|tgz|zip)$")
_P2P_NAME = re.compile(r"(?P<op>send|recv) (?P<a>\d{1,7}|\?)(?P<dir>->|<-)(?P<b>\d{1,7}|\?)$")
_RANK_KEYS = frozenset({"rank", "local_rank", "global_rank", "world_rank"})


class _Renumber:
    """One permutation of the ranks, applied to names, documents and text."""

    def __init__(self, perm: Sequence[int]) -> None:
        if sorted(perm) != list(range(len(perm))):
            raise ValueError(f"not a permutation of 0..{len(perm) - 1}: {perm}")
        self.perm = list(perm)

    def rank(self, r: int) -> int:
        if not 0 <= r < len(self.perm):
            raise ValueError(f"rank {r} is outside the permuted world of {len(self.perm)}")
        return self.perm[r]

    def _digits(self, text: str) -> str:
        return _NUMBER.sub(lambda m: str(self.rank(int(m[0]))), text)

    def text(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            if m["tag"] is not None:
                return m["tag"] + str(self.rank(int(m["t"])))
            if m["word"] is not None:
                return m["word"] + self._digits(m["n"])
            return m["att"] + str(self.rank(int(m["a"])))

        return _TEXT_RANK.sub(one, text)

    def folder(self, folder: Path) -> Path:
        """torchrun's ``attempt_N/<local rank>/`` (one node: its local ranks are the job's)
        and Open MPI's ``rank.3/``, renumbered."""
        parts = list(folder.parts)
        for i, part in enumerate(parts):
            if part.isdigit() and i > 0 and _ATTEMPT_DIR.match(parts[i - 1]):
                parts[i] = str(self.rank(int(part)))
            elif (m := _MPI_RANK_DIR.match(part)) is not None:
                parts[i] = m[1] + str(self.rank(int(m[2])))
        return Path(*parts)

    def name(self, name: str, is_dump: bool, pods: dict[str, bool]) -> str:
        """A file's new name: the rank its name carries renumbered (a dump's trailing number
        is its rank; a PyTorchJob pod's ``master-0`` is rank 0, ``worker-<i>`` rank i + 1
        where the folder has a master)."""
        if (m := _POD_NAME.match(name)) is not None and m["job"] in pods:
            master = pods[m["job"]]
            was = 0 if m["role"] == "master" else int(m["i"]) + int(master)
            now = self.rank(was)
            role, i = ("master", 0) if master and now == 0 else ("worker", now - int(master))
            return f"{m['job']}-{role}-{i}{m['ext'] or ''}"
        if _NAME_RANK.search(name):
            return _NAME_RANK.sub(lambda m: m[1] + str(self.rank(int(m[2]))), name, count=1)
        if is_dump:
            return _TRAILING.sub(lambda m: str(self.rank(int(m[1]))) + m[2], name)
        return name

    def members(self, text: str) -> tuple[list[int], list[int]] | None:
        """A group's global ranks as ``pg_config`` writes them ("[0, 1]"), and the group's
        ranks renumbered, sorted as torch's ``new_group`` sorts them."""
        try:
            old = json.loads(text)
        except ValueError:
            return None
        if not isinstance(old, list) or not all(isinstance(r, int) for r in old):
            return None
        return old, sorted(self.rank(r) for r in old)

    def dump(self, doc: Any, entries: list[Any], where: str) -> None:
        """A dump renumbered in place: its groups' global ranks (``pg_config``, both shapes),
        each p2p entry's group-local ranks (``send 0->1``: the index in the group's sorted
        ranks, worked out again), a ``rank`` field where there is one."""
        groups: dict[object, tuple[list[int], list[int]]] = {}
        config = doc.get("pg_config") if isinstance(doc, dict) else None
        for key, group in (config or {}).items():
            if isinstance(group, dict) and isinstance(group.get("ranks"), str):  # 2.x
                found = self.members(group["ranks"])
                if found is not None:
                    group["ranks"] = "[" + ", ".join(map(str, found[1])) + "]"
                    groups[str(key)] = found
            elif isinstance(group, list):  # 1.x: pg_id -> ranks
                found = self.members(json.dumps(group))
                if found is not None:
                    config[key] = found[1]
                    groups[("id", int(key))] = found
        if isinstance(doc, dict) and isinstance(doc.get("rank"), int):
            doc["rank"] = self.rank(doc["rank"])
        for entry in entries:
            name = entry.get("profiling_name")
            m = _P2P_NAME.search(name) if isinstance(name, str) else None
            if m is None or m["a"] == m["b"] == "?":
                continue
            pg = entry.get("process_group")
            key = str(pg[0]) if isinstance(pg, list | tuple) and pg else ("id", entry.get("pg_id"))
            if key not in groups or not groups[key][0]:
                raise ValueError(f"{where}: {name!r} of group {key}: its members are unknown")
            old, new = groups[key]

            def local(n: str, old: list[int] = old, new: list[int] = new) -> str:
                return n if n == "?" else str(new.index(self.rank(old[int(n)])))

            renamed = f"{m['op']} {local(m['a'])}{m['dir']}{local(m['b'])}"
            entry["profiling_name"] = name[: m.start()] + renamed

    def plain(self, value: Any) -> Any:
        """Any other document (a stacks sidecar, collect's manifest, an error file): the
        ranks of its rank fields renumbered, its text as text."""
        if isinstance(value, dict):
            return {
                k: self.rank(v) if k in _RANK_KEYS and type(v) is int else self.plain(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.plain(v) for v in value]
        return self.text(value) if isinstance(value, str) else value

    def file(self, name: str, data: bytes, pods: dict[str, bool]) -> tuple[str, bytes]:
        if _ARCHIVE.search(name.lower()):
            raise ValueError(f"{name}: an archive's members are not renumbered")
        read = _read_doc(data)
        if read is None or not isinstance(read[0], dict | list):
            if data[:1] == b"\x80":  # a pickle cut short (a damaged dump): as it is
                return self.name(name, _TRAILING.search(name) is not None, pods), data
            text = data.decode("utf-8", "surrogateescape")
            return self.name(name, False, pods), self.text(text).encode("utf-8", "surrogateescape")
        doc, kind = read
        entries = _entries(doc)
        if entries is None:
            return self.name(name, False, pods), _write_doc(self.plain(doc), kind)
        self.dump(doc, entries, name)
        return self.name(name, True, pods), _write_doc(doc, kind)


def _pods(src: Path) -> dict[Path, dict[str, bool]]:
    """Each folder's PyTorchJob pods' logs: job -> whether a ``master`` pod is among them."""
    out: dict[Path, dict[str, bool]] = {}
    for path in _files(src):
        name = path.name
        for suffix in (*_PACK, ".zst"):
            name = name.removesuffix(suffix)
        if (m := _POD_NAME.match(name)) is not None:
            jobs = out.setdefault(path.parent, {})
            jobs[m["job"]] = jobs.get(m["job"], False) or m["role"] == "master"
    return out


def permuted_ranks(src: Path, dst: Path, perm: Sequence[int]) -> None:
    """The job with every rank ``r`` called ``perm[r]``, in every file: dumps (their names,
    ``pg_config``'s member lists, p2p entries' group-local ranks, a ``rank`` field), stack
    sidecars and collect's manifests (rank fields, file names), stack samples and logs (by
    name: ``stacks_rank_3.json``, ``pyspy_rank_3.txt``, a PyTorchJob's pods, torchrun's
    ``attempt_N/<local rank>/``; in their text: ``[default3]:``/``[rank3]:`` prefixes,
    ``local_rank: 3``, torchrun's ``rank : 3``, Ray's ``world_rank=3``, torch's messages that
    name ranks: ``[Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier``...), error files.
    Times, pids, hosts, ports and every file's modification time are kept: each process is
    the same, only its number changed. Not renumbered (no committed set has them; a rank
    outside ``perm`` raises): srun's ``3: `` and Open MPI's ``[job,3]`` line prefixes, SLURM's
    ``%t`` and Indexed Job pods' names, rank ranges (``0-3``), an archive's members.

    Which permutations are sound (a relabelled job that torch could have written):

    - **Global ranks**: any permutation renames them, and every group's global member list
      is renumbered and sorted (``new_group`` and DeviceMesh sort a group's ranks).
    - **Group-local ranks** (p2p entries' ``send 0->1``; the world group's local ranks are
      global ones): a member's local rank is its index in the sorted member list, so it is
      worked out again from the group's ``pg_config`` ranks, which makes any permutation
      sound for a group the dump lists. A group whose members the dump does not give
      (torch 2.2: no ``pg_config``; Gloo: ``pg_config`` holds one group or ``[]``; hook
      recorders' empty lists) is sound only under a permutation monotone on its members
      (its local ranks unchanged if increasing, reversed if decreasing, which needs its
      size): the transform raises where such a group's entry carries local ranks (none of
      the committed sets has one: Gloo records no p2p op, torch 2.2 no peer).
    - **Rank 0's roles**: ``monitored_barrier``'s coordinator, the TCPStore's host (the peer
      whose leaving closes everyone's connection), ``[Rank 0]:`` in torch's messages are
      rank 0 of the job: a permutation that moves rank 0 gives evidence torch cannot write.
      ``reversed_ranks(world, 1)`` (``r -> -r mod world``) keeps rank 0 and is sound for
      every set; ``reversed_ranks(world)`` only for a set without such evidence.
    - **The ring**: Gloo's ring algorithms order the ranks; a reflection or rotation of the
      ring (``reversed_ranks``) keeps every rank's neighbours, so a ring neighbour's abort
      stays a neighbour's.
    - **Local ranks of torchrun** (log folders, ``[default3]:``, ``local_rank: 3``) are taken
      as the job's ranks: sound for a job on one node, as every committed set is.
    """
    renumber = _Renumber(perm)
    pods = _pods(src)

    def change(folder: Path, name: str, data: bytes) -> tuple[str, bytes]:
        return renumber.file(name, data, pods.get(folder, {}))

    _rewrite_each(src, dst, change, renumber.folder)


# The compressions, each on its own (zstd where the zstandard package is installed).
COMPRESSIONS: dict[str, Transform] = {
    "gzip": gzip_each,
    "bz2": bz2_each,
    "xz": xz_each,
    **({"zst": zst_each} if has_zstandard() else {}),
}

# Every transform the harness runs, by name.
TRANSFORMS: dict[str, Transform] = {
    **COMPRESSIONS,
    "prefix": under_prefix,
    "uploaded": uploaded,
    "times": scrambled_times,
}

# Two hosts' clocks apart (``tests/test_invariants_skew.py``: not every rule holds yet).
SKEWS: dict[str, Transform] = {"skew+420": skewed_ahead, "skew-420": skewed_behind}
