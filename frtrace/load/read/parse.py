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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.errors import DumpFormatError, DumpTooLargeError
from frtrace.incident.discover import Candidate
from frtrace.load.read import native
from frtrace.load.read.entries import arrow_batch, entries_columns, plain_batch
from frtrace.load.read.formats import group_rows, parse_version, pg_status_rows
from frtrace.load.read.interning import Stack
from frtrace.load.read.plain import Col, Column, PlainBatch, batch_of, to_arrow
from frtrace.load.read.unpickle import read_payload
from frtrace.load.read.values import label, short_message
from frtrace.load.read.wire import Wire, batch_from_wire, batch_to_wire, empty_batch
from frtrace.load.schema import ENTRIES, TEXT

__all__ = [
    "MAX_ENTRIES",
    "DumpMeta",
    "ParsedDump",
    "PlainDump",
    "load_all",
    "parse_dump",
    "parse_payload",
    "try_parse",
    "try_parse_plain",
]

_Read = TypeVar("_Read", "ParsedDump", "PlainDump")

# The recorder keeps TORCH_FR_BUFFER_SIZE entries (2,000 by default). A pickle can repeat one
# entry a million times in a few MB (memo references), and each entry costs ~1 KB here.
MAX_ENTRIES = 1 << 20


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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its values in order (a slots dataclass's own way looks up its fields for
        every object: a cluster's coordinator unpickles one for every rank)."""
        return (_meta, tuple(getattr(self, name) for name in _META_FIELDS))


def _meta(*values: Any) -> DumpMeta:
    return DumpMeta(**dict(zip(_META_FIELDS, values, strict=True)))


_META_FIELDS = tuple(f.name for f in fields(DumpMeta))


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedDump:
    """One file, read: entries as an Arrow batch (stack ids local to this file) and side rows."""

    meta: DumpMeta
    entries: pa.RecordBatch  # schema.ENTRIES
    stacks: tuple[Stack, ...]  # local stack id -> frames
    groups: tuple[dict[str, Any], ...]  # rows of schema.GROUPS
    pg_status: tuple[dict[str, Any], ...]  # rows of schema.PG_STATUS

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (from a worker to the parent) with its batch as plain buffers, or without
        it where it has no row."""
        rows = (self.meta, self.stacks, self.groups, self.pg_status)
        if self.entries.num_rows == 0 and self.entries.schema.equals(ENTRIES):
            return (_empty_from_wire, rows)
        wire = batch_to_wire(self.entries)
        return (_from_wire, (self.meta, *wire, self.stacks, self.groups, self.pg_status))


def _from_wire(
    meta: DumpMeta,
    schema: pa.Schema,
    columns: list[Wire],
    stacks: tuple[Stack, ...],
    groups: tuple[dict[str, Any], ...],
    pg_status: tuple[dict[str, Any], ...],
) -> ParsedDump:
    entries = batch_from_wire(schema, columns)
    return ParsedDump(meta=meta, entries=entries, stacks=stacks, groups=groups, pg_status=pg_status)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainDump:
    """One file, read for a worker's hand-over (``frtrace.load.handover.shipped``): a ``ParsedDump``
    whose entries are laid out as a writer's file holds them, with no Arrow made for them."""

    meta: DumpMeta
    entries: PlainBatch
    stacks: tuple[Stack, ...]
    groups: tuple[dict[str, Any], ...]
    pg_status: tuple[dict[str, Any], ...]

    def parsed(self) -> ParsedDump:
        """The same dump with its entries as an Arrow batch (a file not handed over)."""
        entries = batch_of(self.entries, ENTRIES)
        return ParsedDump(
            meta=self.meta,
            entries=entries,
            stacks=self.stacks,
            groups=self.groups,
            pg_status=self.pg_status,
        )


def _empty_from_wire(
    meta: DumpMeta,
    stacks: tuple[Stack, ...],
    groups: tuple[dict[str, Any], ...],
    pg_status: tuple[dict[str, Any], ...],
) -> ParsedDump:
    entries = empty_batch(ENTRIES)
    return ParsedDump(meta=meta, entries=entries, stacks=stacks, groups=groups, pg_status=pg_status)


def parse_dump(cand: Candidate) -> ParsedDump:
    """Read one candidate file. Raises DumpFormatError (one line) when it cannot be read."""
    return parse_payload(*_payload(cand), cand)


def parse_plain(cand: Candidate) -> PlainDump:
    """``parse_dump`` for a worker's hand-over: the entries as ``PlainBatch``."""
    meta, columns, stacks, groups, pg_status = _parts(*_payload(cand), cand)
    entries = plain_batch(columns)
    return PlainDump(meta=meta, entries=entries, stacks=stacks, groups=groups, pg_status=pg_status)


def _payload(cand: Candidate) -> tuple[Any, str]:
    """A candidate's decoded payload and its encoding; DumpFormatError where it was refused
    or cannot be read."""
    if cand.refused is not None:
        raise DumpFormatError(cand.refused)
    return read_payload(cand.path, cand.size_bytes, cand.data)


def parse_payload(payload: Any, encoding: str, cand: Candidate) -> ParsedDump:
    """Turn a decoded dump (list or dict) into a ParsedDump."""
    meta, columns, stacks, groups, pg_status = _parts(payload, encoding, cand)
    entries = arrow_batch(columns)
    return ParsedDump(meta=meta, entries=entries, stacks=stacks, groups=groups, pg_status=pg_status)


_RECORD_ID = ENTRIES.get_field_index("record_id")
_BACKEND = ENTRIES.get_field_index("backend")


def _parts(
    payload: Any, encoding: str, cand: Candidate
) -> tuple[
    DumpMeta, list[Col], tuple[Stack, ...], tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]
]:
    """A decoded dump's meta, entry columns, stacks, group rows and pg_status rows."""
    path, rank = cand.path, cand.rank
    problems: list[str] = []
    top, layout, entries = _entries_of(payload, path, problems)

    version = parse_version(top.get("version"), problems)
    if layout == "2.x":
        first = entries[0] if entries else {}
        old = "seq_id" in first and "collective_seq_id" not in first
        pg_config = top.get("pg_config")
        old_config = isinstance(pg_config, dict) and any(
            isinstance(v, list) for v in pg_config.values()
        )
        if old or old_config or (version or "").startswith("1."):
            layout = "1.x"

    columns, stacks, entry_problems = entries_columns(path, rank, entries, encoding == "json")
    problems.extend(entry_problems)
    groups = group_rows(rank, top.get("pg_config"), problems)
    pg_status = pg_status_rows(rank, top.get("pg_status"), problems)

    lowest, highest = _span(columns[_RECORD_ID])
    lib = top.get("comm_lib_version", top.get("nccl_version"))
    backend = _backend(columns[_BACKEND], lib)
    meta = DumpMeta(
        rank=rank,
        path=str(path),
        size_bytes=cand.size_bytes,
        encoding=encoding,
        format_version=version,
        layout=layout,
        backend=backend,
        comm_lib_version=label(lib),
        entry_count=len(entries),
        record_id_min=lowest,
        record_id_max=highest,
        wrapped=(lowest > 0) if lowest is not None else None,
        has_stacks=bool(stacks),
        problems=tuple(problems),
    )
    return meta, columns, stacks, tuple(groups), tuple(pg_status)


def _span(column: Col) -> tuple[Any, Any]:
    """The lowest and highest value of an int64 column, nulls aside (None, None: no value);
    a fast path's column read as it is (no Arrow array made for it)."""
    if isinstance(column, Column):
        values = column.values if column.valid is None else column.values[column.valid]
        return (int(values.min()), int(values.max())) if len(values) else (None, None)
    if column.null_count or not len(column):
        span = pc.min_max(column)
        return span["min"].as_py(), span["max"].as_py()
    values = column.to_numpy()
    return int(values.min()), int(values.max())


def _entries_of(
    payload: Any, path: Path, problems: list[str]
) -> tuple[dict[str, Any], str, Sequence[dict[str, Any]]]:
    """The dump's top-level mapping, its layout ("list": torch 2.2's bare entries; "2.x")
    and its entries that are mappings (the others one problem line); a payload that is no
    dump is a ``DumpFormatError``."""
    top: dict[str, Any]
    if native.is_entry_list(payload):  # torch 2.2: the entries themselves
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
    if not native.is_entry_list(raw_entries):
        raise DumpFormatError(
            f"{path}: 'entries' is a {type(raw_entries).__name__}, not a list; the file is "
            "damaged or not a dump."
        )
    if len(raw_entries) > MAX_ENTRIES:
        raise DumpFormatError(
            f"{path}: refused: {len(raw_entries):,} entries, more than any Flight Recorder "
            f"buffer holds ({MAX_ENTRIES:,} limit; TORCH_FR_BUFFER_SIZE is 2,000 by default); "
            "the file is damaged or built to exhaust memory."
        )
    entries: Sequence[dict[str, Any]]
    if native.all_dicts(raw_entries):  # (the usual case: checked in C)
        entries = raw_entries
    else:
        entries = [e for e in raw_entries if isinstance(e, dict)]
    if len(entries) != len(raw_entries):
        problems.append(f"{len(raw_entries) - len(entries)} entries are not mappings; skipped")
    if layout == "list" and raw_entries and not entries:
        raise DumpFormatError(f"{path}: a list, but not of Flight Recorder entries.")
    return top, layout, entries


def _backend(column: Col, lib: Any) -> str | None:
    """The backend most of the entries name, the first named of equals (Gloo where none does
    and the library version is "", as the generic recorder writes it)."""
    backend: str | None = _most_common(column)
    if backend is None and lib == "":
        backend = "gloo"  # the generic recorder writes "" as Gloo's library version
    return backend


def _most_common(column: Col) -> Any:
    """The value of a text column that most entries name (not empty; of equals, the first to
    appear), or None; counted on a dictionary column's codes (no string made per entry)."""
    if isinstance(column, Column) and column.dictionary is not None:  # (a fast path's)
        codes = column.values  # (-1: null)
        return _most_common_code(
            codes[codes >= 0 if column.valid is None else column.valid], column.dictionary
        )
    if isinstance(column, Column):
        column = to_arrow(column, TEXT)
    if not isinstance(column, pa.DictionaryArray) or column.offset:
        decoded = pc.value_counts(column.dictionary_decode().drop_null())
        values, tally = decoded.field("values").to_pylist(), decoded.field("counts").to_pylist()
        named = Counter({v: n for v, n in zip(values, tally, strict=True) if v})
        return named.most_common(1)[0][0] if named else None
    codes = column.indices.drop_null().to_numpy(zero_copy_only=False)
    return _most_common_code(codes, column.dictionary.to_pylist())


def _most_common_code(codes: np.ndarray, dictionary: list[Any]) -> Any:
    """``_most_common`` of a dictionary column's codes (nulls left out) into ``dictionary``
    (its values as Arrow lists them)."""
    tally = np.bincount(codes, minlength=len(dictionary)).tolist()
    counts: dict[Any, int] = {}
    for value, n in zip(dictionary, tally, strict=True):
        if value and n:
            counts[value] = counts.get(value, 0) + n
    if not counts:
        return None
    most = max(counts.values())
    tied = [value for value, n in counts.items() if n == most]
    if len(tied) == 1:
        return tied[0]

    def first(value: Any) -> int:  # (where a value first appears: the earliest of its codes)
        return min(
            int(np.argmax(codes == c)) for c, v in enumerate(dictionary) if v == value and tally[c]
        )

    return min(tied, key=first)


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
    return _guarded(cand, parse_dump)


def try_parse_plain(cand: Candidate) -> PlainDump | DumpFormatError:
    """parse_plain, with any failure turned into a one-line DumpFormatError naming the file."""
    return _guarded(cand, parse_plain)


def _guarded(cand: Candidate, parse: Callable[[Candidate], _Read]) -> _Read | DumpFormatError:
    """``parse(cand)``, with any failure turned into a one-line DumpFormatError naming the
    file."""
    # A dump is a few hundred thousand small containers that all stay alive until the file is
    # converted: the cyclic GC would scan them again and again for nothing (they hold no
    # cycles). Off while one file is read; its previous state is restored.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return parse(cand)
    except DumpFormatError as exc:
        return exc
    except MemoryError:  # past the worker's memory limit (frtrace.load.workers.parallel): refused
        return DumpTooLargeError(
            f"{cand.path}: refused: reading it needs more memory than a dump of "
            f"{cand.size_bytes / 2**20:.1f} MiB ever does (real dumps need about 10 times "
            "their size); the file is damaged or built to exhaust memory."
        )
    except Exception as exc:  # a bug or an input we never imagined: still one line
        return DumpFormatError(
            f"{cand.path}: could not be read ({type(exc).__name__}: {short_message(exc)}); "
            "the other ranks are analysed without it. Please report this file."
        )
    finally:
        if enabled:
            gc.enable()
