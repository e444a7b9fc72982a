"""HangBench in CI: every committed case of ``bench/hangbench/corpus`` analysed in this process
(``frtrace.pipeline.analyze(DIR, jobs=1)``) and judged against the truth its job was built with
(``scripts/hangbench.py``'s ``judge``).

A case passes when frtrace names no innocent rank, no rank outside the job, does not call a
hung job healthy (nor a job that is not hung hung), and names every culprit. A case frtrace
gets wrong is listed in ``bench/hangbench/known_wrong.json`` with exactly how it fails and why:
it is an expected failure only while it fails exactly so (a listed case that starts naming an
innocent rank fails here, and one that is fixed fails until it is taken off the list).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _scorer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hangbench", ROOT / "scripts" / "hangbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hangbench"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


hb = _scorer()
MANIFEST = hb.load()
KNOWN = hb.known_wrong()
CASES = MANIFEST["cases"]
GATE = {"false_healthy", "innocent", "outside"}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    entry = CASES[name]
    with hb.staged(name, entry) as folder:
        answer = hb.judge(entry["truth"], entry["world_size"], hb.ask_frtrace(folder))
    problems = sorted(answer.problems)
    said = f"frtrace: {answer.verdict}, names {answer.named} ({answer.note})"
    known = KNOWN.get(name)
    if known is None:
        assert not problems, f"{name}: {problems}; truth {entry['truth']}; {said}"
        return
    assert problems, f"{name} is listed as wrong ({known['why']}) but is now right: delist it"
    assert problems == sorted(known["fails"]), (
        f"{name} is listed as failing {known['fails']} ({known['why']}), now {problems}; {said}"
    )
    pytest.xfail(f"known wrong ({', '.join(problems)}): {known['why']}")


def test_every_known_wrong_case_is_a_case_with_its_reason() -> None:
    for name, wrong in KNOWN.items():
        assert name in CASES, name
        assert wrong["why"].strip() and wrong["fails"], name
        assert set(wrong["fails"]) <= {*GATE, "false_hang", "missed"}, name


def _answer(verdict: str, named: list[int], stragglers: list[int] | None = None) -> object:
    return hb.Answer("frtrace", verdict=verdict, named=named, stragglers=stragglers or [])


HUNG = {"verdict": "hang", "culprit_ranks": [2], "straggler_ranks": [], "where": None}
SLOW = {"verdict": "healthy", "culprit_ranks": [], "straggler_ranks": [3], "where": None}


@pytest.mark.parametrize(
    ("truth", "answer", "problems"),
    [
        (HUNG, _answer("hang", [2]), []),
        (HUNG, _answer("healthy", []), ["false_healthy", "missed"]),
        (HUNG, _answer("hang", [1, 2]), ["innocent"]),
        (HUNG, _answer("hang", [2, 4]), ["innocent", "outside"]),
        (HUNG, _answer("cannot_tell", []), ["missed"]),
        (SLOW, _answer("healthy_with_stragglers", [], [3]), []),
        (SLOW, _answer("hang", [3]), ["false_hang", "missed"]),
        (SLOW, _answer("healthy", [], [1]), ["missed"]),
    ],
)
def test_the_judge_says_what_is_wrong(
    truth: dict[str, object], answer: object, problems: list[str]
) -> None:
    """The rule itself, on answers made up here: each problem is seen, none is invented."""
    assert hb.judge(truth, 4, answer).problems == problems


def test_the_corpus_is_spread_over_the_taxonomy_and_small() -> None:
    """Every fault kind on three mechanisms or more, every launcher and capture twice or
    more, 80 cases or more, under 8 MB."""
    by: dict[str, dict[str, set[str]]] = {"fault": {}, "launcher": {}, "capture": {}}
    for name, entry in CASES.items():
        by["fault"].setdefault(entry["fault"], set()).add(entry["mechanism"])
        by["launcher"].setdefault(entry["launcher"], set()).add(name)
        by["capture"].setdefault(entry["capture"], set()).add(name)
    assert len(CASES) >= 80
    assert all(len(m) >= 3 for m in by["fault"].values()), by["fault"]
    assert all(len(n) >= 2 for n in by["launcher"].values()), by["launcher"]
    assert all(len(n) >= 2 for n in by["capture"].values()), by["capture"]
    size = sum(p.stat().st_size for p in hb.CORPUS.rglob("*") if p.is_file())
    assert size < 8 * 2**20, size


def test_every_truth_is_within_its_job() -> None:
    for name, entry in CASES.items():
        truth, world = entry["truth"], entry["world_size"]
        ranks = truth["culprit_ranks"] + truth["waiting_ranks"] + truth["straggler_ranks"]
        assert all(0 <= r < world for r in ranks), name
        assert not set(truth["culprit_ranks"]) & set(truth["waiting_ranks"]), name
        assert (truth["verdict"] == "hang") == bool(truth["culprit_ranks"]), name
