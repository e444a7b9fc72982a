"""Real hung Gloo jobs under torchrun with every artifact they leave (tests/fixtures/gloo_evidence,
made by scripts/make_evidence_fixtures.py; the truth and ``expect`` come from how each fault
was built, never from frtrace), analysed with all of it and with less.

With everything the job left, the analysis gives the manifest's answer. With less (the dumps
alone, + the recorder's sidecars, + the logs and error files, + the py-spy stacks), it may
know less, but it is honest: it never names a rank that is not a culprit, and never calls a
hung job healthy, except where the evidence given cannot show the hang at all (listed, with
why, in ``BLIND``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from frtrace.model import Verdict
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES

TREE = FIXTURES / "gloo_evidence"
JSON_TREE = FIXTURES / "gloo_evidence_json"
MANIFEST: dict[str, dict[str, Any]] = json.loads((TREE / "MANIFEST.json").read_text())
HEALTHY = {Verdict.HEALTHY, Verdict.STRAGGLERS}  # CPU ranks on two cores: a straggler is fine

# Where frtrace's answer differs from the manifest's on purpose, and why.
ANSWER: dict[str, tuple[Verdict, tuple[int, ...], str]] = {
    "healthy_pairs__instant": (
        Verdict.CANNOT_TELL,
        (),
        "dumped through torch's own API at one instant: no dump says when it was written, and "
        "two pairs each one op apart are a running job's picture as much as a hang's "
        "(FR017); a dump time or a second snapshot settles it",
    ),
}
# (fixture, level) where the evidence given cannot show the hang at all.
BLIND: dict[tuple[str, str], str] = {
    (name, "entries"): "every recorded op finished; the ranks are blocked in monitored_barrier, "
    "which Gloo does not record, after the last recorded collective"
    for name in ("monitored_barrier__signal", "monitored_barrier_wait_all__signal")
}

Keep = Callable[[Path], bool]
LEVELS: dict[str, Keep] = {
    "entries": lambda p: p.name.startswith("comm_lib_trace_rank_"),
    "+sidecar": lambda p: p.name.startswith(("comm_lib_trace_rank_", "stacks_rank_")),
    "+logs": lambda p: not p.name.startswith("pyspy"),
    "all": lambda p: True,
}


def _copy(src: Path, dst: Path, keep: Keep) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        if p.is_dir():
            if keep(Path("stderr.log")):
                shutil.copytree(p, dst / p.name)
        elif keep(p):
            shutil.copy2(p, dst / p.name)
    return dst


def _has_dumps(path: Path) -> bool:
    return any(p.name.startswith("comm_lib_trace_rank_") for p in path.iterdir())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_with_everything_the_job_left_the_answer_is_the_truth(name: str) -> None:
    expect = MANIFEST[name]["expect"]
    report = analyze(TREE / name)
    if name in ANSWER:
        verdict, culprits, _ = ANSWER[name]
        assert (report.verdict, report.culprit_ranks) == (verdict, culprits)
        return
    if expect["verdict"] == Verdict.HEALTHY:
        assert report.verdict in HEALTHY and report.culprit_ranks == ()
        return
    assert str(report.verdict) == expect["verdict"]
    assert list(report.culprit_ranks) == expect["culprit_ranks"]


def _cases() -> list[Any]:
    cases = []
    for name in sorted(MANIFEST):
        for level in LEVELS:
            cases.append(pytest.param(name, level, id=f"{name}-{level}"))
    cases += [
        pytest.param(p.name, "json", id=f"{p.name}-json") for p in sorted(JSON_TREE.iterdir())
    ]
    return cases


@pytest.mark.parametrize(("name", "level"), _cases())
def test_with_less_evidence_the_answer_is_honest(name: str, level: str, tmp_path: Path) -> None:
    truth = MANIFEST[name]
    if level == "json":
        where = JSON_TREE / name
    else:
        where = _copy(TREE / name, tmp_path / "set", LEVELS[level])
        if not _has_dumps(where) and level in ("entries", "+sidecar"):
            pytest.skip("the job left no dump; without its logs there is nothing to read")
    report = analyze(where)
    culprits = set(truth["expect"]["culprit_ranks"]) or set(truth["culprit_ranks"])
    assert set(report.culprit_ranks) <= culprits, (report.verdict, report.culprit_ranks)
    hung = truth["expect"]["verdict"] not in ("healthy", "healthy_with_stragglers")
    if hung and (name, level) not in BLIND:
        assert report.verdict not in HEALTHY, report.verdict
    if (name, level) in BLIND:
        assert report.verdict in HEALTHY  # (the day this changes, the entry above goes)
