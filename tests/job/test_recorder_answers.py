"""collect's request never overwrites a dump the rank wrote by itself (``frtrace.job.answers``).

The real recorder (``frtrace.recorder.enable``) in this very process, asked through its real
socket by collect's own client (``frtrace.collect.ask``); only the buffer it reads from torch
is replaced by numbered bytes, so every write can be told apart. The rank's own dump and
sidecar stay byte for byte what they were; the answer is in a file of its own, which is what
collect copies; and stage 0 reads the folder (and an archive of it) as it did before.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from frtrace.base.files import open_out_dir
from frtrace.collect import ask
from frtrace.collect.procs import RankProcess
from frtrace.incident.discover import discover
from frtrace.job import recorder
from frtrace.job import registry as reg
from frtrace.job.answers import ANSWERS_APART, answer_name
from frtrace.job.env import DUMP_PREFIX, STACKS_PREFIX, TERM_STACKS_PREFIX

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def rank0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, RankProcess]]:
    """This process as rank 0 with ``frtrace.recorder`` enabled (``request.param``: its
    format), dumping numbered buffers into ``tmp_path/fr``; yields the folder and the rank."""
    monkeypatch.setenv(reg.REGISTRY_ENV, str(tmp_path / "registry"))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("FRTRACE_WATCH", raising=False)
    count = iter(range(1_000))
    monkeypatch.setattr(recorder, "_trace_bytes", lambda fmt: f"BUFFER {next(count)}".encode())
    st = recorder.enable(
        tmp_path / "fr", signals=(), on_exception=False, verbose=False, fmt=request.param
    )
    assert st is not None
    me = os.getpid()
    proc = RankProcess(
        pid=me,
        rank=0,
        local_rank=0,
        cmdline="test",
        env={"RANK": "0", reg.REGISTRY_ENV: os.environ[reg.REGISTRY_ENV]},
        uid=os.geteuid(),
        start_time=reg.process_start_time(me),
    )
    try:
        yield st.dump_dir, proc
    finally:
        recorder.disable()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("rank0", ["pickle", "json"], indirect=True)
def test_a_request_leaves_the_ranks_own_dump_byte_identical(
    rank0: tuple[Path, RankProcess], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The watch's dump, then two requests (``--twice``): the own dump and its sidecar stay
    as they were; each answer is in ``.<name>.request`` beside, which collect copies under the
    rank's usual names; the second answer replaces the first, never the own dump."""
    folder, proc = rank0
    fmt = request.node.callspec.params["rank0"]
    own = recorder.dump("stall watch", detail="op pending 300 s in all_reduce #7")
    side = folder / f"{STACKS_PREFIX}0.json"
    assert own.name == DUMP_PREFIX + "0" + (".json" if fmt == "json" else "")
    before = _files(folder)
    armed = f"{TERM_STACKS_PREFIX}0.txt"  # (its stacks on SIGTERM, empty while it runs)
    assert set(before) == {own.name, side.name, armed} and before[own.name] == b"BUFFER 0"
    entry = json.loads(reg.registry_path(os.getpid()).read_text())
    assert entry[ANSWERS_APART] is True
    for i in (1, 2):
        with open_out_dir(tmp_path / f"snap{i}") as out:
            got = ask.recorder(proc, out, 10.0)
        assert got.ok and got.detail == "request (+ stacks sidecar)", got.detail
        now = _files(folder)
        assert {k: now[k] for k in before} == before  # the rank's own files: untouched
        answer, answer_side = answer_name(own.name), answer_name(side.name)
        assert set(now) == {*before, answer, answer_side}
        assert now[answer] == f"BUFFER {i}".encode()
        trigger = json.loads(now[answer_side])["trigger"]
        assert trigger["detail"] == "frtrace collect"
        copied = {Path(p).name: Path(p).read_bytes() for p in got.paths}
        assert copied == {own.name: now[answer], side.name: now[answer_side]}


@pytest.mark.parametrize("rank0", ["pickle"], indirect=True)
def test_stage_0_reads_the_folder_and_its_archive_as_before_a_request(
    rank0: tuple[Path, RankProcess], tmp_path: Path
) -> None:
    """The answers' hidden names are neither a dump nor a stack sample, in the folder and in a
    tar of it: the same dump set, the same side files, no new line, before and after."""
    folder, proc = rank0
    recorder.dump("signal", trigger="signal", detail="SIGUSR1")

    def seen() -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
        archive = tmp_path / "fr.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(folder, arcname="fr")
        found = []
        for where in (folder, archive):
            d = discover(where)
            found.append(
                (
                    tuple(c.relative for c in d.candidates),
                    tuple(f.relative for f in d.side_files),
                    tuple(p.message for p in d.problems),
                )
            )
        return found

    before = seen()
    # (the empty file the rank's stacks on SIGTERM would go to is a side file, read as nothing)
    armed = f"{TERM_STACKS_PREFIX}0.txt"
    assert before[0] == ((f"{DUMP_PREFIX}0",), (f"{STACKS_PREFIX}0.json", armed), ())
    with open_out_dir(tmp_path / "out") as out:
        assert ask.recorder(proc, out, 10.0).ok
    assert (folder / answer_name(f"{DUMP_PREFIX}0")).is_file()
    assert seen() == before
    with tarfile.open(tmp_path / "fr.tar") as tar:  # (the answers are in the archive)
        names = tar.getnames()
    assert f"fr/{answer_name(DUMP_PREFIX + '0')}" in names, names
