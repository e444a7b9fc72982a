"""Fuzzing the loader: damaged, hostile and absurd dump files cost one line, never the run.

Real dumps (the Gloo fixtures, pickle and JSON, and frsim NCCL dumps in formats 2.2, 1.4, 2.4
and 2.10) are mutated as bytes (truncated, bits flipped, bytes inserted, deleted, spliced) or
as decoded objects (keys dropped or added, field types swapped, huge and negative numbers,
deep nesting, shared sub-lists, malformed frames, pg_config and pg_status, odd versions) and
re-encoded as pickles (protocols 0-5) or JSON. Each case puts mutated dumps of two ranks
next to an intact dump of a third; frtrace loads and analyses the directory. It must raise
nothing but its own one-line errors, load the intact rank, and load each mutated file or list
it as a fatal problem in one line that names it; every case runs in a watched process with a
time limit and a memory limit. Crafted pickles (globals, bombs) are tested one by one below.

Every case is a pure function of (seed, index). The default run is a prefix of a longer one:

    FRTRACE_FUZZ_CASES=100000 python3 -m pytest tests/load/read/test_fuzz.py -k mutated -s
    FRTRACE_FUZZ_SEED=7 FRTRACE_FUZZ_CASES=20000 python3 -m pytest tests/load/read/test_fuzz.py -k
    mut
    FRTRACE_FUZZ_ONLY=1234 python3 -m pytest tests/load/read/test_fuzz.py -k mutated -s   # one case
"""

from __future__ import annotations

import copyreg
import json
import os
import pickle
import resource
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import frtrace.load.workers.parallel as parallel
from frtrace.errors import NoReadableDumps
from frtrace.incident.discover import MAX_WORLD_SIZE, discover
from frtrace.load.dumpset import DumpSet
from frtrace.load.read.parse import MAX_ENTRIES
from frtrace.load.read.unpickle import MAX_DUMP_BYTES
from frtrace.load.tables import load_dumps
from frtrace.pipeline import analyze_dumps
from frtrace.report.json import render_json
from frtrace.report.text import render_text
from tests.conftest import make_dump, make_entry, write_pickle
from tests.load.read.fuzzlib import Seed, build_corpus, make_case, run_case, run_cases

CASES = int(os.environ.get("FRTRACE_FUZZ_CASES", "300"))
SEED = int(os.environ.get("FRTRACE_FUZZ_SEED", "20260611"))
ONLY = os.environ.get("FRTRACE_FUZZ_ONLY")
# a case past this is a hang: the loader's own limit per file is 60 s of wall time, so a case
# that loads a slow file and analyses it may take longer on a busy machine (one took over 60 s
# at a load average of 8-10); a real hang never ends, whatever the limit
CASE_TIMEOUT_S = 180.0
MAX_RSS_MIB = 3072.0  # a fuzz worker, or a loader worker under it, past this is a failure


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Seed]:
    return build_corpus(tmp_path_factory.mktemp("corpus"))


def test_mutated_dumps_load_or_fail_in_one_line(corpus: list[Seed], tmp_path: Path) -> None:
    """Thousands of mutated real dumps: no traceback, no hang, bounded memory, the rest loads."""
    repro = f"FRTRACE_FUZZ_SEED={SEED} FRTRACE_FUZZ_ONLY=<case> python3 -m pytest {__file__} -s"
    if ONLY is not None:  # reproduce one case in this process, with its traceback
        case = make_case(int(ONLY), SEED, corpus)
        print(f"case {ONLY}: {case.describe()}")
        (tmp_path / "case").mkdir()
        outcome, failure = run_case(case, tmp_path / "case")
        print(outcome)
        assert failure is None, failure
        return
    started = time.monotonic()
    tally = run_cases(
        list(range(CASES)),
        SEED,
        corpus,
        tmp_path,
        workers=min(2, parallel.default_jobs()),
        case_timeout_s=CASE_TIMEOUT_S,
        max_rss_mib=MAX_RSS_MIB,
    )
    assert tally.failures is not None and tally.kinds is not None
    print(
        f"\nfuzz: {tally.cases} cases, {2 * tally.cases} mutated files (seed {SEED}) in "
        f"{time.monotonic() - started:.0f} s; "
        f"outcomes {tally.outcomes}; peak RSS {tally.peak_rss_mib:.0f} MiB; slowest case "
        f"{tally.slowest[1]} ({tally.slowest[0]:.1f} s); corpus {len(corpus)} dumps\n"
        f"mutations: {dict(sorted(tally.kinds.items()))}"
    )
    assert tally.cases == CASES
    shown = "\n".join(
        f"  case {f.index}: {make_case(f.index, SEED, corpus).describe()}: {f.what}"
        for f in tally.failures[:20]
    )
    assert not tally.failures, f"{len(tally.failures)} failing cases; repro: {repro}\n{shown}"


# --------------------------------------------------------------------------------------------
# Crafted pickles: one by one


def _intact(directory: Path) -> None:
    """An intact dump of rank 0 (4 ranks' default group), next to the file under test."""
    write_pickle(directory / "rank_0", make_dump([make_entry()], world=4))


def _load_next_to_intact(directory: Path, name: str, data: bytes) -> tuple[DumpSet, float]:
    """Load (and analyse) ``data`` as rank file ``name`` next to an intact rank 0."""
    (directory / name).write_bytes(data)
    return _load_with_intact(directory)


def _load_with_intact(directory: Path) -> tuple[DumpSet, float]:
    """Add an intact rank 0, load and analyse the directory: the checks every case shares."""
    _intact(directory)
    started = time.monotonic()
    dumps = load_dumps(directory)
    elapsed = time.monotonic() - started
    report = analyze_dumps(dumps)
    render_text(report)
    json.loads(render_json(report))
    assert 0 in dumps.loaded_ranks
    for p in dumps.problems:
        assert "\n" not in p.message and p.path in p.message
    return dumps, elapsed


def _refusal(dumps: DumpSet, rank: int) -> str:
    (problem,) = [p for p in dumps.problems if p.rank == rank]
    assert problem.fatal and rank in dumps.unreadable_ranks
    return problem.message


class _Exploit:
    """Pickles as a call of ``target(*args)``."""

    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        self.target, self.args = target, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.target, self.args)


def _global_pickles(marker: Path) -> Iterator[tuple[str, bytes, str]]:
    """(name, pickle, expected words) for every way a pickle can ask for code."""
    import builtins

    touch = f"touch {marker}"
    evil = f"open({str(marker)!r}, 'w').close()"
    yield "reduce_os_system", pickle.dumps(_Exploit(os.system, touch), protocol=2), "posix.system"
    yield (
        "reduce_in_an_entry",
        pickle.dumps(make_dump([make_entry(frames=_Exploit(os.system, touch))]), protocol=2),
        "posix.system",
    )
    yield (
        "reduce_eval",
        pickle.dumps(_Exploit(builtins.eval, evil), protocol=4),
        "builtins.eval",
    )
    # GLOBAL by hand (protocol 0 text), then a REDUCE of it
    yield (
        "global_opcode",
        b"cos\nsystem\n(V" + touch.encode() + b"\ntR.",
        "os.system",
    )
    # STACK_GLOBAL (protocol 4) crafted by hand: module and name pushed as strings
    yield (
        "stack_global_opcode",
        b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c"
        + bytes([len(evil)])
        + evil.encode()
        + b"\x85R.",
        "builtins.eval",
    )
    # INST and OBJ: old-style instance creation from a named class
    yield "inst_opcode", b"(V" + touch.encode() + b"\nios\nsystem\n.", "os.system"
    yield "obj_opcode", b"(cos\nsystem\nV" + touch.encode() + b"\no.", "os.system"
    # EXT1/EXT2/EXT4: codes from the copyreg extension registry (registered in the test)
    yield "ext1_opcode", b"\x80\x02\x82\xf0(V" + touch.encode() + b"\ntR.", "os.system"
    yield "ext2_opcode", b"\x80\x02\x83\xf1\x00(V" + touch.encode() + b"\ntR.", "posix.system"
    ext4 = b"\x80\x02\x84\xf2\x00\x00\x00(V" + evil.encode() + b"\ntR."
    yield "ext4_opcode", ext4, "builtins.eval"
    # PERSID (text) and BINPERSID: a persistent id resolved by the unpickler's hook
    yield "persid_opcode", b"P" + touch.encode() + b"\n.", "persistent object"
    yield "binpersid_opcode", b"\x80\x02X\x01\x00\x00\x00xQ.", "persistent object"


@pytest.fixture
def registered_extensions() -> Iterator[None]:
    """EXT opcodes name (module, name) pairs of copyreg's registry: make them point at
    os.system, as a process that registered extensions could."""
    codes = {0xF0: ("os", "system"), 0xF1: ("posix", "system"), 0xF2: ("builtins", "eval")}
    for code, (module, name) in codes.items():
        copyreg.add_extension(module, name, code)
    yield
    for code, (module, name) in codes.items():
        copyreg.remove_extension(module, name, code)


def test_pickles_asking_for_code_are_refused_and_nothing_runs(
    tmp_path: Path, registered_extensions: None
) -> None:
    """__reduce__, GLOBAL, STACK_GLOBAL, INST, OBJ, EXT1/2/4, PERSID, BINPERSID: refused by
    name, with no side effect (the marker file never appears), the intact rank loads."""
    marker = tmp_path / "marker"
    for i, (name, data, words) in enumerate(_global_pickles(marker)):
        directory = tmp_path / name
        directory.mkdir()
        dumps, _ = _load_next_to_intact(directory, f"rank_{i + 1}", data)
        message = _refusal(dumps, i + 1)
        assert "refused to load" in message and words in message, (name, message)
        assert not marker.exists(), name


# --------------------------------------------------------------------------------------------
# Size and bombs


def test_a_file_larger_than_any_dump_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse file past MAX_DUMP_BYTES is refused from its size: it is never opened."""
    big = tmp_path / "rank_1"
    big.write_bytes(b"\x80\x02")
    os.truncate(big, MAX_DUMP_BYTES + 1)  # sparse: no disk space, no time
    opened = tmp_path / "opened"
    real_open = Path.open

    def spy(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == big:
            opened.touch()  # (in the worker process: a file is the way to tell the test)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    dumps, elapsed = _load_with_intact(tmp_path)
    message = _refusal(dumps, 1)
    assert "larger than any Flight Recorder dump" in message and "1024 MiB limit" in message
    assert not opened.exists() and elapsed < 10


def test_a_file_that_grows_while_read_is_refused(tmp_path: Path) -> None:
    """Only as many bytes as were checked are read: a file still being written is refused."""
    _intact(tmp_path)
    (tmp_path / "rank_1").write_bytes(b"\x80\x02]q\x00.")
    (cand,) = [c for c in discover(tmp_path).candidates if c.rank == 1]
    (tmp_path / "rank_1").write_bytes(b"\x80\x02]q\x00" + b"N0" * 1000 + b".")
    (result,) = parallel.parse_candidates([cand])
    assert "the file grew while it was read" in str(result)


def _op(code: bytes, fmt: str, value: int) -> bytes:
    return code + struct.pack(fmt, value)


def _tuple_dag_key(levels: int) -> bytes:
    """{T: 1} where T = (T', T'), T' = (T'', T'')...: ~7 bytes a level; hashing T visits
    2**levels leaves (the C unpickler hashes every dict key)."""
    body = b")q\x00"
    for i in range(levels):
        body += b"0h" + bytes([i]) + b"h" + bytes([i]) + b"\x86q" + bytes([i + 1])
    return b"\x80\x02}" + body + b"K\x01s."


def _list_dag(levels: int) -> Any:
    node: Any = [1, 2]
    for _ in range(levels):
        node = [node, node]
    return node


def _shared(value: Any, copies: int) -> list[Any]:
    return [value] * copies


# (name, pickle bytes or a payload to pickle, acceptable outcomes): every one must finish
# in bounded time and memory, with the intact rank loaded.
BOMBS: list[tuple[str, Callable[[], bytes], str]] = [
    # memo: LONG_BINPUT with a huge index makes the C unpickler grow (and zero) its memo
    # table to twice that many slots: 32 GB from 7 bytes
    ("memo_index_2e31", lambda: _op(b"\x80\x02]r", "<I", 2**31 - 1) + b".", "refused"),
    ("memo_index_3e8", lambda: _op(b"\x80\x02]r", "<I", 300_000_000) + b".", "refused"),
    # length claims far beyond the data: LONG4, BINUNICODE(8), BINBYTES(8), FRAME
    ("long4_claim", lambda: _op(b"\x80\x02\x8b", "<i", 2**31 - 1) + b"\x01.", "refused"),
    ("binunicode_claim", lambda: _op(b"\x80\x02X", "<I", 2**32 - 1) + b"ab.", "refused"),
    ("binunicode8_claim", lambda: _op(b"\x80\x04\x8d", "<Q", 2**62) + b"ab.", "refused"),
    ("binbytes_claim", lambda: _op(b"\x80\x03B", "<I", 2**32 - 1) + b"ab.", "refused"),
    ("binbytes8_claim", lambda: _op(b"\x80\x04\x8e", "<Q", 2**40) + b"ab.", "refused"),
    ("frame_claim", lambda: _op(b"\x80\x04\x95", "<Q", 2**40) + b"N.", "refused"),
    # a tuple nested 300,000 deep as a dict key: hashing it overflows the C stack (SIGSEGV)
    ("deep_tuple_key", lambda: b"\x80\x02}" + b")" + b"\x85" * 300_000 + b"K\x01s.", "refused"),
    # 64 levels of shared tuples as a dict key: 2**64 steps to hash, from 450 bytes
    ("tuple_dag_key", lambda: _tuple_dag_key(64), "refused"),
    # 8 MB of EMPTY_SET: 216 bytes of memory per byte of file
    ("empty_set_amplifier", lambda: b"\x80\x04(" + b"\x8f" * 8_000_000 + b"l.", "refused"),
    # more entries than any buffer: one entry referenced MAX_ENTRIES + 1 times (~3 MB)
    (
        "entries_by_reference",
        lambda: pickle.dumps(make_dump(_shared(make_entry(), MAX_ENTRIES + 1)), protocol=2),
        "refused",
    ),
    # expansions the loader must never perform: shared sub-lists (a memo DAG)
    (
        "sizes_shared_rows",
        lambda: pickle.dumps(
            make_dump(_shared(make_entry(input_sizes=_shared(list(range(10_000)), 10_000)), 200)),
            protocol=2,
        ),
        "any",
    ),
    (
        "sizes_dag",
        lambda: pickle.dumps(make_dump([make_entry(input_sizes=_list_dag(64))]), protocol=2),
        "loaded",
    ),
    (
        "dtypes_dag",
        lambda: pickle.dumps(make_dump([make_entry(input_dtypes=_list_dag(64))]), protocol=2),
        "loaded",
    ),
    (
        "scalar_fields_dag",
        lambda: pickle.dumps(
            make_dump(
                [
                    make_entry(
                        retired=_list_dag(64),
                        time_created_ns=_list_dag(64),
                        duration_ms=_list_dag(64),
                        state=_list_dag(64),
                        collective_seq_id=_list_dag(64),
                    )
                ]
            ),
            protocol=2,
        ),
        "loaded",
    ),
    (
        "frames_dag",
        lambda: pickle.dumps(
            make_dump([make_entry(frames=_list_dag(64)), make_entry(frames=[_list_dag(64)])]),
            protocol=2,
        ),
        "loaded",
    ),
    (
        "frames_shared_long",
        lambda: pickle.dumps(
            make_dump(_shared(make_entry(frames=_shared(make_entry()["frames"][0], 50_000)), 5000)),
            protocol=2,
        ),
        "loaded",
    ),
    (
        "process_group_dag",
        lambda: pickle.dumps(
            make_dump([make_entry(process_group=(_list_dag(64), _list_dag(64)))]), protocol=2
        ),
        "loaded",
    ),
    (
        "pg_config_dag",
        lambda: pickle.dumps(
            make_dump(
                [make_entry()],
                pg_config={"0": {"name": _list_dag(64), "desc": "x", "ranks": _list_dag(64)}},
                pg_status={"0": _list_dag(64)},
                version=_list_dag(64),
                comm_lib_version=_list_dag(64),
            ),
            protocol=2,
        ),
        "loaded",
    ),
    # deep nesting (the C unpickler is not recursive; repr and Arrow would be)
    (
        "deep_list_field",
        lambda: pickle.dumps(make_dump([make_entry(input_sizes="DEEP")]), protocol=2).replace(
            b"X\x04\x00\x00\x00DEEP", b"]" * 1_000_000 + b"a" * 999_999
        ),
        "loaded",
    ),
    ("deep_json", lambda: b"[" * 1_000_000 + b"]" * 1_000_000, "refused"),
    ("huge_json_number", lambda: b'{"version": ' + b"9" * 100_000 + b"}", "refused"),
    (
        "huge_pickle_numbers",
        lambda: pickle.dumps(
            make_dump(
                [make_entry(collective_seq_id=10**20000, input_sizes=[[10**20000]])],
                version=10**20000,
                pg_status={"0": {"last_enqueued_collective": 10**20000}},
            ),
            protocol=2,
        ),
        "loaded",
    ),
]


@pytest.mark.parametrize(("name", "make", "expect"), BOMBS, ids=[b[0] for b in BOMBS])
def test_bombs_are_refused_or_loaded_in_bounded_time_and_memory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    make: Callable[[], bytes],
    expect: str,
) -> None:
    """Each bomb: a one-line refusal or a load, within seconds and the worker's memory limit;
    the intact rank always loads."""
    monkeypatch.setattr(parallel, "FILE_TIMEOUT_S", 2.0)  # the hashing bomb never ends
    data = make()
    dumps, elapsed = _load_next_to_intact(tmp_path, "rank_1", data)
    assert elapsed < 30, f"{name} took {elapsed:.1f} s"
    if expect == "refused":
        _refusal(dumps, 1)
    elif expect == "loaded":
        assert 1 in dumps.loaded_ranks, [p.message for p in dumps.problems]
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert peak_mib < MAX_RSS_MIB, f"a loader worker reached {peak_mib:.0f} MiB"


def test_the_reader_crashing_or_hanging_costs_only_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several workers, a file that kills its reader and one that stalls it among good ones:
    those two are refused with the reason, every other rank loads."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "FILE_TIMEOUT_S", 2.0)
    for rank in range(8):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=10))
    (tmp_path / "rank_8").write_bytes(b"\x80\x02}" + b")" + b"\x85" * 300_000 + b"K\x01s.")
    (tmp_path / "rank_9").write_bytes(_tuple_dag_key(64))
    dumps = load_dumps(tmp_path, jobs=3)
    assert dumps.loaded_ranks == tuple(range(8))
    crashed, stalled = _refusal(dumps, 8), _refusal(dumps, 9)
    assert "crashed (killed by SIGSEGV)" in crashed
    assert "took longer than 2 s" in stalled


def test_the_file_sent_ahead_to_a_stalled_reader_is_read_by_its_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker, each file sent a file ahead (``parallel.IN_FLIGHT``): the file queued
    behind one that stalls its reader is read by the worker started in its place; only the
    stalled file is refused, and the tables keep file order."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "FILE_TIMEOUT_S", 2.0)
    for rank in range(6):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=6))
    (tmp_path / "rank_2").write_bytes(_tuple_dag_key(64))
    dumps = load_dumps(tmp_path, jobs=1)
    assert dumps.loaded_ranks == (0, 1, 3, 4, 5)
    assert "took longer than 2 s" in _refusal(dumps, 2)
    assert dumps.entries.column("rank").to_pylist() == [0, 1, 3, 4, 5]


def test_absurd_rank_numbers_are_not_taken_at_face_value(tmp_path: Path) -> None:
    """A file named rank 10**12 is skipped; a group claiming rank 10**12 is unreadable (not a
    world of 10**12 ranks); a rank name with a newline is skipped (messages are one line)."""
    dump = make_dump([make_entry()], world=2)
    dump["pg_config"]["1"] = {"name": "1", "desc": "tp", "ranks": "[0, 1, 1000000000000]"}
    write_pickle(tmp_path / "rank_0", dump)
    write_pickle(tmp_path / "rank_1000000000000", make_dump([make_entry()]))
    write_pickle(tmp_path / f"rank_{MAX_WORLD_SIZE}", make_dump([make_entry()]))
    write_pickle(tmp_path / "ra\nnk_1", make_dump([make_entry()]))
    dumps = load_dumps(tmp_path)
    assert dumps.loaded_ranks == (0,) and dumps.world.size == 2
    reasons = {s.path.name: s.reason for s in dumps.skipped}
    assert "beyond any job's world size" in reasons["rank_1000000000000"]
    assert "beyond any job's world size" in reasons[f"rank_{MAX_WORLD_SIZE}"]
    assert "control" in reasons["ra\nnk_1"]
    (row,) = [g for g in dumps.groups.to_pylist() if g["group_name"] == "1"]
    assert row["ranks"] is None and not row["trusted"]


def test_nothing_readable_is_still_one_line(tmp_path: Path) -> None:
    """Every file a bomb: the input error names the directory and the first reason."""
    (tmp_path / "rank_0").write_bytes(_op(b"\x80\x02]r", "<I", 2**31 - 1) + b".")
    with pytest.raises(NoReadableDumps) as info:
        load_dumps(tmp_path)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


# --------------------------------------------------------------------------------------------
# What the fuzzing found: each input once, so the fix stays whatever the seed


def _p(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=2)


# (name, file content, "loaded" or "refused", words of the problem message if any); before
# the fix each of these stopped the whole load with a traceback, refused the whole file for
# one bad field, or took seconds and gigabytes
FOUND: list[tuple[str, Callable[[], bytes], str, str]] = [
    (
        "pg_status_value_past_int64",  # OverflowError building the pg_status table: no load
        lambda: _p(make_dump([make_entry()], pg_status={"0": {"last_enqueued_collective": 2**70}})),
        "loaded",
        "",
    ),
    (
        "group_rank_2e9",  # world size 2*10**9: missing_ranks ran out of memory
        lambda: _p(
            make_dump(
                [make_entry()],
                pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 2000000000]"}},
            )
        ),
        "loaded",
        "",
    ),
    (
        "lone_surrogate_strings",  # UnicodeEncodeError building the tables: no load
        lambda: _p(
            make_dump(
                [make_entry(frames=[{"name": "\udcff", "filename": "x", "line": 1}])],
                version="\udcff",
                pg_config={"0": {"name": "\udcff", "desc": "\udcff", "ranks": "[0, 1]"}},
                comm_lib_version="\udcff",
            )
        ),
        "loaded",
        "unrecognised format version",
    ),
    (
        "p2p_peer_past_int32",  # OverflowError: the whole file refused
        lambda: _p(make_dump([make_entry(profiling_name="nccl:send 99999999999999999999->0")])),
        "loaded",
        "",
    ),
    (
        "none_inside_sizes",  # TypeError in the size rules of the analysis
        lambda: _p(make_dump([make_entry(input_sizes=[[None]]), make_entry(record_id=1)])),
        "loaded",
        "'input_sizes' has values of the wrong type",
    ),
    (
        "version_of_5000_digits",  # ValueError from int(): the whole file refused
        lambda: _p(make_dump([make_entry()], version="1" * 5000)),
        "loaded",
        "unrecognised format version",
    ),
    (
        "list_inside_process_group",  # TypeError (unhashable): the whole file refused
        lambda: _p(make_dump([make_entry(process_group=(["x"], "d"))])),
        "loaded",
        "malformed process_group",
    ),
    (
        "dtypes_as_a_string",  # "Float" was read as 5 dtypes F, l, o, a, t
        lambda: _p(make_dump([make_entry(input_dtypes="Float")])),
        "loaded",
        "'input_dtypes' has values of the wrong type",
    ),
    (
        "int_of_5000_digits_in_sizes",  # ValueError from repr(): the whole file refused
        lambda: _p(make_dump([make_entry(input_sizes=[[10**5000]])])),
        "loaded",
        "'input_sizes' has values of the wrong type",
    ),
    (
        "carriage_return_in_a_global_name",  # the refusal message spanned two lines
        lambda: b"cos\rx\nsystem\n.",
        "refused",
        "refused to load: the pickle asks for os\\rx.system",
    ),
    (
        "memo_index_from_one_damaged_byte",  # 4.8 GB allocated and zeroed, 4 s, then loaded
        lambda: b"\x80\x02]r" + (300_000_000).to_bytes(4, "little") + b".",
        "refused",
        "a damaged length or memo index",
    ),
    (
        "bytearray8_claiming_exabytes",  # CPython printed a SystemError on the terminal
        lambda: b"\x80\x05\x96" + (7 << 60).to_bytes(8, "little") + b"xyz.",
        "refused",
        "a damaged length or memo index",
    ),
]


@pytest.mark.parametrize(("name", "make", "expect", "words"), FOUND, ids=[f[0] for f in FOUND])
def test_what_the_fuzzing_found_stays_fixed(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    name: str,
    make: Callable[[], bytes],
    expect: str,
    words: str,
) -> None:
    """The inputs behind the bugs the fuzzing found: a warning or a one-line refusal now."""
    dumps, elapsed = _load_next_to_intact(tmp_path, "rank_1", make())
    assert elapsed < 10
    messages = " ".join(p.message for p in dumps.problems if p.rank == 1)
    if expect == "loaded":
        assert 1 in dumps.loaded_ranks, messages
    else:
        _refusal(dumps, 1)
    assert words in messages
    assert capfd.readouterr().err == ""  # nothing printed by frtrace or its workers
