"""Read one dump file into columns: the only place that unpickles, and that knows key names.

``parse_dump`` is a pure function from one file to a ``ParsedDump`` (an Arrow record batch of
its entries plus small side tables). It runs in worker processes for large sets, and is the
seam where a distributed engine (Ray, Dask) could take over: it needs only the file.

Every torch format is read by the fields present, not by the version string:

- torch 2.2: a bare list of entries with ``seq_id`` and ``time_created_us``;
- FR 1.x (torch 2.3): a dict; ``pg_config`` is ``{pg_id: [ranks]}``; ``seq_id``;
- FR 2.x (torch 2.4+): ``process_group``, ``collective_seq_id``/``p2p_seq_id``, dtypes;
  ``pg_status`` and ``timeout_ms`` (2.4), ``nccl_version`` then ``comm_lib_version``,
  ``thread_id``/``thread_name``; optional ``duration_ms`` and ``frames``.

JSON dumps are normalised to the pickle model: 0 for an unobserved time becomes null, strings
in ``pg_status`` become ints, a missing ``entries`` key is an empty buffer.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace import schema
from frtrace.discover import Candidate
from frtrace.errors import DumpFormatError, DumpTooLargeError, UnsafePickleError

__all__ = [
    "KNOWN_VERSION",
    "MAX_DUMP_BYTES",
    "DumpMeta",
    "ParsedDump",
    "parse_dump",
    "read_payload",
    "safe_loads",
]

# The newest Flight Recorder format version this loader knows (torch 2.9 - 2.15 write "2.10").
KNOWN_VERSION = (2, 10)
# A 2,000-entry dump with 20-frame stacks is a few MB; 1 GiB is far beyond any real buffer
# and refuses junk (a core file, a checkpoint) before it is read into memory.
MAX_DUMP_BYTES = 1 << 30
# At most this many per-field problems are spelled out per file; the rest are counted.
_MAX_DETAILS = 3

# Arrow types whose columns numpy can build in one C loop when no value is missing.
_NUMPY_TYPES = {pa.int64(): np.int64, pa.float64(): np.float64}

Frame = tuple[str, str, int]
Stack = tuple[Frame, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpMeta:
    """What one dump file was, beside its entries."""

    rank: int
    path: str
    size_bytes: int
    encoding: str
    format_version: str | None
    layout: str
    backend: str | None
    comm_lib_version: str | None
    entry_count: int
    record_id_min: int | None
    record_id_max: int | None
    wrapped: bool | None
    has_stacks: bool
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedDump:
    """One file, read: entries as an Arrow batch (stack ids local to this file) and side rows."""

    meta: DumpMeta
    entries: pa.RecordBatch  # schema.ENTRIES
    stacks: tuple[Stack, ...]  # local stack id -> frames
    groups: tuple[dict[str, Any], ...]  # rows of schema.GROUPS
    pg_status: tuple[dict[str, Any], ...]  # rows of schema.PG_STATUS


# --------------------------------------------------------------------------------------------
# Reading bytes safely


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: any global (class, function) is refused.

    Flight Recorder pickles hold dicts, lists, tuples, str, int, float, bool and None; they use
    no GLOBAL/STACK_GLOBAL/INST/OBJ/EXT opcodes. Every way a pickle can reach a callable goes
    through ``find_class`` (or ``persistent_load``), so refusing here means nothing in the file
    can be called, and REDUCE/BUILD have nothing to act on.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickleError(f"the pickle asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("the pickle asks for a persistent object")


def safe_loads(data: bytes) -> Any:
    """Unpickle plain data; raise UnsafePickleError for anything that could run code."""
    # A BufferedReader offers peek(), which lets the C unpickler prefetch: 3x faster than
    # reading a bare BytesIO opcode by opcode.
    stream = io.BufferedReader(io.BytesIO(data), buffer_size=1 << 20)
    return _PlainDataUnpickler(stream).load()


def read_payload(path: Path, size_bytes: int) -> tuple[Any, str]:
    """Read and decode one file: (decoded object, "pickle" | "json"), or DumpFormatError."""
    if size_bytes > MAX_DUMP_BYTES:
        raise DumpTooLargeError(
            f"{path}: refused: {size_bytes / 2**20:.0f} MiB is larger than any Flight Recorder "
            f"dump ({MAX_DUMP_BYTES >> 20} MiB limit); check this is a dump and not another file."
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DumpFormatError(
            f"{path}: cannot read: {exc.strerror}; check the file's permissions."
        ) from exc
    if not data:
        raise DumpFormatError(
            f"{path}: empty file: the rank was probably killed while writing its dump; "
            "the other ranks are analysed without it."
        )
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data), "json"
        except (ValueError, RecursionError) as exc:
            raise DumpFormatError(
                f"{path}: not valid JSON ({_short(exc)}): truncated or corrupt; "
                "re-dump the rank or analyse without it."
            ) from exc
    try:
        return safe_loads(data), "pickle"
    except UnsafePickleError as exc:
        raise UnsafePickleError(
            f"{path}: refused to load: {exc}; Flight Recorder dumps contain only plain data. "
            "Do not trust this file; take the dump again from the job."
        ) from None
    except Exception as exc:  # any decoding failure of a damaged pickle
        kind = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise DumpFormatError(
            f"{path}: not a readable Flight Recorder dump: {kind} pickle "
            f"({type(exc).__name__}: {_short(exc)}); re-dump the rank or analyse without it."
        ) from exc


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------------------------
# From the decoded object to columns


_P2P_META = re.compile(r"^\s*(?P<a>\d+|\?)\s*(?P<arrow>->|<-)\s*(?P<b>\d+|\?)\s*$")


def split_profiling_name(name: str) -> tuple[str | None, str, int | None, int | None]:
    """``"nccl:send 1->0"`` -> (backend, op, src_local, dst_local); unknown names kept as-is."""
    backend, colon, rest = name.partition(":")
    if not colon:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    src = dst = None
    match = _P2P_META.match(meta) if meta else None
    if match is not None:
        a = None if match["a"] == "?" else int(match["a"])
        b = None if match["b"] == "?" else int(match["b"])
        src, dst = (a, b) if match["arrow"] == "->" else (b, a)
    return (backend or None), (op or name), src, dst


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _parse_rank_list(value: Any) -> list[int] | None:
    """``"[0, 1, 2]"`` (2.x), ``[0, 1, 2]`` (1.x): member ranks without eval."""
    if isinstance(value, list | tuple):
        items = [_int_or_none(v) for v in value]
    elif isinstance(value, str):
        body = value.strip()
        if not (body.startswith("[") and body.endswith("]")):
            return None
        inner = body[1:-1].strip()
        items = [_int_or_none(v) for v in inner.split(",")] if inner else []
    else:
        return None
    if any(i is None or i < 0 for i in items):
        return None
    return [i for i in items if i is not None]


class _Columns:
    """Builds the ENTRIES columns of one file; invalid values become null and are reported."""

    def __init__(self, path: Path, rank: int, entries: list[dict[str, Any]]) -> None:
        self.path = path
        self.rank = rank
        self.entries = entries
        self.problems: list[str] = []

    def take(self, key: str, type_: pa.DataType, alt: str | None = None) -> pa.Array:
        """Column ``key`` (or ``alt`` where ``key`` is absent), validated by Arrow."""
        if alt is None:
            values = [e.get(key) for e in self.entries]
        else:
            values = [e[key] if key in e else e.get(alt) for e in self.entries]
        return self.convert(key, values, type_)

    def convert(self, key: str, values: list[Any], type_: pa.DataType) -> pa.Array:
        fast = _NUMPY_TYPES.get(type_)
        # the common case: every value present and a number (numpy reads None as NaN: skip)
        if fast is not None and None not in values:
            try:
                return pa.array(np.fromiter(values, dtype=fast, count=len(values)))
            except (TypeError, ValueError, OverflowError):
                pass
        if pa.types.is_list(type_):
            return self.convert_repeated(key, values, type_)[0].cast(type_)
        if type_ == schema.TEXT:
            return _text(key, values, self)
        try:
            return pa.array(values, type=type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            pass
        return self.convert_slowly(key, values, type_)

    def take_repeated(self, key: str, type_: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        """A list column and its per-entry fingerprints (0 where missing)."""
        return self.convert_repeated(key, [e.get(key) for e in self.entries], type_)

    def convert_repeated(
        self, key: str, values: list[Any], type_: pa.DataType
    ) -> tuple[pa.Array, np.ndarray]:
        """Sizes and dtypes repeat a lot: convert each distinct value once, then gather.

        Arrow converts nested Python lists slowly (~10 us per entry); distinct values are few.
        Returns the column and a fingerprint per entry: CRC-32 of the value's repr, equal
        exactly when the values are equal, deterministic across processes.
        """
        index: dict[Any, int] = {}
        distinct: list[Any] = []
        picks: list[int | None] = []
        nested = pa.types.is_list(type_.value_type)
        for value in values:
            if value is None:
                picks.append(None)
                continue
            twin: Any
            try:  # a hashable twin of the value; repr() is the slow fallback
                twin = tuple(map(tuple, value)) if nested else tuple(value)
            except TypeError:
                twin = repr(value)
            at = index.get(twin)
            if at is None:
                at = index[twin] = len(distinct)
                distinct.append(value)
            picks.append(at)
        crcs = np.fromiter(
            (zlib.crc32(repr(v).encode()) for v in distinct), dtype=np.uint32, count=len(distinct)
        )
        valid = np.fromiter((p is not None for p in picks), dtype=bool, count=len(picks))
        where = np.fromiter((p or 0 for p in picks), dtype=np.int64, count=len(picks))
        sig = np.where(valid, crcs[where] if len(crcs) else 0, 0).astype(np.uint32)
        indices = pa.array(picks, type=pa.int32())
        try:
            table = pa.array(distinct, type=type_)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            plain = self.convert_slowly(key, values, type_)
            return plain.dictionary_encode(), sig
        return pa.DictionaryArray.from_arrays(indices, table), sig

    def convert_slowly(self, key: str, values: list[Any], type_: pa.DataType) -> pa.Array:
        """Value by value: the bad ones become null and are reported."""
        bad: list[int] = []
        fixed: list[Any] = []
        for i, value in enumerate(values):
            try:
                pa.array([value], type=type_)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
                bad.append(i)
                fixed.append(None)
            else:
                fixed.append(value)
        shown = ", ".join(f"#{i} ({type(values[i]).__name__})" for i in bad[:_MAX_DETAILS])
        more = f" and {len(bad) - _MAX_DETAILS} more" if len(bad) > _MAX_DETAILS else ""
        self.problems.append(
            f"field {key!r} has values of the wrong type in entries {shown}{more}; "
            "they are treated as unknown"
        )
        return pa.array(fixed, type=type_)


def _entries_batch(
    path: Path, rank: int, entries: list[dict[str, Any]], from_json: bool
) -> tuple[pa.RecordBatch, tuple[Stack, ...], list[str]]:
    cols = _Columns(path, rank, entries)
    n = len(entries)

    names = [e.get("profiling_name") for e in entries]
    split_cache: dict[str, tuple[str | None, str, int | None, int | None]] = {}
    backend: list[str | None] = []
    op: list[str | None] = []
    src: list[int | None] = []
    dst: list[int | None] = []
    bad_names = 0
    for name in names:
        if not isinstance(name, str):
            bad_names += 1
            backend.append(None)
            op.append(None)
            src.append(None)
            dst.append(None)
            continue
        parts = split_cache.get(name)
        if parts is None:
            parts = split_cache[name] = split_profiling_name(name)
        backend.append(parts[0])
        op.append(parts[1])
        src.append(parts[2])
        dst.append(parts[3])
    if bad_names:
        cols.problems.append(f"{bad_names} entries have no profiling_name; their op is unknown")

    groups = [e.get("process_group") for e in entries]
    group_name: list[str | None] = []
    group_desc: list[str | None] = []
    pg_ids = cols.take("pg_id", pa.int64())
    pg_id_list = pg_ids.to_pylist()
    for grp, pg_id in zip(groups, pg_id_list, strict=True):
        if isinstance(grp, list | tuple) and len(grp) >= 1:
            group_name.append(str(grp[0]))
            group_desc.append(str(grp[1]) if len(grp) > 1 else None)
        else:  # before torch 2.4 only the per-process pg_id identifies the group
            group_name.append(None if pg_id is None else str(pg_id))
            group_desc.append(None)

    is_p2p_raw = [e.get("is_p2p") for e in entries]
    is_p2p = [
        v if isinstance(v, bool) else (o in ("send", "recv"))
        for v, o in zip(is_p2p_raw, op, strict=True)
    ]

    if n and "time_created_ns" not in entries[0] and "time_created_us" in entries[0]:
        created = [_us_to_ns(e.get("time_created_us")) for e in entries]
    else:
        created = [e.get("time_created_ns") for e in entries]

    started = [e.get("time_discovered_started_ns") for e in entries]
    completed = [e.get("time_discovered_completed_ns") for e in entries]
    if from_json:  # JSON writes 0 for "not observed"
        started = [None if v == 0 else v for v in started]
        completed = [None if v == 0 else v for v in completed]

    stack_ids, stacks = _intern_stacks(entries, cols.problems)
    in_sizes, in_sig = cols.take_repeated("input_sizes", schema.SIZES)
    out_sizes, out_sig = cols.take_repeated("output_sizes", schema.SIZES)
    in_dtypes, in_dt_sig = cols.take_repeated("input_dtypes", schema.DTYPES)
    out_dtypes, out_dt_sig = cols.take_repeated("output_dtypes", schema.DTYPES)

    arrays = [
        pa.array([rank] * n, type=pa.int32()),
        pa.array(range(n), type=pa.int32()),
        cols.take("record_id", pa.int64()),
        pg_ids,
        _text("group_name", group_name),
        _text("group_desc", group_desc),
        cols.take("collective_seq_id", pa.int64(), alt="seq_id"),
        cols.take("p2p_seq_id", pa.int64()),
        cols.take("op_id", pa.int64()),
        _text("profiling_name", names),
        _text("backend", backend),
        _text("op", op),
        pa.array(is_p2p, type=pa.bool_()),
        pa.array(src, type=pa.int32()),
        pa.array(dst, type=pa.int32()),
        in_sizes,
        out_sizes,
        in_dtypes,
        out_dtypes,
        cols.take("state", schema.TEXT),
        cols.convert("time_created_ns", created, pa.int64()),
        cols.convert("time_discovered_started_ns", started, pa.int64()),
        cols.convert("time_discovered_completed_ns", completed, pa.int64()),
        cols.take("duration_ms", pa.float64()),
        cols.take("retired", pa.bool_()),
        cols.take("timeout_ms", pa.int64()),
        cols.take("thread_id", schema.TEXT),
        cols.take("thread_name", schema.TEXT),
        pa.array(stack_ids, type=pa.int32()),
        _sig_array(in_sig, in_sizes),
        _sig_array(out_sig, out_sizes),
        _sig_array(in_dt_sig, in_dtypes),
        _sig_array(out_dt_sig, out_dtypes),
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema.ENTRIES)
    return batch, stacks, cols.problems


def _sig_array(sig: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.array(sig, type=pa.uint32(), mask=values.is_null().to_numpy(zero_copy_only=False))


def _text(key: str, values: list[Any], cols: _Columns | None = None) -> pa.Array:
    """A dictionary-encoded string column: each distinct string converted once."""
    index: dict[str, int] = {}
    picks: list[int | None] = []
    bad = 0
    for value in values:
        if value is None:
            picks.append(None)
        elif isinstance(value, str):
            at = index.get(value)
            if at is None:
                at = index[value] = len(index)
            picks.append(at)
        else:
            bad += 1
            picks.append(None)
    if bad and cols is not None:
        cols.problems.append(
            f"field {key!r} is not a string in {bad} entries; they are treated as unknown"
        )
    return pa.DictionaryArray.from_arrays(
        pa.array(picks, type=pa.int32()), pa.array(list(index), type=pa.string())
    )


def _us_to_ns(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000
    return value


def _intern_stacks(
    entries: list[dict[str, Any]], problems: list[str]
) -> tuple[list[int | None], tuple[Stack, ...]]:
    """Local stack id per entry; each distinct stack is converted and stored once."""
    ids: list[int | None] = []
    seen: dict[Any, int | None] = {}
    stacks: list[Stack] = []
    malformed = 0
    for e in entries:
        frames = e.get("frames")
        if not frames or not isinstance(frames, list):
            ids.append(None)
            continue
        try:  # cheap identity of a stack: its frames' values in recorded order
            key = tuple(map(tuple, map(dict.values, frames)))
            sid = seen[key]
        except KeyError:
            stack = _convert_stack(frames)
            if stack is None:
                malformed += 1
                sid = None
            else:
                sid = len(stacks)
                stacks.append(stack)
            seen[key] = sid
        except (AttributeError, TypeError):  # a frame that is not a dict, unhashable values
            malformed += 1
            sid = None
        ids.append(sid)
    if malformed:
        problems.append(f"{malformed} entries have malformed stack frames; stacks not shown")
    return ids, tuple(stacks)


def _convert_stack(frames: list[Any]) -> Stack | None:
    out: list[Frame] = []
    for f in frames:
        if not isinstance(f, dict):
            return None
        name, filename, line = f.get("name"), f.get("filename"), _int_or_none(f.get("line"))
        if not isinstance(name, str) or not isinstance(filename, str):
            return None
        out.append((name, filename, -1 if line is None else line))
    return tuple(out)


def _group_rows(rank: int, pg_config: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_config, dict):
        if pg_config is not None:
            problems.append("pg_config is not a mapping; process-group membership unknown")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_config.items():
        if isinstance(value, dict):  # 2.x: {name: {"name", "desc", "ranks": "[0, 1]"}}
            name = str(value.get("name", key))
            desc = value.get("desc")
            ranks = _parse_rank_list(value.get("ranks"))
            pg_id = None
        else:  # 1.x: {pg_id: [ranks]}
            name = str(key)
            desc = None
            ranks = _parse_rank_list(value)
            pg_id = _int_or_none(key)
        note = None
        if name == "":
            note = (
                "Gloo records every group under the name '' and keeps only the last one's "
                "ranks; membership must come from the entries"
            )
        elif ranks is None:
            note = f"unreadable ranks {value!r:.60}"
        rows.append(
            {
                "rank": rank,
                "group_name": name,
                "group_desc": desc if isinstance(desc, str) else None,
                "ranks": ranks,
                "pg_id": pg_id,
                "trusted": note is None,
                "note": note,
            }
        )
    return rows


def _pg_status_rows(rank: int, pg_status: Any, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(pg_status, dict):
        if pg_status is not None:
            problems.append("pg_status is not a mapping; ignored")
        return []
    rows: list[dict[str, Any]] = []
    for key, value in pg_status.items():
        pg_id = _int_or_none(key)
        if pg_id is None or not isinstance(value, dict):
            problems.append(f"pg_status entry {key!r:.40} is malformed; ignored")
            continue
        rows.append(
            {
                "rank": rank,
                "pg_id": pg_id,
                "last_enqueued": _int_or_none(value.get("last_enqueued_collective")),
                "last_started": _int_or_none(value.get("last_started_collective")),
                "last_completed": _int_or_none(value.get("last_completed_collective")),
            }
        )
    return rows


def _parse_version(version: Any, problems: list[str]) -> str | None:
    if version is None:
        return None
    text = str(version)
    major, _, minor = text.partition(".")
    if not (major.isdigit() and (minor.isdigit() or not minor)):
        problems.append(f"unrecognised format version {text!r:.40}; read by the fields present")
        return text
    if (int(major), int(minor or 0)) > KNOWN_VERSION:
        problems.append(
            f"format version {text} is newer than this frtrace knows "
            f"({KNOWN_VERSION[0]}.{KNOWN_VERSION[1]}); loaded best-effort, unknown fields "
            "ignored. Upgrade frtrace if the analysis looks wrong."
        )
    return text


def parse_dump(cand: Candidate) -> ParsedDump:
    """Read one candidate file. Raises DumpFormatError (one line) when it cannot be read."""
    payload, encoding = read_payload(cand.path, cand.size_bytes)
    return parse_payload(payload, encoding, cand)


def parse_payload(payload: Any, encoding: str, cand: Candidate) -> ParsedDump:
    """Turn a decoded dump (list or dict) into a ParsedDump."""
    path, rank = cand.path, cand.rank
    problems: list[str] = []
    top: dict[str, Any]
    if isinstance(payload, list):  # torch 2.2: the entries themselves
        top = {"entries": payload}
        layout = "list"
    elif isinstance(payload, dict):
        top = payload
        layout = "2.x"
    else:
        raise DumpFormatError(
            f"{path}: decoded to a {type(payload).__name__}, not a Flight Recorder dump "
            "(a dict with 'entries', or a list of entries); check this file is a dump."
        )
    if layout == "2.x" and not ({"entries", "version", "pg_config", "pg_status"} & top.keys()):
        raise DumpFormatError(
            f"{path}: a mapping without any Flight Recorder keys (entries, version, pg_config); "
            "check this file is a dump."
        )
    raw_entries = top.get("entries", [])
    if raw_entries is None:
        raw_entries = []
    if not isinstance(raw_entries, list):
        raise DumpFormatError(
            f"{path}: 'entries' is a {type(raw_entries).__name__}, not a list; the file is "
            "damaged or not a dump."
        )
    entries = [e for e in raw_entries if isinstance(e, dict)]
    if len(entries) != len(raw_entries):
        problems.append(f"{len(raw_entries) - len(entries)} entries are not mappings; skipped")
    if layout == "list" and raw_entries and not entries:
        raise DumpFormatError(f"{path}: a list, but not of Flight Recorder entries.")

    version = _parse_version(top.get("version"), problems)
    if layout == "2.x":
        first = entries[0] if entries else {}
        old = "seq_id" in first and "collective_seq_id" not in first
        pg_config = top.get("pg_config")
        old_config = isinstance(pg_config, dict) and any(
            isinstance(v, list) for v in pg_config.values()
        )
        if old or old_config or (version or "").startswith("1."):
            layout = "1.x"

    batch, stacks, entry_problems = _entries_batch(path, rank, entries, encoding == "json")
    problems.extend(entry_problems)
    groups = _group_rows(rank, top.get("pg_config"), problems)
    pg_status = _pg_status_rows(rank, top.get("pg_status"), problems)

    record_ids = [r for r in batch.column("record_id").to_pylist() if r is not None]
    lib = top.get("comm_lib_version", top.get("nccl_version"))
    backends = Counter(b for b in batch.column("backend").to_pylist() if b)
    backend = backends.most_common(1)[0][0] if backends else None
    if backend is None and lib == "":
        backend = "gloo"  # the generic recorder writes "" as Gloo's library version
    meta = DumpMeta(
        rank=rank,
        path=str(path),
        size_bytes=cand.size_bytes,
        encoding=encoding,
        format_version=version,
        layout=layout,
        backend=backend,
        comm_lib_version=str(lib) if lib is not None else None,
        entry_count=len(entries),
        record_id_min=min(record_ids) if record_ids else None,
        record_id_max=max(record_ids) if record_ids else None,
        wrapped=(min(record_ids) > 0) if record_ids else None,
        has_stacks=bool(stacks),
        problems=tuple(problems),
    )
    return ParsedDump(
        meta=meta,
        entries=batch,
        stacks=stacks,
        groups=tuple(groups),
        pg_status=tuple(pg_status),
    )


def load_all(
    candidates: Sequence[Candidate],
    on_done: Callable[[int], None] | None = None,
) -> list[ParsedDump | DumpFormatError]:
    """Parse every candidate in order (single process); errors are returned, not raised."""
    out: list[ParsedDump | DumpFormatError] = []
    for i, cand in enumerate(candidates):
        out.append(try_parse(cand))
        if on_done is not None:
            on_done(i + 1)
    return out


def try_parse(cand: Candidate) -> ParsedDump | DumpFormatError:
    """parse_dump, with any failure turned into a one-line DumpFormatError naming the file."""
    # A dump is a few hundred thousand small containers that all stay alive until the file is
    # converted: the cyclic GC would scan them again and again for nothing (they hold no
    # cycles). Off while one file is read; its previous state is restored.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_dump(cand)
    except DumpFormatError as exc:
        return exc
    except Exception as exc:  # a bug or an input we never imagined: still one line
        return DumpFormatError(
            f"{cand.path}: could not be read ({type(exc).__name__}: {_short(exc)}); "
            "the other ranks are analysed without it. Please report this file."
        )
    finally:
        if enabled:
            gc.enable()
