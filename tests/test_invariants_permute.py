"""Ranks renumbered, and onlyActive dumps (issue 50, item 1): what must not change the answer.

**Ranks renumbered** (``tests/transforms.py``'s ``permuted_ranks``): every rank ``r`` of every
file (dumps, ``pg_config``, p2p entries' group-local ranks, sidecars, manifests, logs'
names and prefixes, torch's messages) called ``perm[r]``. The culprits, the suspects, the
ranks loaded and the ranks unreadable are the originals renumbered, the verdict the same.
Two permutations, each where it is sound (``permuted_ranks`` says which are):

- ``keep0``, ``r -> -r mod world`` (the ranks reversed, then rotated by one: rank 0 stays),
  on every fixture set (``tests/conftest.py``'s ``fixture_sets()`` and the incident folders
  whole, as ``test_invariants_transforms.py`` takes them);
- ``reversed``, ``r -> world - 1 - r``, on a sample of sets whose evidence gives rank 0 no
  role of its own (``monitored_barrier``'s coordinator, the DETAIL check that
  ``TORCH_DISTRIBUTED_DEBUG`` adds: there, moving rank 0 writes evidence torch cannot).

**onlyActive dumps** (``only_active``): every dump as torch writes it with
``onlyActive=True`` (completed entries dropped). A set whose answer as committed is a hang
keeps its verdict, culprits and suspects. (A Gloo dump is unchanged by it: its entries never
complete; the simulated NCCL sets are the ones it changes.)

Known exceptions (strict xfail, each says why): a renumbering that makes the rank without a
dump the highest, where the dumps alone say how many ranks the job had; onlyActive dumps of
torch 2.4 (no ``pg_status``) and of a deadlock whose evidence was in completed entries only.

Cost (2 cores): each set analysed once as committed (cached), then once per case in this
process (``jobs=1``): about 165 + 19 renumbered and 90 onlyActive analyses (the hangs), about
40 s of CPU (100 s of wall time on a machine shared with other work).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import json
import lzma
import pickle
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from frtrace.model import Report, Verdict
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES
from tests.test_invariants_transforms import ONE_FORMAT, SAMPLE, SETS
from tests.transforms import only_active, permuted_ranks, reversed_ranks

# The permutations, by name: world -> perm.
PERMS = {"keep0": lambda world: reversed_ranks(world, 1), "reversed": reversed_ranks}
# What makes rank 0's place in the evidence its own (torch's monitored_barrier: rank 0
# coordinates it; the DETAIL check wraps every collective in one).
_RANK0_ROLE = re.compile(rb"monitoredBarrier|monitored_barrier|Detected mismatch between collec")
_UNPACK = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}

_PERMUTE_XFAIL = {
    ("incidents/ray_logs", "keep0"): "rank 1, without a dump, is renumbered 3, the highest: "
    "the world is then the dumps' highest rank plus one (3: Gloo's pg_config lists no world), "
    "so Ray's table and rank 3's own logs are dropped as outside the job and no rank is "
    "suspected (cannot_tell); the launcher's ranks do not count in the world size",
    ("incidents/shrinking_world", "keep0"): "two worlds in one folder: attempt 0's rank 3 is "
    "outside the judged attempt's world of 3, which the permutation is of",
}
_ONLY_ACTIVE_XFAIL = {
    "nccl/host_stall/2.1-pickle": "torch 2.4 dumps (format 2.1) have no pg_status: the per-op "
    "entries of finished p2p batches (their closing entries dropped) cannot be settled, and "
    "ranks 1 and 5 read as waiting on each other in mesh_pp: a deadlock names 1 with 5",
    "nccl/opposite_order/2.10-pickle": "every default_pg entry of the ranks but 5 completed and "
    "was dropped: only their pg_status says they never enqueued all_reduce #5, and a pg_id is "
    "joined to its group only through the rank's own entries: rank 5's wait on rank 0 is "
    "unseen, the deadlock is not found (cannot_tell)",
    "nccl/opposite_order/2.4-json": "as 2.10-pickle: rank 5's wait on rank 0 in default_pg is "
    "known only to rank 0's pg_status, which no entry joins to the group (cannot_tell)",
}

Answer = tuple[str, tuple[int, ...], tuple[int, ...]]


@functools.cache
def _untransformed(name: str) -> Report:
    return analyze(FIXTURES / name, jobs=1)


def _answer(report: Report) -> Answer:
    return report.verdict.value, report.culprit_ranks, report.suspected_ranks


def _renumbered(ranks: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(perm[r] for r in ranks))


@functools.cache
def _rank0_has_a_role(name: str) -> bool:
    """Whether any file of the set (a compressed one unpacked) names what gives rank 0 a
    role of its own."""
    for path in sorted((FIXTURES / name).rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        unpack = _UNPACK.get(path.suffix.lower())
        if _RANK0_ROLE.search(unpack(data) if unpack else data):
            return True
    return False


def _marked(name: str, perm: str, xfail: dict[Any, str], key: Any) -> Any:
    why = xfail.get(key)
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(name, perm, marks=marks, id=f"{name}-{perm}")


PERMUTE_CASES = [_marked(n, "keep0", _PERMUTE_XFAIL, (n, "keep0")) for n in ONE_FORMAT] + [
    _marked(n, "reversed", _PERMUTE_XFAIL, (n, "reversed"))
    for n in SAMPLE
    if not _rank0_has_a_role(n)
]


def test_the_samples_are_of_sets_that_are_there() -> None:
    named = {n for n, _ in _PERMUTE_XFAIL} | set(_ONLY_ACTIVE_XFAIL)
    assert named <= set(SETS), sorted(named - set(SETS))
    assert sum(1 for n in SAMPLE if not _rank0_has_a_role(n)) >= 10


@pytest.mark.parametrize(("name", "perm_name"), PERMUTE_CASES)
def test_renumbered_ranks_renumber_the_answer(tmp_path: Path, name: str, perm_name: str) -> None:
    before = _untransformed(name)
    perm = PERMS[perm_name](before.world_size)
    permuted_ranks(FIXTURES / name, tmp_path / "set", perm)
    after = analyze(tmp_path / "set", jobs=1)
    want = (
        before.verdict.value,
        _renumbered(before.culprit_ranks, perm),
        _renumbered(before.suspected_ranks, perm),
    )
    assert _answer(after) == want, (name, perm)
    assert after.ranks_loaded == _renumbered(before.ranks_loaded, perm), (name, perm)
    assert after.ranks_unreadable == _renumbered(before.ranks_unreadable, perm), (name, perm)


def _only_active_cases() -> list[Any]:
    return [
        pytest.param(
            n,
            marks=[pytest.mark.xfail(strict=True, reason=_ONLY_ACTIVE_XFAIL[n])]
            if n in _ONLY_ACTIVE_XFAIL
            else [],
            id=n,
        )
        for n in ONE_FORMAT
    ]


@pytest.mark.parametrize("name", _only_active_cases())
def test_only_active_dumps_of_a_hang_get_the_same_answer(tmp_path: Path, name: str) -> None:
    """Of a set whose answer as committed is a hang (its other sets: skipped)."""
    before = _untransformed(name)
    if before.verdict != Verdict.HANG:
        pytest.skip(f"{before.verdict.value}: onlyActive dumps of a hang only")
    only_active(FIXTURES / name, tmp_path / "set")
    after = analyze(tmp_path / "set", jobs=1)
    assert _answer(after) == _answer(before), name
    assert after.ranks_loaded == before.ranks_loaded, name


# ---- the transforms themselves ------------------------------------------------------------


def _doc(path: Path) -> Any:
    data = path.read_bytes()
    return pickle.loads(data) if data[:1] == b"\x80" else json.loads(data)


def _members(doc: dict[str, Any], entry: dict[str, Any]) -> list[int]:
    group = doc["pg_config"][str(entry["process_group"][0])]
    members: list[int] = json.loads(group["ranks"])
    return members


_P2P = re.compile(r"(send|recv) (\d+)(?:->|<-)(\d+)$")


@pytest.mark.parametrize("perm_name", sorted(PERMS))
def test_renumbered_p2p_entries_name_the_renumbered_peers(tmp_path: Path, perm_name: str) -> None:
    """Every p2p entry of the renumbered set names, through its group's sorted member list,
    the renumbered rank itself and the renumbered peer; every group lists its own rank."""
    src = FIXTURES / "nccl/p2p_no_peer/2.10-pickle"
    perm = PERMS[perm_name](8)
    assert perm != list(range(8))
    permuted_ranks(src, tmp_path / "set", perm)
    seen = 0
    for rank in range(8):
        old = _doc(src / f"nccl_trace_rank_{rank}")
        new = _doc(tmp_path / f"set/nccl_trace_rank_{perm[rank]}")
        assert all(perm[rank] in json.loads(g["ranks"]) for g in new["pg_config"].values())
        for was, now in zip(old["entries"], new["entries"], strict=True):
            m, n = _P2P.search(was["profiling_name"]), _P2P.search(now["profiling_name"])
            assert (m is None) == (n is None)
            if m is None or n is None:
                assert now == was
                continue
            old_members, new_members = _members(old, was), _members(new, now)
            assert new_members == sorted(new_members)
            assert new_members[int(n[2])] == perm[old_members[int(m[2])]] == perm[rank]
            assert new_members[int(n[3])] == perm[old_members[int(m[3])]]
            seen += 1
    assert seen > 40


def test_renumbered_logs_say_the_renumbered_ranks(tmp_path: Path) -> None:
    """torch's own words and torchrun's folders and prefixes: under ``keep0`` rank 3 of four
    is rank 1 (its log folder ``attempt_0/1/``) and rank 1 is rank 3 (its lines
    ``[default3]:[rank3]:``)."""
    src = FIXTURES / "gloo_evidence/monitored_barrier__exception"
    permuted_ranks(src, tmp_path / "set", reversed_ranks(4, 1))
    log = (tmp_path / "set/torchrun.log").read_text()
    was = (src / "torchrun.log").read_text()
    assert "Rank 3 failed to pass monitoredBarrier" in was
    assert "Rank 1 failed to pass monitoredBarrier" in log
    assert "Rank 3 failed to pass" not in log
    assert log.count("[default3]:[rank3]:") == was.count("[default1]:[rank1]:") > 0
    own = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    renamed = sorted(
        p.relative_to(tmp_path / "set").as_posix() for p in (tmp_path / "set").rglob("*")
    )
    assert len([p for p in renamed if "/attempt_0/1/" in p]) == len(
        [p for p in own if "/attempt_0/3/" in p]
    )
    assert sorted(p for p in renamed if "comm_lib_trace_rank_" in p) == [
        "comm_lib_trace_rank_0",
        "comm_lib_trace_rank_2",
        "comm_lib_trace_rank_3",
    ]


def test_only_active_drops_exactly_the_completed_entries(tmp_path: Path) -> None:
    """Of torch 2.5+ dumps: every entry whose completion was discovered, none else; of
    torch 2.2/2.3 dumps (no onlyActive): nothing."""
    for name, changes in (
        ("nccl/host_stall/2.10-pickle", True),
        ("nccl/host_stall/1.4-pickle", False),
    ):
        src = FIXTURES / name
        only_active(src, tmp_path / name)
        for path in sorted(src.iterdir()):
            old, new = _doc(path), _doc(tmp_path / name / path.name)
            kept = [e for e in old["entries"] if not e["time_discovered_completed_ns"]]
            assert new["entries"] == (kept if changes else old["entries"])
            assert {k: v for k, v in new.items() if k != "entries"} == {
                k: v for k, v in old.items() if k != "entries"
            }
            assert len(kept) < len(old["entries"])
