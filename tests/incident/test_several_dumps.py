"""Several dumps of one rank in one folder: one process's recorders, or two incidents
(``frtrace.incident.recorders``, stage 0 proving it from the files' bytes)."""

from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path

import pytest

from frtrace.errors import SeveralDumpSets
from frtrace.incident.discover import discover
from frtrace.incident.listing import Candidate
from frtrace.incident.recorders import NEAR_NS, Sniffed, one_process, sniff
from tests.conftest import FIXTURES, GLOO, GLOO_JSON

RECORDERS = FIXTURES / "recorders"


def _two_dumps_a_rank(dst: Path, pickles: Path, jsons: Path) -> Path:
    for src in sorted(pickles.glob("rank_*")):
        shutil.copy(src, dst / src.name)
    for src in sorted(jsons.glob("rank_*.json")):
        shutil.copy(src, dst / src.name)
    return dst


def test_the_pickle_and_json_of_one_process_are_read_together() -> None:
    """The two dumps torch 2.13 writes of one recorder (real: recorders/pickle_and_json): one
    set, both files of every rank kept, one line saying so."""
    found = discover(RECORDERS / "pickle_and_json")
    assert [(c.rank, c.relative) for c in found.candidates] == [
        (r, name) for r in range(4) for name in (f"rank_{r}", f"rank_{r}.json")
    ]
    said = [p.message for p in found.problems]
    assert len(said) == 1 and "rank_* and rank_*.json are dumps of the same processes" in said[0]


@pytest.mark.parametrize("scenario", ["never_joins", "mesh_stall", "healthy"])
def test_two_jobs_dumps_under_two_patterns_stay_two_sets(tmp_path: Path, scenario: str) -> None:
    """One job's pickles beside another job's JSON (the same ranks, the same backend, no
    instant in common): two incidents, refused as before."""
    other = "late_rank"
    for src in sorted((GLOO / scenario).glob("rank_*")):
        shutil.copy(src, tmp_path / src.name)
    for src in sorted((GLOO_JSON / other).glob("rank_*.json")):
        if (tmp_path / src.name.removesuffix(".json")).exists():
            shutil.copy(src, tmp_path / src.name)
    with pytest.raises(SeveralDumpSets):
        discover(tmp_path)


def test_the_same_processes_dumps_are_read_together_however_they_arrive(tmp_path: Path) -> None:
    """Compressed one by one, or packed in an archive: stage 0 reads the same bytes."""
    gz = tmp_path / "gz"
    gz.mkdir()
    both = _two_dumps_a_rank(tmp_path, GLOO / "never_joins", GLOO_JSON / "never_joins")
    for src in sorted(both.glob("rank_*")):
        (gz / f"{src.name}.gz").write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    assert len(discover(gz).candidates) == 8
    archive = tmp_path / "set.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for src in sorted(tmp_path.glob("rank_*")):
            tar.add(src, src.name)
    assert len(discover(archive).candidates) == 8


def test_two_recorders_of_one_clock_are_one_process_and_far_apart_are_not(tmp_path: Path) -> None:
    """The cpu:gloo,cuda:nccl layout (recorders/gloo_nccl): each rank's Gloo and NCCL dumps
    read together; the same NCCL dumps as they left frsim (hours away from the Gloo job's
    clock) are another job's."""
    found = discover(RECORDERS / "gloo_nccl")
    assert len(found.candidates) == 16 and {c.rank for c in found.candidates} == set(range(8))
    for r in range(8):
        shutil.copy(RECORDERS / "gloo_nccl" / f"comm_lib_trace_gloo_rank_{r}", tmp_path)
        shutil.copy(
            FIXTURES / "nccl/host_stall/2.10-pickle" / f"nccl_trace_rank_{r}",
            tmp_path / f"comm_lib_trace_rank_{r}",
        )
    with pytest.raises(SeveralDumpSets):
        discover(tmp_path)


def test_the_proof_rules() -> None:
    """One recorder: an instant in common; two recorders: times within NEAR_NS; nothing from a
    file that could not be scanned or names no backend."""
    t = 1_800_000_000_000_000_000
    gloo = Sniffed(frozenset({"gloo"}), frozenset({t, t + 10}))
    assert one_process([gloo, Sniffed(frozenset({"gloo"}), frozenset({t + 10, t + 99}))])
    assert not one_process([gloo, Sniffed(frozenset({"gloo"}), frozenset({t + 11}))])
    near = Sniffed(frozenset({"nccl"}), frozenset({t + 10 + NEAR_NS}))
    far = Sniffed(frozenset({"nccl"}), frozenset({t + 11 + NEAR_NS}))
    assert one_process([gloo, near]) and not one_process([gloo, far])
    assert not one_process([gloo, None]) and not one_process([gloo])
    assert not one_process([gloo, Sniffed(frozenset(), frozenset({t}))])


def test_sniff_reads_pickle_and_json_alike() -> None:
    """The backends and the nanosecond instants of one rank's pickle and JSON are the same."""

    def of(path: Path) -> Sniffed | None:
        size = path.stat().st_size
        cand = Candidate(path=path, rank=0, prefix="rank_", encoding="auto", size_bytes=size)
        return sniff(cand)

    pickled, as_json = of(GLOO / "mesh_stall/rank_0"), of(GLOO_JSON / "mesh_stall/rank_0.json")
    assert pickled is not None and as_json is not None
    assert pickled.backends == as_json.backends == {"gloo"}
    assert pickled.instants and pickled.instants == as_json.instants
