"""The Arrow schemas of a loaded dump set: the one place column names and types are spelled.

Five tables (see ``frtrace.load.dumpset.DumpSet``):

- ``ENTRIES``: one row per Flight Recorder entry of every rank, oldest first within a rank.
- ``STACKS``: interned Python stacks; ``ENTRIES.stack_id`` points here. Identical stacks (the
  same frames, in the same order) are stored once across all ranks.
- ``GROUPS``: process groups as each rank's ``pg_config`` recorded them, unmodified.
- ``PG_STATUS``: each rank's ``pg_status`` (torch 2.5+), per process-group id.
- ``FILES``: one row per dump file that looked like a dump: what it was and what went wrong.

Naming rules: ``*_ns`` are wall-clock nanoseconds on the recording host; ``*_ms`` are
milliseconds; ``rank`` is always the *global* rank (the number in the file name);
group-local ranks are called ``*_local``; sequence numbers keep torch's meaning
(``collective_seq`` = ``collective_seq_id``, or ``seq_id`` in dumps before torch 2.4).
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ENTRIES", "FILES", "FRAME", "GROUPS", "PG_STATUS", "STACKS"]

SIZES = pa.list_(pa.list_(pa.int64()))
DTYPES = pa.list_(pa.string())
# Repetitive columns are dictionary-encoded: a 4-byte index per entry into the distinct values
# (a few dozen per job), which keeps 8 million entries in a few hundred MB. Arrow compute,
# pandas (as Categorical) and to_pylist() read them like plain columns.
TEXT = pa.dictionary(pa.int32(), pa.string())
SIZES_DICT = pa.dictionary(pa.int32(), SIZES)
DTYPES_DICT = pa.dictionary(pa.int32(), DTYPES)
SPLITS = pa.list_(pa.int64())
SPLITS_DICT = pa.dictionary(pa.int32(), SPLITS)
MEMBERS_DICT = pa.dictionary(pa.int32(), pa.list_(pa.int32()))

ENTRIES = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),  # global rank that recorded the entry
        pa.field("entry_index", pa.int32(), nullable=False),  # position in the dump, 0 = oldest
        pa.field("record_id", pa.int64()),  # per-process counter over all groups (not per rank!)
        pa.field("pg_id", pa.int64()),  # per-process group creation index; keys pg_status
        pa.field("group_name", TEXT),  # process_group[0]; str(pg_id) before torch 2.4
        pa.field("group_desc", TEXT),  # process_group[1], e.g. "default_pg"
        pa.field("collective_seq", pa.int64()),  # collective_seq_id (seq_id before torch 2.4)
        pa.field("p2p_seq", pa.int64()),  # p2p_seq_id; null before torch 2.4
        pa.field("op_id", pa.int64()),
        pa.field("profiling_name", TEXT),  # as recorded, e.g. "nccl:send 1->0"
        pa.field("backend", TEXT),  # "nccl", "gloo", "xccl", ... (before the colon)
        pa.field("op", TEXT),  # "all_reduce", "send", "coalesced", ... (kept if unknown)
        pa.field("is_p2p", pa.bool_()),
        pa.field("p2p_src_local", pa.int32()),  # send/recv source, group-local; null if "?"
        pa.field("p2p_dst_local", pa.int32()),  # send/recv destination, group-local
        pa.field("input_sizes", SIZES_DICT),
        pa.field("output_sizes", SIZES_DICT),
        pa.field("input_dtypes", DTYPES_DICT),
        pa.field("output_dtypes", DTYPES_DICT),
        pa.field("state", TEXT),  # "scheduled" | "started" | "completed" | other as-is
        pa.field("time_created_ns", pa.int64()),  # enqueue time (time_created_us * 1000 in 2.2)
        pa.field("time_discovered_started_ns", pa.int64()),  # null when never observed
        pa.field("time_discovered_completed_ns", pa.int64()),
        pa.field("duration_ms", pa.float64()),  # GPU time, only with NCCL timing enabled
        pa.field("retired", pa.bool_()),
        pa.field("timeout_ms", pa.int64()),
        pa.field("thread_id", TEXT),
        pa.field("thread_name", TEXT),
        pa.field("stack_id", pa.int32()),  # -> STACKS.stack_id; null when no frames recorded
        # Fingerprints for fast comparison across ranks (CRC-32 of the value's repr): equal
        # sizes give equal fingerprints; null where the value is missing.
        pa.field("input_sig", pa.uint32()),
        pa.field("output_sig", pa.uint32()),
        pa.field("input_dtype_sig", pa.uint32()),
        pa.field("output_dtype_sig", pa.uint32()),
        # FR 2.11 (torch 2.16): all_to_all split sizes, elements to / from each group-local
        # peer; null where not recorded (every dump before 2.11, every other op)
        pa.field("input_split_sizes", SPLITS_DICT),
        pa.field("output_split_sizes", SPLITS_DICT),
    ]
)

FRAME = pa.struct(
    [
        pa.field("name", pa.string()),
        pa.field("filename", pa.string()),
        pa.field("line", pa.int64()),
    ]
)

STACKS = pa.schema(
    [
        pa.field("stack_id", pa.int32(), nullable=False),
        pa.field("frames", pa.list_(FRAME), nullable=False),  # innermost frame first
    ]
)

GROUPS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),  # whose pg_config this row comes from
        pa.field("group_name", pa.string(), nullable=False),  # pg_config key ('' for Gloo)
        pa.field("group_desc", TEXT),
        # global members as recorded; null: unreadable. Dictionary-encoded: each distinct list
        # is stored once (every rank records the default group's world-size list: kept plain,
        # a 32,768-rank job's lists would take 4 GB)
        pa.field("ranks", MEMBERS_DICT),
        pa.field("pg_id", pa.int64()),  # only in 1.x dumps, whose pg_config is keyed by pg_id
        pa.field("trusted", pa.bool_(), nullable=False),  # False: known to be unreliable
        pa.field("note", pa.string()),  # why it is not trusted
    ]
)

PG_STATUS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("pg_id", pa.int64(), nullable=False),
        pa.field("last_enqueued", pa.int64()),
        pa.field("last_started", pa.int64()),  # -1 unless NCCL timing was enabled
        pa.field("last_completed", pa.int64()),
    ]
)

FILES = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("loaded", pa.bool_(), nullable=False),  # False: unreadable, see error
        pa.field("error", pa.string()),  # one line, when not loaded
        pa.field("encoding", pa.string()),  # "pickle" | "json"
        pa.field("format_version", pa.string()),  # the dump's "version"; null for torch 2.2
        pa.field("layout", pa.string()),  # "list" (2.2), "1.x" or "2.x", by fields present
        pa.field("backend", TEXT),  # most common profiling-name prefix
        pa.field("comm_lib_version", pa.string()),  # comm_lib_version / nccl_version
        pa.field("entry_count", pa.int64()),
        pa.field("record_id_min", pa.int64()),
        pa.field("record_id_max", pa.int64()),
        pa.field("wrapped", pa.bool_()),  # ring buffer dropped older entries (record_id_min > 0)
        pa.field("has_stacks", pa.bool_()),
        pa.field("problems", pa.list_(pa.string())),  # warnings about a file that did load
    ]
)
