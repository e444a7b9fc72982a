"""Mutations of real dumps for the loader fuzz tests (``tests/load/read/test_fuzz.py``).

Every case is a pure function of ``(seed, case index)``: ``make_case`` picks a seed dump from
the corpus and an intact dump of another rank of the same job, and mutates the first one
either as bytes (truncate, flip, insert, delete, splice) or as a decoded object (drop keys,
add keys, swap field types, huge/negative numbers, deep nesting, shared sub-lists...) that is
then re-encoded as a pickle (protocols 0-5) or as JSON.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import random
import re
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parents[2] / "fixtures"


@dataclass(frozen=True, slots=True)
class Seed:
    """One intact dump file of the corpus."""

    job: str  # e.g. "gloo/mesh_stall", "frsim/2.10/pickle/host_stall"
    name: str  # the file name, e.g. "rank_5" or "nccl_trace_rank_1"
    rank: int
    data: bytes
    fmt: str  # "pickle" | "json"


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutated dump file."""

    seed: Seed
    data: bytes
    name: str  # its file name (the seed's, sometimes with another extension)
    kinds: tuple[str, ...]  # mutations applied, for statistics


@dataclass(frozen=True, slots=True)
class Case:
    """One fuzz case: mutated dumps of two ranks of a job, and an intact dump of a third."""

    index: int
    mutants: tuple[Mutant, ...]
    partner: Seed

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for m in self.mutants for k in m.kinds)

    def describe(self) -> str:
        what = "; ".join(
            f"{m.name} ({len(m.data)} bytes) by {'+'.join(m.kinds)}" for m in self.mutants
        )
        return f"{self.partner.job}: {what}; intact {self.partner.name}"


# --------------------------------------------------------------------------------------------
# The corpus


def build_corpus(workdir: Path) -> list[Seed]:
    """Real Gloo dumps (pickle and JSON) and frsim NCCL dumps in several format versions."""
    seeds: list[Seed] = []
    for root, fmt in ((FIXTURES / "gloo", "pickle"), (FIXTURES / "gloo_json", "json")):
        for scenario in sorted(p for p in root.iterdir() if p.is_dir()):
            for path in sorted(scenario.iterdir()):
                rank = int(re.sub(r"\D", "", path.name))
                job = f"{root.name}/{scenario.name}"
                seeds.append(Seed(job, path.name, rank, path.read_bytes(), fmt))
    seeds.extend(_frsim_seeds(workdir))
    return seeds


def _frsim_seeds(workdir: Path) -> list[Seed]:
    from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps

    specs = {
        "host_stall": JobSpec(
            world_size=4,
            tp=2,
            pp=2,
            steps=4,
            buffer_size=50,
            seed=1,
            fault=Fault(kind=FaultKind.HOST_STALL, rank=1, step=2),
        ),
        "healthy": JobSpec(world_size=4, tp=2, pp=1, steps=3, buffer_size=40, seed=2),
        "mismatch": JobSpec(
            world_size=4,
            tp=2,
            pp=2,
            steps=3,
            buffer_size=40,
            seed=3,
            timing=False,
            fault=Fault(kind=FaultKind.WRONG_SIZE, rank=2, step=1),
        ),
    }
    seeds: list[Seed] = []
    for label, spec in specs.items():
        job = simulate(spec)
        for version in ("2.2", "1.4", "2.4", "2.10"):
            for fmt in ("pickle", "json"):
                if fmt == "json" and version in ("2.2", "1.4"):
                    continue  # torch wrote no JSON before FR 2.4
                out = workdir / f"{label}_{version}_{fmt}"
                write_dumps(job, out, version=version, fmt=fmt, processes=1)
                for path in sorted(out.iterdir()):
                    rank = int(re.sub(r"\D", "", path.name))
                    key = f"frsim/{version}/{fmt}/{label}"
                    seeds.append(Seed(key, path.name, rank, path.read_bytes(), fmt))
    return seeds


# --------------------------------------------------------------------------------------------
# Byte-level mutations

# Bytes a pickle stream gives meaning to: opcodes (including the refused ones), lengths.
_OPCODE_BYTES = b"().0123FGIJKLMNPRSTUVXabcdeghijlopqrstu}]\x80\x81\x82\x83\x84\x85\x86\x87"
_OPCODE_BYTES += b"\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98"
_INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80"]
_JSON_BITS = [b"[", b"]", b"{", b"}", b'"', b",", b":", b"-", b"1e999", b"NaN", b"null", b"\\u"]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    cut = rng.choice([rng.randrange(len(data)), len(data) - rng.randint(1, 40), rng.randint(0, 8)])
    return data[: max(0, cut)]


def _flip(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 16])):
        if buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def _overwrite(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 2, 8])):
        if not buf:
            break
        i = rng.randrange(len(buf))
        pool = rng.choice([_INTERESTING, [bytes([b]) for b in _OPCODE_BYTES], _JSON_BITS])
        piece = rng.choice(pool)
        buf[i : i + len(piece)] = piece
    return bytes(buf)


def _insert(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    piece = rng.choice(
        [
            rng.randbytes(rng.randint(1, 16)),
            bytes([rng.choice(_OPCODE_BYTES)]) * rng.randint(1, 4),
            rng.choice(_JSON_BITS) * rng.randint(1, 50),
        ]
    )
    return data[:i] + piece + data[i:]


def _delete(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    n = rng.choice([1, 2, 4, rng.randint(1, max(1, len(data) // 4))])
    return data[:i] + data[i + n :]


def _duplicate(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    chunk = data[i : i + rng.randint(1, 512)]
    j = rng.randrange(len(data) + 1)
    return data[:j] + chunk + data[j:]


BYTE_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": _truncate,
    "flip": _flip,
    "overwrite": _overwrite,
    "insert": _insert,
    "delete": _delete,
    "duplicate": _duplicate,
}


def splice(rng: random.Random, a: bytes, b: bytes) -> bytes:
    """A prefix of one file and a suffix of another."""
    return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :]


# --------------------------------------------------------------------------------------------
# Structure-level mutations

# Values that stand in for a placeholder after encoding: (depth, kind).
DEEP_MARK = "\x00fuzz-deep-{}\x00"


class Placeholders:
    """Deeply nested values are spliced into the encoded bytes (encoders recurse)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, int, str]] = []

    def new(self, depth: int, kind: str) -> str:
        mark = DEEP_MARK.format(len(self.items))
        self.items.append((mark, depth, kind))
        return mark


def weird_scalar(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            1,
            -(2**31),
            2**31,
            2**63,
            -(2**63) - 1,
            2**64,
            2**100,
            -(2**100),
            10**4000,
            1.5,
            -0.0,
            float("nan"),
            float("inf"),
            float("-inf"),
            1e308,
            "",
            "x",
            "-1",
            "2.10",
            "[0, 1]",
            "nccl:all_reduce",
            "nccl:send 0->1",
            "\udcff",  # a lone surrogate: not encodable as UTF-8
            "\u0663.\u0664",  # Arabic-Indic digits 3.4
            "é\n\r\x00",
            "a" * rng.choice([1000, 100_000]),
        ]
    )


def weird_value(rng: random.Random, ph: Placeholders, *, allow_tuples: bool) -> Any:
    """Any of the values a broken writer could put in a field."""
    pick = rng.randrange(20)
    if pick < 8:
        return weird_scalar(rng)
    if pick == 8:
        return []
    if pick == 9:
        return {}
    if pick == 10:
        return [weird_scalar(rng) for _ in range(rng.randint(1, 4))]
    if pick == 11:
        return [[weird_scalar(rng)] for _ in range(rng.randint(1, 3))]
    if pick == 12:
        return {str(weird_scalar(rng))[:20]: weird_scalar(rng) for _ in range(3)}
    if pick == 13:
        return ph.new(rng.choice([100, 10_000, 100_000]), rng.choice(["list", "dict"]))
    if pick == 14:
        return list(range(rng.choice([1000, 100_000])))
    if pick == 15:
        return [[1, 2]] * rng.choice([10, 10_000])
    if pick == 16 and allow_tuples:
        return (weird_scalar(rng), weird_scalar(rng))
    if pick == 17:
        return [{"name": weird_scalar(rng), "filename": "f.py", "line": weird_scalar(rng)}]
    if pick == 18:
        return [[[[1]]]]
    return rng.choice([b"bytes", bytearray(b"x"), 1j]) if allow_tuples else "z"


def shared_dag(rng: random.Random) -> Any:
    """A value whose pickle is small and whose expansion is huge (shared sub-lists)."""
    kind = rng.randrange(3)
    if kind == 0:  # sizes with one list referenced many times: a million ints from ~6 KB
        # (the loader's worst case, far larger, is a test of its own: "sizes_shared_rows")
        inner = list(range(1000))
        return [inner] * 1000
    if kind == 1:  # a binary DAG 64 levels deep: 2**64 leaves once expanded
        node: Any = [1, 2]
        for _ in range(64):
            node = [node, node]
        return node
    frame = {"name": "f", "filename": "x.py", "line": 1}
    return [frame] * 50_000  # the same frame 50,000 times


# Field names of an entry, to target the fields the loader reads.
ENTRY_FIELDS = [
    "record_id",
    "pg_id",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "time_created_us",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "duration_ms",
    "retired",
    "timeout_ms",
    "is_p2p",
    "thread_id",
    "thread_name",
    "frames",
]
TOP_FIELDS = ["version", "entries", "pg_config", "pg_status", "comm_lib_version", "nccl_version"]

PROFILING_NAMES = [
    "nccl:send 99999999999999999999->0",
    "nccl:recv 0<-4294967296",
    "nccl:send 2147483648->1",
    "nccl:recv ?<-?",
    "nccl:send -1->0",
    ":",
    "",
    " ",
    "nccl:",
    ":all_reduce",
    "nccl:all_reduce " + "x" * 10_000,
    "nccl:send 0->1->2",
    "gloo:all_reduce\n",
    "\u0663:\u0664",
]
RANK_STRINGS = [
    "[0, 1, 1000000000000]",
    "[0, 1, 99999999999999999999999]",
    "[-1]",
    "[0,,1]",
    "[",
    "]",
    "[]",
    "[0, 1, 2, 3, 0, 0]",
    "[" + ", ".join(str(i) for i in range(20_000)) + "]",
    "[4294967296]",
    "[2147483647]",
    "[a, b]",
    "[1.5]",
    "[0x10]",
    "[\u0663]",
    "[" + "9" * 5000 + "]",
]
VERSIONS = ["", "2", "2.", ".", "x.y", "99.99", "2.10.1", "-1.0", "1" * 5000, "\u0663.\u0664"]


def _entries_of(obj: Any) -> list[Any] | None:
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict) and isinstance(obj.get("entries"), list):
        return obj["entries"]  # type: ignore[no-any-return]
    return None


def _random_container(rng: random.Random, obj: Any) -> tuple[Any, Any] | None:
    """A (container, key) pair somewhere in the decoded dump, biased towards known fields."""
    entries = _entries_of(obj)
    choice = rng.randrange(6)
    if choice <= 2 and entries:
        entry = rng.choice(entries)
        if isinstance(entry, dict):
            if choice == 2 and isinstance(entry.get("frames"), list) and entry["frames"]:
                frame = rng.choice(entry["frames"])
                if isinstance(frame, dict):
                    return frame, rng.choice(["name", "filename", "line", "extra"])
            return entry, rng.choice(ENTRY_FIELDS + list(entry))
    if choice == 3 and isinstance(obj, dict):
        return obj, rng.choice(TOP_FIELDS)
    if choice == 4 and isinstance(obj, dict):
        for key in ("pg_config", "pg_status"):
            sub = obj.get(key)
            if isinstance(sub, dict) and sub:
                k = rng.choice(list(sub))
                if isinstance(sub[k], dict) and rng.random() < 0.7:
                    inner = sub[k]
                    return inner, rng.choice(
                        [
                            "name",
                            "desc",
                            "ranks",
                            "last_enqueued_collective",
                            "last_started_collective",
                            "last_completed_collective",
                        ]
                    )
                return sub, k
    # anywhere: walk down a random path
    node = obj
    parent: tuple[Any, Any] | None = None
    for _ in range(rng.randint(1, 6)):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
            parent, node = (node, key), node[key]
        elif isinstance(node, list) and node:
            i = rng.randrange(len(node))
            parent, node = (node, i), node[i]
        else:
            break
    return parent


def _set(container: Any, key: Any, value: Any) -> None:
    if isinstance(container, list):
        container[key] = value
    else:
        container[key] = value


def mutate_object(
    rng: random.Random, obj: Any, ph: Placeholders, *, pickle_out: bool
) -> tuple[str, Any]:
    """Mutate the decoded dump in place: (kind, the object to encode from now on)."""
    kind = _mutate(rng, obj, ph, pickle_out=pickle_out)
    if isinstance(kind, tuple):
        return kind
    return kind, obj


def _mutate(
    rng: random.Random, obj: Any, ph: Placeholders, *, pickle_out: bool
) -> str | tuple[str, Any]:
    op = rng.randrange(18)
    entries = _entries_of(obj)
    if op == 0:
        target = _random_container(rng, obj)
        if target and isinstance(target[0], dict) and target[1] in target[0]:
            del target[0][target[1]]
            return "drop_key"
    if op == 1:
        target = _random_container(rng, obj)
        if target and isinstance(target[0], dict):
            target[0][rng.choice(["unknown", "x" * 300, "entries2", "\u2603"])] = weird_value(
                rng, ph, allow_tuples=pickle_out
            )
            return "add_key"
    if op in (2, 3, 4):
        target = _random_container(rng, obj)
        if target:
            _set(target[0], target[1], weird_value(rng, ph, allow_tuples=pickle_out))
            return "swap_type"
    if op == 5 and entries:
        field = rng.choice(
            ["collective_seq_id", "seq_id", "p2p_seq_id", "record_id", "op_id", "pg_id"]
        )
        value = rng.choice([-1, -(2**40), 2**62, 2**63, 2**70, 10**18, 0])
        for e in rng.sample(entries, k=min(len(entries), rng.randint(1, 5))):
            if isinstance(e, dict):
                e[field] = value
        return "seq_numbers"
    if op == 6 and entries:
        for e in rng.sample(entries, k=min(len(entries), rng.randint(1, 3))):
            if isinstance(e, dict):
                e["profiling_name"] = rng.choice(PROFILING_NAMES)
        return "profiling_name"
    if op == 7 and isinstance(obj, dict) and isinstance(obj.get("pg_config"), dict):
        cfg = obj["pg_config"]
        for key in list(cfg)[: rng.randint(1, 3)]:
            value = cfg[key]
            if isinstance(value, dict):
                value["ranks"] = rng.choice(RANK_STRINGS)
            else:
                cfg[key] = rng.choice([[0, 10**12], [-5], list(range(50_000)), "[0, 1]", None])
        return "pg_config_ranks"
    if op == 8 and isinstance(obj, dict):
        obj[rng.choice(["pg_config", "pg_status"])] = rng.choice(
            [
                [],
                "x",
                {"0": "x"},
                {"abc": {}},
                {str(2**80): {"last_enqueued_collective": "9" * 30}},
                {"0": {"last_enqueued_collective": -(2**70), "last_completed_collective": []}},
                {(1, 2) if pickle_out else "t": {}},
                {None: None} if pickle_out else {"": None},
            ]
        )
        return "pg_config_status"
    if op == 9 and isinstance(obj, dict):
        obj["version"] = rng.choice([*VERSIONS, 2.1, None, ["2", "10"], -1])
        return "version"
    if op == 10 and entries:
        i = rng.randrange(len(entries))
        entries[i] = rng.choice([None, 1, "entry", [], [entries[i]], (1,) if pickle_out else []])
        return "entry_not_dict"
    if op == 11 and entries:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e["frames"] = rng.choice(
                [
                    "frames",
                    {"name": "x"},
                    [None],
                    [{"name": 1, "filename": 2, "line": "x"}],
                    [{"name": "a", "filename": "b", "line": 2**80}],
                    [{"name": "a", "filename": "b", "line": float("nan")}],
                    [{"name": "a"}],
                    [{"name": "a", "filename": "b", "line": 1, "extra": [1]}],
                    [{"name": ["unhashable"], "filename": "b", "line": 1}],
                    [{}] * 100,
                ]
            )
        return "frames"
    if op == 12 and entries:
        field = rng.choice(["input_sizes", "output_sizes", "input_dtypes", "output_dtypes"])
        for e in rng.sample(entries, k=min(len(entries), rng.randint(1, 4))):
            if isinstance(e, dict):
                e[field] = rng.choice(
                    [
                        [[-1]],
                        [[2**64]],
                        [[2**100, 1]],
                        [[]],
                        [],
                        [[[[1]]]],
                        "[[1]]",
                        [[1.5]],
                        [[None]],
                        [[True]],
                        [1, 2],
                        [["Float"]],
                        ["Float", 1],
                        [[1] * 100_000],
                        {"a": 1},
                        [{"a": 1}],
                    ]
                )
        return "sizes_dtypes"
    if op == 13 and entries and pickle_out:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e[rng.choice(["input_sizes", "output_sizes", "frames", "process_group"])] = shared_dag(
                rng
            )
        return "shared_dag"
    if op == 14 and entries is not None:
        how = rng.randrange(4)
        if how == 0 and entries:
            entries.extend([rng.choice(entries)] * rng.choice([10, 1000, 20_000]))
        elif how == 1:
            entries.reverse()
        elif how == 2:
            rng.shuffle(entries)
        else:
            del entries[rng.randrange(len(entries) + 1) :]
        return "entries_order_count"
    if op == 15:
        wrapped: Any = rng.choice(
            [
                None,
                42,
                "dump",
                [],
                {},
                {"entries": None},
                {"version": "2.10"},
                {"pg_status": {}},
                entries if entries is not None else [],
                [obj],
            ]
        )
        return "top_level", wrapped
    if op == 16 and entries:
        field = rng.choice(
            ["time_created_ns", "time_discovered_started_ns", "duration_ms", "timeout_ms"]
        )
        for e in entries[: rng.randint(1, len(entries))]:
            if isinstance(e, dict):
                e[field] = rng.choice([-1, 0, 2**64, -(2**63), float("nan"), 1e300, "0", True])
        return "times"
    if op == 17 and entries:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e["process_group"] = rng.choice(
                [
                    (),
                    ("",),
                    (1, 2),
                    ["a"] * 1000,
                    (None, None),
                    ("0", "default_pg", "extra"),
                    "0",
                    ("x" * 100_000, "d"),
                ]
            )
            if not pickle_out and isinstance(e["process_group"], tuple):
                e["process_group"] = list(e["process_group"])
        return "process_group"
    # fallback: swap a random value
    target = _random_container(rng, obj)
    if target:
        _set(target[0], target[1], weird_value(rng, ph, allow_tuples=pickle_out))
    return "swap_type"


def _splice_deep_pickle(data: bytes, ph: Placeholders) -> bytes:
    """Replace each placeholder string's opcode by a nested list/dict of the chosen depth."""
    for mark, depth, kind in ph.items:
        raw = mark.encode()
        token = b"X" + struct.pack("<I", len(raw)) + raw
        if kind == "list":  # ] x depth, then APPEND x (depth - 1): one list nested depth deep
            deep = b"]" * depth + b"a" * (depth - 1)
        else:  # {k: {k: {...}}}: EMPTY_DICT, then (key, EMPTY_DICT) x depth, SETITEM x depth
            deep = b"}" + (b"X\x01\x00\x00\x00k}" * depth) + b"s" * depth
        data = data.replace(token, deep, 1)
    return data


def _splice_deep_json(text: str, ph: Placeholders) -> str:
    for mark, depth, kind in ph.items:
        token = json.dumps(mark)
        deep = "[" * depth + "]" * depth if kind == "list" else '{"k":' * depth + "{}" + "}" * depth
        text = text.replace(token, deep, 1)
    return text


JSON_LIMIT = 32 << 20


def _json_size(obj: Any, seen: dict[int, int]) -> int:
    """About how many bytes of JSON ``obj`` makes; each shared object is sized once."""
    known = seen.get(id(obj))
    if known is not None:
        return known
    if isinstance(obj, dict):
        size = 2 + sum(_json_size(k, seen) + _json_size(v, seen) + 2 for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        size = 2 + sum(_json_size(v, seen) + 1 for v in obj)
    elif isinstance(obj, str):
        size = len(obj) + 2
    else:
        size = 8
    seen[id(obj)] = size
    return size


def structural(rng: random.Random, seed: Seed) -> tuple[bytes, list[str]]:
    """Decode, mutate 1-3 times, re-encode as a pickle or as JSON."""
    obj: Any = pickle.loads(seed.data) if seed.fmt == "pickle" else json.loads(seed.data)
    ph = Placeholders()
    to_json = rng.random() < 0.3
    kinds = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        kind, obj = mutate_object(rng, obj, ph, pickle_out=not to_json)
        kinds.append(kind)
    if to_json:
        # (tuple keys are dropped, bytes written as text; a lone surrogate becomes bytes
        # that are not UTF-8, as a damaged file would hold)
        if _json_size(obj, {}) <= JSON_LIMIT:  # JSON repeats what a pickle shares
            text = json.dumps(
                obj, allow_nan=True, ensure_ascii=rng.random() < 0.5, skipkeys=True, default=str
            )
            text = _splice_deep_json(text, ph)
            return text.encode("utf-8", "surrogatepass"), [*kinds, "as_json"]
        kinds.append("too_big_for_json")  # (the loader's size limit is a test of its own)
    protocol = rng.choice([2, 2, 2, 2, 0, 1, 3, 4, 5])
    try:
        data = pickle.dumps(obj, protocol=protocol)
    except (RecursionError, ValueError):
        data = seed.data
        kinds.append("unencodable")
    if ph.items and protocol == 2:
        data = _splice_deep_pickle(data, ph)
    return data, [*kinds, f"pickle{protocol}"]


def make_case(index: int, seed_value: int, corpus: list[Seed]) -> Case:
    """The fuzz case number ``index``: deterministic for (seed_value, index).

    Two ranks of one job are mutated (each file is one mutation tried; two per directory
    also show that one damaged file does not spoil another), a third rank stays intact.
    """
    rng = random.Random(f"{seed_value}:{index}")
    job = rng.choice(corpus).job
    first, second, partner = rng.sample([s for s in corpus if s.job == job], 3)
    mutants = (_mutant(rng, first, corpus), _mutant(rng, second, corpus))
    return Case(index, mutants, partner)


def _mutant(rng: random.Random, seed: Seed, corpus: list[Seed]) -> Mutant:
    level = rng.random()
    if level < 0.45:
        data = seed.data
        kinds = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            kind = rng.choice(list(BYTE_MUTATIONS))
            data = BYTE_MUTATIONS[kind](rng, data)
            kinds.append(kind)
    elif level < 0.5:
        other = rng.choice(corpus)
        data, kinds = splice(rng, seed.data, other.data), ["splice"]
    else:
        data, kinds = structural(rng, seed)
    name = seed.name
    if rng.random() < 0.1:  # an extension that may contradict the content
        name = re.sub(r"\.json$", "", name) + rng.choice([".json", ".pkl", ""])
    return Mutant(seed, data, name, tuple(kinds))


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


# --------------------------------------------------------------------------------------------
# Running one case


def _one_line(text: str) -> bool:
    return "\n" not in text and "\r" not in text


# The analyses already run in this process of a directory whose mutated files were all
# refused: (intact file, refused ranks). Such a directory analyses exactly like an earlier one
# (the analysis is deterministic), so it is not analysed again.
_ANALYSED: set[tuple[str, str, tuple[int, ...]]] = set()


def run_case(case: Case, workdir: Path) -> tuple[str, str | None]:
    """Load and analyse the mutated files next to the intact one: (outcome, failure).

    The property: frtrace raises nothing (it may raise its own FrtraceError, with a one-line
    message naming the directory); the intact rank is loaded; each mutated file is loaded or
    is a fatal problem whose one-line message names it; every problem message is one line
    naming its file; the analysis and the text and JSON reports complete.
    """
    from frtrace.errors import FrtraceError
    from frtrace.load.tables import load_dumps
    from frtrace.pipeline import analyze_dumps
    from frtrace.report.json import render_json
    from frtrace.report.text import render_text

    for old in workdir.iterdir():
        old.unlink()
    for m in case.mutants:
        (workdir / m.name).write_bytes(m.data)
    (workdir / case.partner.name).write_bytes(case.partner.data)
    try:
        dumps = load_dumps(workdir, jobs=1)
    except FrtraceError as exc:  # the intact file loads: nothing may stop the load
        return "error", f"load_dumps raised {type(exc).__name__}: {str(exc)[:300]}"
    problems = []
    if case.partner.rank not in dumps.loaded_ranks:
        problems.append(f"the intact rank {case.partner.rank} was not loaded")
    for p in dumps.problems:
        if not _one_line(p.message):
            problems.append(f"multi-line problem message: {p.message[:300]!r}")
        if p.path not in p.message:
            problems.append(f"problem message does not name its file: {p.message[:300]!r}")
    outcomes = []
    for m in case.mutants:
        fatal = [p for p in dumps.problems if p.fatal and p.rank == m.seed.rank]
        if m.seed.rank in dumps.loaded_ranks:
            outcomes.append("loaded")
            if fatal:
                problems.append(f"{m.name} is both loaded and fatal")
        else:
            outcomes.append("refused")
            # a file that reads as a process that never got through init_process_group (no
            # op, no group: ``load.inits``) is set aside with a warning naming it: not lost
            aside = [
                p
                for p in dumps.problems
                if p.rank == m.seed.rank and not p.fatal and "not of attempt" in p.message
            ]
            if aside and not fatal and all(p.path in p.message for p in aside):
                continue
            if len(fatal) != 1 or str(workdir / m.name) not in fatal[0].message:
                problems.append(f"{m.name} is neither loaded nor a fatal problem: {fatal}")
    outcome = "+".join(sorted(outcomes))
    if problems:
        return outcome, "; ".join(problems)
    refused = tuple(sorted(m.seed.rank for m in case.mutants))
    key = (case.partner.job, case.partner.name, refused)
    if outcome == "refused+refused" and key in _ANALYSED:
        return outcome, None
    try:
        report = analyze_dumps(dumps)  # (pipeline.analyze(dir) is analyze_dumps(load_dumps(dir)))
        text = render_text(report)
        json.loads(render_json(report))
    except FrtraceError as exc:
        if not _one_line(str(exc)) or str(workdir) not in str(exc):
            return outcome, f"{type(exc).__name__} from the analysis: {str(exc)[:300]!r}"
        return outcome + ", analysis refused", None
    if not text.strip():
        return outcome, "empty text report"
    if outcome == "refused+refused":
        _ANALYSED.add(key)
    return outcome, None


# --------------------------------------------------------------------------------------------
# Running many cases in watched worker processes


@dataclass
class Failure:
    index: int
    what: str


@dataclass
class Tally:
    """What a fuzz run did."""

    cases: int = 0
    outcomes: dict[str, int] | None = None
    kinds: dict[str, int] | None = None
    failures: list[Failure] | None = None
    peak_rss_mib: float = 0.0  # largest RSS of a fuzz worker or of a loader worker under it
    slowest: tuple[float, int] = (0.0, -1)  # (seconds, case index)

    def __post_init__(self) -> None:
        self.outcomes = self.outcomes or {}
        self.kinds = self.kinds or {}
        self.failures = self.failures or []


def _worker(conn: Any, indices: list[int], seed: int, corpus: list[Seed], workdir: Path) -> None:
    import resource

    # a hard cap on this worker and the loader's workers under it: a runaway allocation
    # fails here rather than on the machine (the loader's own limit is below this one)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = vm + (6 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    workdir.mkdir(parents=True, exist_ok=True)
    # frtrace's library calls print nothing (the CLI prints their results): whatever this
    # worker or a loader worker under it writes to stderr during a case is a failure
    with tempfile.TemporaryFile() as stderr:
        os.dup2(stderr.fileno(), 2)
        for i in indices:
            conn.send(("begin", i))
            started = time.perf_counter()
            stderr.seek(0)
            stderr.truncate()
            kinds, outcome, failure = _one(i, seed, corpus, workdir)
            stderr.seek(0)
            written = stderr.read(2000)
            if written and failure is None:
                failure = f"wrote to stderr: {written.decode(errors='replace')[:500]!r}"
            rss = max(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            )
            elapsed = time.perf_counter() - started
            conn.send(("done", i, kinds, outcome, failure, rss / 1024, elapsed))
    conn.send(("end",))


def _one(
    i: int, seed: int, corpus: list[Seed], workdir: Path
) -> tuple[tuple[str, ...], str, str | None]:
    """(mutation kinds, outcome, failure) of case ``i``; an exception is a failure."""
    import traceback

    kinds: tuple[str, ...] = ()
    try:
        case = make_case(i, seed, corpus)
        kinds = case.kinds
        outcome, failure = run_case(case, workdir)
    except BaseException as exc:
        outcome = "exception"
        failure = f"{type(exc).__name__}: {str(exc)[:300]}\n{traceback.format_exc()[-2000:]}"
    return kinds, outcome, failure


def run_cases(
    indices: list[int],
    seed: int,
    corpus: list[Seed],
    workdir: Path,
    *,
    workers: int,
    case_timeout_s: float,
    max_rss_mib: float,
) -> Tally:
    """Run the cases in ``workers`` processes; a case that hangs or crashes its worker (or
    lets memory grow past ``max_rss_mib``) is a failure; its worker is replaced."""
    ctx = multiprocessing.get_context("fork")
    tally = Tally()
    assert tally.outcomes is not None and tally.kinds is not None and tally.failures is not None
    queues = [indices[k::workers] for k in range(workers)]
    active: dict[Any, list[Any]] = {}  # conn -> [process, remaining indices, current, since]

    def launch(k: int, todo: list[int]) -> None:
        if not todo:
            return
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(send, todo, seed, corpus, workdir / f"w{k}"))
        proc.start()
        send.close()
        active[recv] = [proc, todo, None, time.monotonic(), k]

    def give_up(conn: Any, why: str) -> None:
        proc, todo, current, _, k = active.pop(conn)
        if proc.is_alive():
            proc.kill()
        proc.join()
        tally.failures.append(Failure(current, why))  # type: ignore[union-attr]
        tally.cases += 1
        launch(k, todo[todo.index(current) + 1 :])

    for k, todo in enumerate(queues):
        launch(k, todo)
    while active:
        for conn in wait(list(active), timeout=1.0):
            try:
                msg = conn.recv()
            except EOFError:
                proc = active[conn][0]
                proc.join()
                if active[conn][2] is None:  # between cases: nothing lost
                    active.pop(conn)
                    continue
                give_up(conn, f"the worker died (exit {proc.exitcode}) during the case")
                continue
            if msg[0] == "begin":
                active[conn][2], active[conn][3] = msg[1], time.monotonic()
            elif msg[0] == "done":
                _, i, kinds, outcome, failure, rss_mib, elapsed = msg
                active[conn][2] = None
                tally.cases += 1
                tally.outcomes[outcome] = tally.outcomes.get(outcome, 0) + 1
                for kind in kinds:
                    tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
                if failure:
                    tally.failures.append(Failure(i, failure))
                if rss_mib > max_rss_mib and tally.peak_rss_mib <= max_rss_mib:
                    tally.failures.append(Failure(i, f"memory grew to {rss_mib:.0f} MiB"))
                tally.peak_rss_mib = max(tally.peak_rss_mib, rss_mib)
                tally.slowest = max(tally.slowest, (elapsed, i))
            else:  # "end"
                proc = active.pop(conn)[0]
                proc.join()
        now = time.monotonic()
        for conn, (_, _, current, since, _) in list(active.items()):
            if current is not None and now - since > case_timeout_s:
                give_up(conn, f"hung: no result after {case_timeout_s:.0f} s")
    return tally
