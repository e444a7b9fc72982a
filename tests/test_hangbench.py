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


# The general rules a case stands on, each checked on a real case: what the report leads with
# (its first finding's code) and whom it names; a rule that stops firing here is a regression
# even while the case stays right by another road.
REASONS = {
    # a rank that left a send/recv out: Gloo's op count against its peers' and its own
    "p2p_ring-plain-torchrun-signal": ("FR012", [2]),
    "p2p_ring-ddp-torchrun-exception": ("FR012", [1]),
    # a tie of sizes broken by the bytes Gloo's size check aborted a rank on
    "op_size_large-tp-torchrun-exception": ("FR003", [3]),
    # the aborted rank, with no dump, named where every other member is in one op
    "two_threads_metrics-dataloader-ray-signal": ("FR003", [1]),
    # the highest rank, with no dump, counted in the world from the recorder's sidecars
    "dead_exit-tp-torchrun-signal": ("FR008", [3]),
    # the culprit's stack written by faulthandler when torchrun stopped it (SIGTERM)
    "host_code_subprocess-fsdp2-torchrun-exception": ("FR008", [2]),
}


@pytest.mark.parametrize("name", sorted(REASONS))
def test_the_rule_a_case_stands_on(name: str) -> None:
    from frtrace.model import KIND_CODES
    from frtrace.pipeline import analyze

    code, named = REASONS[name]
    with hb.staged(name, CASES[name]) as folder:
        report = analyze(folder, jobs=1)
    lead = report.findings[0]
    assert KIND_CODES[lead.kind] == code, [KIND_CODES[f.kind] for f in report.findings]
    assert sorted({*report.culprit_ranks, *report.suspected_ranks}) == named
    truth = CASES[name]["truth"]
    if truth["culprit_in_host_code"]:  # (where it is stuck: its own stack says)
        assert any(w.function and w.function.endswith(truth["where"]) for w in lead.where)


def test_a_running_job_collected_host_by_host_is_not_hung() -> None:
    """Two hosts' collects 0.2 s apart while the job trains: the later host's ranks are a few
    collectives on, ops the earlier host's dumps (taken while running) cannot show."""
    from frtrace.pipeline import analyze

    name = "healthy-ddp-torchrun-collect-hosts"
    with hb.staged(name, CASES[name]) as folder:
        report = analyze(folder, jobs=1)
    assert report.verdict.value == "healthy", report.findings[:1]
