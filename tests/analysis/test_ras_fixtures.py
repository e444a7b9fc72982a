"""NCCL RAS's answers beside real dump sets (issue 52, item 4): what the report adds from them
(hosts and pids, dead ranks, launch counts that differ), the disagreement it says ("RAS says
RUNNING while rank 4's broadcast #67 has been pending"), all against the truth each fixture
was built from (``tests/fixtures/ras/MANIFEST.json``); RAS never names a rank by itself, its
ranks are the job's only where they can be told, and its answer is the same however the
folder reaches frtrace.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from frtrace.detail.ras import RasCommNote, RasRead, RasRunning
from frtrace.model import Basis, NamedAs, Report
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import report_to_dict
from frtrace.report.json_schema import report_schema
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES
from tests.transforms import SKEWS, TRANSFORMS

RAS = FIXTURES / "ras"
MANIFEST: dict[str, Any] = json.loads((RAS / "MANIFEST.json").read_text())


def incident(name: str, where: Path, files: dict[str, str] | None = None) -> Path:
    """The fixture's dump set with its RAS files beside (or ``files``: name -> text)."""
    folder = where / name
    shutil.copytree(FIXTURES / MANIFEST[name]["dumps"], folder)
    if files is None:
        files = {p.name: p.read_text() for p in (RAS / name).iterdir()}
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


@functools.cache
def with_ras(name: str, tmp: Path) -> Report:
    return analyze(incident(name, tmp), jobs=1)


@functools.cache
def without_ras(name: str) -> Report:
    return analyze(FIXTURES / MANIFEST[name]["dumps"], jobs=1)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ras")


def _notes(report: Report) -> tuple[RasRead, list[RasCommNote]]:
    (read,) = [n for n in report.data_notes if isinstance(n, RasRead)]
    return read, [n for n in report.data_notes if isinstance(n, RasCommNote)]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_ras_never_names_anyone(name: str, tmp: Path) -> None:
    """The verdict, culprits and suspects are the dumps'; the roles too."""
    report, alone = with_ras(name, tmp), without_ras(name)
    assert report.verdict == alone.verdict
    assert (
        report.culprit_ranks
        == alone.culprit_ranks
        == tuple(MANIFEST[name]["truth"]["culprit_ranks"])
    )
    assert report.suspected_ranks == alone.suspected_ranks
    assert [(n.rank, n.role) for n in report.named_ranks] == [
        (n.rank, n.role) for n in alone.named_ranks
    ]
    assert report.fingerprint == alone.fingerprint


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_what_ras_adds_is_the_truth(name: str, tmp: Path) -> None:
    """Hosts and pids (where nothing else gave them), dead ranks, the ranks behind in each
    communicator, how many communicators are healthy: as the fixture was built."""
    truth = MANIFEST[name]["truth"]
    report = with_ras(name, tmp)
    read, comms = _notes(report)
    assert read.healthy == truth["healthy"] and read.unmatched == 0
    for rank, (host, pid) in truth["hosts"].items():
        assert (report.processes[int(rank)].host, report.processes[int(rank)].pid) == (host, pid)
    assert set(read.hosts) == {int(r) for r in truth["hosts"]}
    dead = {r for n in comms for r in n.dead}
    assert dead == set(truth["dead"]) and set(read.dead) == set(truth["dead"])
    behind = {
        f"{n.group.desc} {list(n.group.members)}": {
            s.function: list(s.counts[0][1]) for s in n.skew
        }
        for n in comms
        if n.skew and n.group is not None
    }
    assert behind == truth["behind"]
    assert all(n.job_ranks for n in comms)
    assert all(n.behind_named for n in comms if n.skew)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_running_while_pending(name: str, tmp: Path) -> None:
    """Where RAS calls the pending op's communicator RUNNING, every rank answering: said, with
    the rank, op and sequence number the dumps show pending; nowhere else."""
    said = [d for d in with_ras(name, tmp).disagreements if isinstance(d, RasRunning)]
    expected = MANIFEST[name]["truth"]["running_while_pending"]
    if expected is None:
        assert said == []
        return
    (d,) = said
    assert [d.group.name, d.rank, d.seq] == expected and d.hash is not None


def test_a_dead_rank_is_backed_by_ras(tmp: Path) -> None:
    """rank_dead: rank 3 left no dump (suspected, an inference); RAS saw its process dead:
    still suspected, its basis RAS, and it says so."""
    report = with_ras("rank_dead", tmp)
    (three,) = [n for n in report.named_ranks if n.rank == 3]
    assert three.role == NamedAs.SUSPECTED and three.basis == Basis.RAS
    assert "RAS: considered dead" in three.rests_on
    (alone,) = [n for n in without_ras("rank_dead").named_ranks if n.rank == 3]
    assert alone.basis == Basis.INFERRED


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_format_says_it(name: str, tmp: Path) -> None:
    report = with_ras(name, tmp)
    flat = " ".join(render_text(report).split())
    for text in (flat, render_markdown(report), render_html(report)):
        assert "NCCL RAS" in text
    if MANIFEST[name]["truth"]["running_while_pending"]:
        assert "is RUNNING, every rank answering" in flat
    if MANIFEST[name]["truth"]["dead"]:
        assert "rank 3 considered dead" in flat
    data = report_to_dict(report)
    assert data["ras"]["healthy"] == MANIFEST[name]["truth"]["healthy"]
    jsonschema.validate(data, report_schema())


@pytest.mark.parametrize("transform", sorted({**TRANSFORMS, **SKEWS}))
def test_the_same_however_the_folder_arrives(transform: str, tmp: Path, tmp_path: Path) -> None:
    """rank_dead and host_stall compressed, under a prefix, uploaded, file times scrambled,
    hosts' clocks apart: RAS says the same (its files named as they are now)."""
    for name in ("rank_dead", "host_stall"):
        moved = tmp_path / name
        {**TRANSFORMS, **SKEWS}[transform](incident(name, tmp_path / "src"), moved)
        report = analyze(moved, jobs=1)
        expected = with_ras(name, tmp)
        got, want = report_to_dict(report)["ras"], report_to_dict(expected)["ras"]
        assert [f.rsplit("/", 1)[-1] for f in got.pop("files")] == want.pop("files")
        assert got == want
        assert report.named_ranks == expected.named_ranks
        assert report.fingerprint == expected.fingerprint


def test_answers_merge_without_a_clock(tmp_path: Path) -> None:
    """Two answers, in either order of their names: a count is a rank's largest, dead is for
    good, a rank that answered once is not unresponsive, healthy only if always."""
    status = json.loads((RAS / "host_stall" / "ncclras.json").read_text())
    later = json.loads(json.dumps(status))
    tp = next(c for c in later["communicators"] if c["size"] == 2 and c["ranks"][1]["rank"] == 1)
    gone = tp["ranks"].pop(1)
    tp["missing_ranks"] = [{**gone, "status": {"unresponsive": True, "considered_dead": False}}]
    for c in later["communicators"]:
        for r in c["ranks"]:
            r["collective_counts"]["AllReduce"] += 1 if c["size"] == 8 and r["rank"] == 0 else 0
    prints = []
    for first, second in (("a", "b"), ("b", "a")):
        files = {
            f"ncclras-{first}.json": json.dumps(status),
            f"ncclras-{second}.json": json.dumps(later),
        }
        report = analyze(incident("host_stall", tmp_path / first, files), jobs=1)
        read, comms = _notes(report)
        prints.append(report_to_dict(report)["ras"] | {"files": None})
        assert read.healthy == 12  # (the tp communicator of the later answer is not)
        world = next(n for n in comms if n.size == 8)
        assert [(s.function, s.counts) for s in world.skew] == [
            ("AllReduce", ((4, tuple(range(1, 8))), (5, (0,))))
        ]
        assert all(not n.unresponsive for n in comms)  # (it answered in the other one)
    assert prints[0] == prints[1]


def test_ranks_that_cannot_be_told_stay_the_communicators(tmp_path: Path) -> None:
    """Without the communicator as large as the job (and no pid the job's files give), a
    subgroup's ranks are its own: said as "its rank", never a rank of the job; no host is
    given to any rank."""
    status = json.loads((RAS / "rank_dead" / "ncclras.json").read_text())
    status["communicators"] = [c for c in status["communicators"] if c["size"] != 8]
    report = analyze(incident("rank_dead", tmp_path, {"ncclras.json": json.dumps(status)}), jobs=1)
    read, comms = _notes(report)
    assert read.unmatched == len(status["communicators"]) and not read.hosts
    assert comms and all(not n.job_ranks and n.group is None for n in comms)
    assert not report.processes
    text = " ".join(render_text(report).split())
    assert "its rank 1 considered dead" in text
    (three,) = [n for n in report.named_ranks if n.rank == 3]
    assert three.basis == Basis.INFERRED  # (RAS's rank 1 of a pair is no rank of the job)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_the_cached_diagnosis_keeps_it(name: str, tmp: Path) -> None:
    """The codec of the diagnosis cache round-trips RAS's notes, disagreement and basis."""
    from frtrace.analysis.codec import decode_report, encode_report

    report = with_ras(name, tmp)
    assert decode_report(json.loads(json.dumps(encode_report(report)))) == report


def test_pids_the_jobs_files_give_tell_a_communicators_ranks(tmp_path: Path) -> None:
    """No communicator as large as the job, but collect's manifest gives each rank's pid (its
    host spelled as a name, RAS's as an address): a pid naming one process tells the ranks."""
    status = json.loads((RAS / "host_stall" / "ncclras.json").read_text())
    status["communicators"] = [c for c in status["communicators"] if c["size"] != 8]
    folder = incident("host_stall", tmp_path, {"ncclras.json": json.dumps(status)})
    ranks = [
        {"rank": int(r), "host": f"node-{int(r) // 4}", "pid": pid}
        for r, (_, pid) in MANIFEST["host_stall"]["truth"]["hosts"].items()
    ]
    manifest = {"format": "frtrace-collect", "version": 1, "host": "node-0", "ranks": ranks}
    (folder / "frtrace-collect.json").write_text(json.dumps(manifest))
    report = analyze(folder, jobs=1)
    read, comms = _notes(report)
    assert read.unmatched == 0 and not read.hosts  # (the manifest gave every host already)
    assert {n.group.desc for n in comms if n.group is not None} == {"mesh_tp", "mesh_dp"}
    assert all(n.job_ranks and n.behind_named for n in comms)
    assert report.processes[5].host == "node-1"


def test_a_monitors_events_alone(tmp_path: Path) -> None:
    """Only the monitor's PEER_DEAD, no status answer, no pid known: a dead process of no
    known rank, said by its pid and host; no rank is backed by it."""
    folder = incident("rank_dead", tmp_path, {})
    shutil.copy(RAS / "rank_dead" / "ncclras_monitor.json", folder)
    report = analyze(folder, jobs=1)
    read, comms = _notes(report)
    assert (read.comms, read.dead, comms) == (0, (), [])
    assert read.dead_processes == (("10.0.0.1", 4103),)
    text = " ".join(render_text(report).split())
    assert "its monitor's events only" in text and "pid 4103 on 10.0.0.1" in text
    assert all(n.basis != Basis.RAS for n in report.named_ranks)
