"""No dump at all, only the ranks' Python stacks: ``tests/fixtures/stacks/env_only``, a real
4-rank Gloo job started with only ``frtrace env``'s environment, collected (py-spy stacks and
collect's manifest, no dump; truth in ``stacks/MANIFEST.json``).

The stacks alone name a rank only where they observe it (every rank of the job has a stack,
every other one in one place of one torch.distributed call, its own outside any): on the
basis of its stack, never as an inference passed off as one. Anything less cannot tell. What
must not change the answer: the files renamed, moved out of the host folder, compressed, their
times, the ranks renumbered, collect's manifest gone.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from frtrace.analysis.codec import decode_report, encode_report
from frtrace.model import Basis, FindingKind, NamedAs, Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.common import headline
from frtrace.report.json import report_to_dict
from frtrace.report.json_schema import report_schema
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

FIXTURE = FIXTURES / "stacks" / "env_only"
TRUTH = json.loads((FIXTURES / "stacks" / "MANIFEST.json").read_text())["env_only"]
CULPRIT: int = TRUTH["culprit_ranks"][0]
WORLD: int = len(TRUTH["waiting_ranks"]) + 1


def _copy(tmp: Path) -> tuple[Path, Path]:
    """The fixture copied: (the incident folder, its host folder)."""
    top = tmp / "incident"
    shutil.copytree(FIXTURE, top)
    (host,) = [p for p in top.iterdir() if p.is_dir()]
    return top, host


def _named(report: Report, culprit: int) -> None:
    assert report.verdict == Verdict.HANG, headline(report)
    assert report.culprit_ranks == (culprit,) and report.suspected_ranks == ()
    assert report.victim_ranks == tuple(r for r in range(WORLD) if r != culprit)
    (n,) = report.named_ranks
    assert (n.rank, n.role, n.basis) == (culprit, NamedAs.CULPRIT, Basis.STACK)
    assert n.rests_on == ("FR015", "no dump", "its stack")
    (f,) = [f for f in report.findings if f.culprit_ranks]
    assert f.kind == FindingKind.STACK_OUTLIER
    assert [w.function for w in f.where] == [TRUTH["culprit_function"]]


def test_the_stacks_alone_name_the_rank_outside_the_collective() -> None:
    """The rank in load_batch while the three others are in one all_reduce: named on the basis
    of its stack; the report says no dump was read and what would confirm it."""
    report = analyze(FIXTURE)
    _named(report, CULPRIT)
    assert report.ranks_loaded == () and report.world_size == WORLD
    text = render_text(report)
    assert text.splitlines()[0] == (
        f"HANG: culprit rank {CULPRIT} (its stack; no dump read); 3 ranks wait on it"
    )
    assert f"rank {CULPRIT}: in host code at load_batch" in " ".join(text.split()[:60])
    flat = " ".join(text.split())
    assert "No Flight Recorder dump was read: the stacks alone name rank 2" in flat
    assert "ring buffer would confirm which op it never joined" in flat
    assert "world size" not in flat  # (collect's manifest says the ranks' WORLD_SIZE)
    assert "frtrace env --dir DIR --watch 300" in flat  # (how to get dumps next time)
    data = report_to_dict(report)
    assert data["stacks"]["agreement"] == "stacks_only"
    assert data["named_ranks"][0]["basis"] == "stack"
    assert "stack" in report_schema()["$defs"]["named_rank"]["properties"]["basis"]["enum"]
    assert decode_report(encode_report(report)) == report


def _renamed(top: Path, host: Path) -> int:
    for p in host.glob("pyspy_rank_*.txt"):
        p.rename(host / p.name.replace("pyspy_rank_", "py-spy-"))
    return CULPRIT


def _flattened(top: Path, host: Path) -> int:
    for p in host.iterdir():
        p.rename(top / p.name)
    host.rmdir()
    return CULPRIT


def _compressed(top: Path, host: Path) -> int:
    for p in host.glob("pyspy_rank_*.txt"):
        p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    return CULPRIT


def _times(top: Path, host: Path) -> int:
    for i, p in enumerate(sorted(host.iterdir())):
        os.utime(p, (1_000_000_000 + 7919 * i, 1_000_000_000 + 7919 * i))
    return CULPRIT


def _renumbered(top: Path, host: Path) -> int:
    """Rank r is rank (r + 1) % 4: files and manifest alike."""
    new = {r: (r + 1) % WORLD for r in range(WORLD)}
    for r in range(WORLD):
        (host / f"pyspy_rank_{r}.txt").rename(host / f"tmp_{new[r]}")
    for r in range(WORLD):
        (host / f"tmp_{r}").rename(host / f"pyspy_rank_{r}.txt")
    manifest = host / "frtrace-collect.json"
    doc = json.loads(manifest.read_text())
    for item in doc["ranks"]:
        item["rank"] = new[item["rank"]]
    manifest.write_text(json.dumps(doc))
    return new[CULPRIT]


def _no_manifest(top: Path, host: Path) -> int:
    (host / "frtrace-collect.json").unlink()
    return CULPRIT  # (every rank up to the highest has a stack: the world is taken from them)


KEPT: dict[str, Callable[[Path, Path], int]] = {
    "renamed": _renamed,
    "flattened": _flattened,
    "compressed": _compressed,
    "file-times": _times,
    "renumbered": _renumbered,
    "no-manifest": _no_manifest,
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_what_must_not_change_the_answer(tmp_path: Path, name: str) -> None:
    top, host = _copy(tmp_path)
    culprit = KEPT[name](top, host)
    _named(analyze(top), culprit)


def _without(rank: int) -> Callable[[Path, Path], str]:
    def edit(top: Path, host: Path) -> str:
        (host / f"pyspy_rank_{rank}.txt").unlink()
        return f"rank {rank} of the job has no stack"

    return edit


def _elsewhere(top: Path, host: Path) -> str:
    """One waiting rank a line further on in its caller: two places, not one."""
    path = host / "pyspy_rank_3.txt"
    text = path.read_text()
    line = next(x for x in text.splitlines() if "average_gradients" in x)
    path.write_text(text.replace(line, line.replace(":43)", ":44)")))
    return "they are in 3 places"


def _two_outside(top: Path, host: Path) -> str:
    """Rank 0 in load_batch too: two of four ranks outside, more than a quarter."""
    (host / "pyspy_rank_0.txt").write_text((host / f"pyspy_rank_{CULPRIT}.txt").read_text())
    return "they are in 2 places"


CANNOT: dict[str, Callable[[Path, Path], str]] = {
    "a-stack-missing": _without(1),
    "the-last-stack-missing": _without(WORLD - 1),  # (seen: the manifest says WORLD_SIZE 4)
    "two-places": _elsewhere,
    "two-outside": _two_outside,
}


@pytest.mark.parametrize("name", sorted(CANNOT))
def test_where_the_stacks_do_not_observe_it_nobody_is_named(tmp_path: Path, name: str) -> None:
    """A rank without a stack, the others in two places, two ranks outside: cannot tell, and
    the report says why; no rank named, never a healthy verdict."""
    top, host = _copy(tmp_path)
    why = CANNOT[name](top, host)
    report = analyze(top)
    assert report.verdict == Verdict.CANNOT_TELL, headline(report)
    assert report.culprit_ranks == () and report.named_ranks == ()
    assert headline(report) == (
        "CANNOT TELL: no dump was read, and the ranks' stacks single out no rank"
    )
    flat = " ".join(render_text(report).split())
    assert f"No Flight Recorder dump was read, and the stacks cannot tell: {why}" in flat


def test_no_stack_and_no_dump_is_still_no_dump_found(tmp_path: Path) -> None:
    """Only collect's manifest: nothing to analyse (exit 2, the error says how to get dumps)."""
    top, host = _copy(tmp_path)
    for p in host.glob("pyspy_rank_*.txt"):
        p.unlink()
    from frtrace.errors import NoDumpsFound

    with pytest.raises(NoDumpsFound, match="frtrace env"):
        analyze(top)
