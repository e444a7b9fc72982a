"""One job's incident however it is laid out: one folder, one folder per host (``collect`` run
on each node into a shared folder), or an archive of either. Each gives the same answer: the
same dumps, the same stacks (the report's stack evidence names the rank's stack file), the
same logs and error files as evidence, the same verdict and culprits. Two different jobs are
still refused, with the ``--only`` that picks one whole job.

Built from the committed real fixtures (a hung Gloo job under torchrun with the recorder's
sidecars, py-spy text, torchrun's logs and ``error.json`` files), split by rank into
``host-a/`` (ranks 0-1, and the launcher's log) and ``host-b/`` (ranks 2-3), each with the
manifest ``collect`` writes.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from frtrace.cli import app
from frtrace.errors import SeveralDumpSets
from frtrace.incident.discover import discover
from frtrace.job.manifest import MANIFEST_NAME, CollectedRank, manifest_document
from tests.conftest import FIXTURES

JOB = FIXTURES / "gloo_evidence" / "pp_gpipe_exception__signal"  # ranks 0-3, culprit 2
OTHER_JOB = FIXTURES / "gloo_evidence" / "cycle_new_group__signal"  # ranks 0-2, other faults
HOSTS = {0: "host-a", 1: "host-a", 2: "host-b", 3: "host-b"}
_HOST = re.compile(r"^host-[ab]/")


def _rank_of(relative: str) -> int | None:
    """The rank a fixture file is about: its name's (dumps, stacks) or its torchrun folder's."""
    path = Path(relative)
    if m := re.search(r"_(\d+)(?:\.\w+)?$", path.name):
        return int(m[1])
    if path.parent.name.isdigit():
        return int(path.parent.name)  # logs/<job>/attempt_0/<rank>/stderr.log
    return None


def per_host(source: Path, into: Path, *, hosts: dict[int, str] = HOSTS) -> Path:
    """``source`` split by rank into ``into/<host>/`` (the same paths under each), with the
    manifest ``collect`` writes in each host's folder; files of no rank go to host-a."""
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source).as_posix()
        rank = _rank_of(relative)
        host = "host-a" if rank is None else hosts.get(rank, "host-a")
        (into / host / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, into / host / relative)
    for host in sorted(set(hosts.values())):
        ranks = [
            CollectedRank(
                rank=r,
                host=host,
                pid=4000 + r,
                dump=f"comm_lib_trace_rank_{r}",
                dumped_at_ns=(dump := source / f"comm_lib_trace_rank_{r}").stat().st_mtime_ns,
                size_bytes=dump.stat().st_size,
            )
            for r, h in hosts.items()
            if h == host
        ]
        doc = manifest_document(host, {"host": host, "pid": 1, "how": "local"}, "local", ranks)
        (into / host / MANIFEST_NAME).write_text(json.dumps(doc))
    return into


def packed(folder: Path, suffix: str) -> Path:
    """``tar czf NAME.tgz NAME`` (or ``zip -r NAME.zip NAME``) next to ``folder``."""
    archive = folder.with_name(folder.name + suffix)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                zf.write(path, f"{folder.name}/{path.relative_to(folder).as_posix()}")
    else:
        with tarfile.open(archive, "w:gz") as tar:
            for path in files:
                tar.add(path, f"{folder.name}/{path.relative_to(folder).as_posix()}")
    return archive


def analyze(source: Path, *args: str) -> tuple[dict[str, Any], Result]:
    result = CliRunner().invoke(app, ["analyze", str(source), "-f", "json", "--no-cache", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout), result


def stack_evidence(doc: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(rank, stack file, source) of each finding's stack evidence."""
    return [
        (w["rank"], w["file_name"], w["source"])
        for f in doc["findings"]
        for w in f.get("where") or ()
    ]


def without_host(name: str) -> str:
    return _HOST.sub("", name)


@pytest.fixture(scope="module")
def flat() -> dict[str, Any]:
    doc, _ = analyze(JOB)
    assert doc["verdict"] == "hang" and doc["culprit_ranks"] == [2]  # (what is compared)
    assert stack_evidence(doc) == [(2, "stacks_rank_2.json", "recorder")]
    assert "logs/pp_gpipe_exception/attempt_0/2/error.json" in doc["evidence_files"]
    return doc


@pytest.mark.parametrize("layout", ["per-host folders", ".tgz", ".zip", "flat .tgz"])
def test_every_layout_gives_the_folders_answer(
    tmp_path: Path, flat: dict[str, Any], layout: str
) -> None:
    """Verdict, culprits, the stacks used, the stack classes, the timeline and the files it
    cites are the folder's, per-host or packed; an archive reads its stacks and logs too."""
    if layout == "flat .tgz":
        source = packed(shutil.copytree(JOB, tmp_path / "incident"), ".tgz")
    else:
        source = per_host(JOB, tmp_path / "incident")
        if layout != "per-host folders":
            source = packed(source, layout)
    doc, _ = analyze(source)
    for key in ("verdict", "culprit_ranks", "headline", "world_size", "ranks_loaded", "stacks"):
        assert doc[key] == flat[key], key
    assert [f["code"] for f in doc["findings"]] == [f["code"] for f in flat["findings"]]
    assert stack_evidence(doc) == stack_evidence(flat)
    timeline = [(e["rank"], e["kind"], e["message"], e["source"]) for e in doc["timeline"]]
    expected = [(e["rank"], e["kind"], e["message"], e["source"]) for e in flat["timeline"]]
    assert sorted((r, k, m, without_host(s)) for r, k, m, s in timeline) == sorted(expected)
    read = [without_host(f) for f in doc["evidence_files"] if not f.endswith(MANIFEST_NAME)]
    assert sorted(read) == sorted(flat["evidence_files"])
    if layout != "flat .tgz":  # (collect's manifests: read from the folders and the archives)
        assert [f for f in doc["evidence_files"] if f.endswith(MANIFEST_NAME)] == [
            f"host-a/{MANIFEST_NAME}",
            f"host-b/{MANIFEST_NAME}",
        ]
        # (each entry names its rank's dump beside it, of its size: believed, no line)
        assert not [p for p in doc.get("evidence_problems", ()) if MANIFEST_NAME in p]
    assert not list(tmp_path.glob("*/incident"))  # (an archive: nothing extracted)


@pytest.mark.parametrize("suffix", [".tgz", ".zip"])
def test_an_archive_reads_what_its_folder_reads(tmp_path: Path, suffix: str) -> None:
    """Per-host folders and their archive: the same dumps, side files (each as the same kind)
    and report, all but the source's name; summary says so for both (one discovery)."""
    folder = per_host(JOB, tmp_path / "incident")
    archive = packed(folder, suffix)
    here, there = discover(folder), discover(archive)
    assert [c.relative for c in there.candidates] == [c.relative for c in here.candidates]
    assert [(f.relative, f.kind) for f in there.side_files] == [
        (f.relative, f.kind) for f in here.side_files
    ]
    assert not here.skipped and not there.skipped and not here.problems
    assert {f.kind for f in here.side_files} == {"stacks", "log", "error_file", "manifest"}
    assert analyze(archive)[0] == analyze(folder)[0]
    said = [CliRunner().invoke(app, ["summary", str(s), "--no-cache"]) for s in (folder, archive)]
    lines = [[ln for ln in r.stdout.splitlines() if ln.startswith("read as")] for r in said]
    assert lines[0] == lines[1] and len(lines[0]) == 3, said[0].stdout
    assert any("Python stacks by analyze, not as dumps: 5 file(s)" in ln for ln in lines[0])
    assert all("skipped" not in r.stdout for r in said)


@pytest.mark.parametrize("suffix", ["", ".tgz"])
def test_a_rank_in_two_host_folders_is_one_warning_and_the_first_is_read(
    tmp_path: Path, flat: dict[str, Any], suffix: str
) -> None:
    """Rank 1's dump and stacks also in host-b/ (other bytes, left from an earlier collect):
    one warning line naming both files and the one read (host-a's, first in path order); same
    answer."""
    folder = per_host(JOB, tmp_path / "incident")
    shutil.copy2(OTHER_JOB / "comm_lib_trace_rank_1", folder / "host-b" / "comm_lib_trace_rank_1")
    shutil.copy2(folder / "host-a" / "stacks_rank_1.json", folder / "host-b")
    source = packed(folder, suffix) if suffix else folder
    doc, result = analyze(source)
    (line,) = [ln for ln in result.stderr.splitlines() if "rank 1 has a dump in" in ln]
    assert line.startswith("warning: rank 1 has a dump in 2 folders: ")
    assert "host-a/comm_lib_trace_rank_1 and " in line and "host-b/comm_lib_trace_rank_1;" in line
    assert "read from host-a/comm_lib_trace_rank_1 (the first in path order)" in line
    for key in ("verdict", "culprit_ranks", "ranks_loaded", "stacks"):
        assert doc[key] == flat[key], key
    assert stack_evidence(doc) == stack_evidence(flat)
    found = discover(source)
    assert [c.relative for c in found.candidates if c.rank == 1] == ["host-a/comm_lib_trace_rank_1"]
    assert [p.rank for p in found.problems] == [1] and not found.problems[0].fatal


def test_two_jobs_in_one_archive_are_refused_naming_each_and_only_picks_one(
    tmp_path: Path,
) -> None:
    """Two real jobs, each collected per host, packed together: refused in one line naming
    both sets; --only the first set's name analyses that whole job, with its own stacks only."""
    root = tmp_path / "incidents"
    per_host(JOB, root / "job1")
    per_host(OTHER_JOB, root / "job2", hosts={0: "host-a", 1: "host-b", 2: "host-b"})
    archive = packed(root, ".tgz")
    with pytest.raises(SeveralDumpSets) as err:
        discover(archive)
    message = str(err.value)
    assert "holds 2 dump sets" in message and "\n" not in message
    assert "job1/*/comm_lib_trace_rank_* (ranks 0-3)" in message
    assert "job2/*/comm_lib_trace_rank_* (ranks 0-2)" in message
    assert "--only 'job1/*/comm_lib_trace_rank_*'" in message
    result = CliRunner().invoke(app, ["analyze", str(archive), "--no-cache"])
    assert result.exit_code == 2 and "holds 2 dump sets" in result.stderr
    doc, _ = analyze(archive, "--only", "job1/*/comm_lib_trace_rank_*")
    alone, _ = analyze(per_host(JOB, tmp_path / "job1"))
    for key in ("verdict", "culprit_ranks", "ranks_loaded", "stacks"):
        assert doc[key] == alone[key], key
    assert [e["source"] for e in doc["timeline"]] == [
        f"job1/{e['source']}" for e in alone["timeline"]
    ]
    picked = discover(archive, only="job1/*/comm_lib_trace_rank_*")
    assert {f.relative.split("/")[0] for f in picked.side_files} == {"job1"}


def test_the_same_ranks_under_two_prefixes_in_an_archive_are_refused(tmp_path: Path) -> None:
    """A flat archive with one job's comm_lib_trace_rank_N and another's rank_N: two sets."""
    archive = tmp_path / "mixed.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(JOB.glob("comm_lib_trace_rank_*")):
            tar.add(path, path.name)
        for path in sorted((FIXTURES / "gloo_capture" / "ddp_exception__blocked").iterdir()):
            tar.add(path, path.name)
    with pytest.raises(SeveralDumpSets, match=r"comm_lib_trace_rank_\* \(ranks 0-3\), rank_\*"):
        discover(archive)
    assert len(discover(archive, only="rank_*").candidates) == 4


def test_side_members_that_are_links_are_refused_and_nothing_is_extracted(
    tmp_path: Path,
) -> None:
    """A stack file or a log that is a link in the archive is never followed: skipped, said
    why; the rest loads (the members are read in memory, never written anywhere)."""
    archive = tmp_path / "links.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(JOB.glob("comm_lib_trace_rank_*")):
            tar.add(path, path.name)
        for name in ("pyspy_rank_2.txt", "torchrun.log"):
            link = tarfile.TarInfo(name)
            link.type = tarfile.SYMTYPE
            link.linkname = "/etc/passwd"
            tar.addfile(link)
    found = discover(archive)
    assert len(found.candidates) == 4 and not found.side_files
    assert {p.path.name: p.reason for p in found.skipped} == {
        "links.tgz:pyspy_rank_2.txt": "refused: a link, not a file",
        "links.tgz:torchrun.log": "refused: a link, not a file",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["links.tgz"]


@pytest.mark.parametrize("suffix", [".tgz", ".zip"])
def test_a_long_logs_tail_is_read_from_an_archive_as_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """Only a log's last MAX_LOG_BYTES are read, in a folder and in an archive alike (the
    member's start read through under the budget, never kept): the same failures."""
    from frtrace.evidence import discover as evidence
    from frtrace.incident import archive as archives

    folder = shutil.copytree(JOB, tmp_path / "incident")
    log = folder / "torchrun.log"
    text = log.read_bytes()
    log.write_bytes(b"noise line of an earlier step\n" * 40_000 + text)  # ~1.2 MB before it
    keep = len(text) + 1000
    monkeypatch.setattr(evidence, "MAX_LOG_BYTES", keep)
    monkeypatch.setattr(archives, "MAX_LOG_BYTES", keep)
    source = packed(folder, suffix)
    (read,) = [f for f in discover(source).side_files if f.relative == "torchrun.log"]
    assert read.data is not None and len(read.data) == keep and read.data.endswith(text)
    here, there = analyze(folder)[0], analyze(source)[0]
    assert there["timeline"] == here["timeline"] and here["timeline"]


@pytest.mark.parametrize("suffix", ["", ".tgz"])
def test_a_copy_of_a_rank_in_another_host_folder_is_read_once(
    tmp_path: Path, flat: dict[str, Any], suffix: str
) -> None:
    """Rank 1's dump and stacks copied byte for byte into host-b/ too: one file, one warning
    line naming the copy and its original; the same answer."""
    folder = per_host(JOB, tmp_path / "incident")
    for name in ("comm_lib_trace_rank_1", "stacks_rank_1.json"):
        shutil.copy2(folder / "host-a" / name, folder / "host-b" / name)
    source = packed(folder, suffix) if suffix else folder
    doc, result = analyze(source)
    (line,) = [ln for ln in result.stderr.splitlines() if "(a copy)" in ln]
    assert line == (
        "warning: host-b/comm_lib_trace_rank_1: the same bytes as "
        "host-a/comm_lib_trace_rank_1 (a copy): read once"
    )
    for key in ("verdict", "culprit_ranks", "ranks_loaded", "stacks"):
        assert doc[key] == flat[key], key
    assert stack_evidence(doc) == stack_evidence(flat)


def test_alike_error_files_of_two_ranks_are_not_copies(tmp_path: Path) -> None:
    """Two ranks that timed out alike in the same second leave byte-identical error.json
    files in torchrun's attempt_0/2/ and attempt_0/3/: both read (dropped as copies, every
    log read 'rank ?'); the recorder's stacks_rank_3.json and collect's copy of it beside are
    one file."""
    from frtrace.incident.attempts import drop_side_copies
    from frtrace.incident.layout import SideFile, SideKind

    def side(relative: str, kind: SideKind, data: bytes) -> SideFile:
        return SideFile(
            path=tmp_path / relative, relative=relative, kind=kind, size_bytes=len(data), data=data
        )

    error = b'{"message": {"message": "Timed out", "extraInfo": {"timestamp": "1"}}}'
    stacks = b'{"format": "frtrace-stacks"}'
    files = [
        side("logs/attempt_0/2/error.json", "error_file", error),
        side("logs/attempt_0/3/error.json", "error_file", error),
        side("stacks_rank_3.json", "stacks", stacks),
        side("node-1/stacks_rank_3.json", "stacks", stacks),
    ]
    kept = [f.relative for f in drop_side_copies(files)]
    assert kept == [
        "logs/attempt_0/2/error.json",
        "logs/attempt_0/3/error.json",
        "stacks_rank_3.json",
    ]
