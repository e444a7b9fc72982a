"""The rules that read more than the entries, and the verdict's precedence between them.

Real Gloo dumps (tests/fixtures/gloo) with evidence made by hand: the job's failures (what
the logs, error files and sidecars would say) and the ranks' stacks, on both sides of each
threshold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from frtrace.analysis.rules.first_failure import TOGETHER_NS
from frtrace.evidence.model import Failure, FailureKind, JobEvidence, Role
from frtrace.load.tables import load_dumps
from frtrace.model import Confidence, FindingKind, Report, Verdict
from frtrace.pipeline import analyze_dumps
from frtrace.pystack.discover import StackSet
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.report.wording import disagreement
from tests.conftest import GLOO

# Failures in the same hour as the fixtures' entries, before any of their ops: a first cause
# that may have started the hang (one after the waits began is the subject of its own test)
_FIRST_OP = min(
    t
    for scenario in ("never_joins", "healthy", "p2p_hidden", "size_mismatch_crashed")
    for t in load_dumps(GLOO / scenario, cache=False).entries.column("time_created_ns").to_pylist()
    if t
)
T0 = _FIRST_OP - 60 * 10**9


def _cause(rank: int, at: int | None = T0, kind: FailureKind = FailureKind.EXCEPTION) -> Failure:
    return Failure(
        rank=rank,
        kind=kind,
        role=Role.CAUSE,
        message="ValueError: bad batch",
        source=f"rank{rank}.log:1",
        at_ns=at,
        exc_type="ValueError",
    )


def _symptom(rank: int, at: int | None = T0 + 10**9) -> Failure:
    return Failure(
        rank=rank,
        kind=FailureKind.PEER_CLOSED,
        role=Role.SYMPTOM,
        message="RuntimeError: Connection closed by peer",
        source=f"rank{rank}.log:2",
        at_ns=at,
        exc_type="RuntimeError",
    )


def _run(scenario: str, *failures: Failure, stacks: StackSet | None = None) -> Report:
    dumps = load_dumps(GLOO / scenario, cache=False)
    return analyze_dumps(dumps, stacks, JobEvidence(failures=tuple(failures)))


def _codes(report: Report) -> list[FindingKind]:
    return [f.kind for f in report.findings]


def test_the_first_cause_agrees_with_the_entries() -> None:
    report = _run("never_joins", _cause(2), _symptom(0), _symptom(1), _symptom(3))
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    first = next(f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE)
    assert first.confidence == Confidence.HIGH and first.waiting_ranks == (0, 1, 3)
    assert not report.disagreements
    assert [f.rank for f in report.timeline] == [2, 0, 1, 3]


@pytest.mark.parametrize(("gap", "named"), [(TOGETHER_NS, (0, 2)), (TOGETHER_NS + 1, (2,))])
def test_causes_close_to_the_first_are_first_too(gap: int, named: tuple[int, ...]) -> None:
    report = _run("never_joins", _cause(2), _cause(0, at=T0 + gap))
    first = next(f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE)
    assert first.culprit_ranks == named


def test_a_cause_without_a_time_is_named_with_medium_confidence() -> None:
    report = _run("never_joins", _cause(2, at=None), _symptom(0, at=None))
    first = next(f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE)
    assert first.culprit_ranks == (2,) and first.confidence == Confidence.MEDIUM


def test_every_rank_failing_on_its_own_singles_none_out() -> None:
    report = _run("never_joins", *(_cause(r) for r in range(4)))
    assert FindingKind.FIRST_FAILURE not in _codes(report)
    assert report.culprit_ranks == (2,)  # the entries still say who never joined


def test_a_rank_the_entries_name_whose_own_failures_are_symptoms_is_a_victim() -> None:
    # rank 0 raised first; rank 2 (never joined, per the entries) only lost its connection after
    report = _run("never_joins", _cause(0), _symptom(2), _symptom(1), _symptom(3))
    assert report.culprit_ranks == (0,)
    assert not report.disagreements


def test_when_the_job_and_the_entries_name_different_ranks_both_are_shown() -> None:
    report = _run("never_joins", _cause(0), _symptom(1), _symptom(3))  # rank 2 said nothing
    assert report.culprit_ranks == (0, 2)
    assert report.verdict == Verdict.HANG
    [line] = map(disagreement, report.disagreements)
    assert "name rank(s) 0" in line and "name rank(s) 2" in line


def test_only_symptoms_name_no_one_and_are_never_healthy() -> None:
    report = _run("healthy", _symptom(1))
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()


def test_a_message_naming_ranks_settles_what_the_entries_cannot() -> None:
    assert _run("p2p_hidden").verdict == Verdict.CANNOT_TELL
    barrier = Failure(
        rank=0,
        kind=FailureKind.BARRIER_FAILED,
        role=Role.SYMPTOM,
        message="[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 5000 ms",
        source="rank0.log:9",
        at_ns=T0,
        named_ranks=(2,),
    )
    report = _run("p2p_hidden", barrier)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    assert FindingKind.NAMED_BY_ERROR in _codes(report)


def test_a_positive_culprit_outranks_suspicion_from_a_missing_dump() -> None:
    alone = _run("size_mismatch_crashed")
    assert alone.culprit_ranks == (3,) and FindingKind.MISSING_DUMP in _codes(alone)
    crash = _cause(3, kind=FailureKind.CRASH)
    report = _run("size_mismatch_crashed", crash, _symptom(0), _symptom(2))
    assert report.culprit_ranks == (3,)
    assert FindingKind.FIRST_FAILURE in _codes(report)


def _sample(rank: int, function: str, filename: str) -> ProcessStacks:
    frames = (
        Frame(function=function, filename=filename, line=10),
        Frame(function="main", filename="/job/train.py", line=99),
    )
    thread = ThreadStack(thread_id="1", name="MainThread", frames=frames, is_main=True)
    return ProcessStacks(
        rank=rank,
        pid=100 + rank,
        host="h",
        source="py-spy-text",
        path=f"/d/pyspy_rank_{rank}.txt",
        threads=(thread,),
    )


def _stacks(host_ranks: set[int], world: int = 4) -> StackSet:
    comm = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    samples = tuple(
        _sample(r, "load_batch", "/job/data.py") if r in host_ranks else _sample(r, "recv", comm)
        for r in range(world)
    )
    return StackSet(
        directory="/d", samples=samples, by_rank={s.rank: s for s in samples if s.rank is not None}
    )


def test_the_stacks_name_the_outlier_where_the_entries_are_silent() -> None:
    report = _run("p2p_hidden", stacks=_stacks({2}))
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    outlier = next(f for f in report.findings if f.kind == FindingKind.STACK_OUTLIER)
    assert outlier.confidence == Confidence.MEDIUM and outlier.waiting_ranks == (0, 1, 3)


def test_two_outliers_of_four_are_too_many_to_name() -> None:
    report = _run("p2p_hidden", stacks=_stacks({1, 2}))
    assert report.verdict == Verdict.CANNOT_TELL and report.culprit_ranks == ()


def test_a_healthy_job_with_one_rank_computing_is_still_healthy() -> None:
    report = _run("healthy", stacks=_stacks({3}))
    assert report.verdict in (Verdict.HEALTHY, Verdict.STRAGGLERS)


def test_a_never_joined_rank_inside_a_recv_is_a_warning_not_a_culprit() -> None:
    report = _run("never_joins", stacks=_stacks(set()))  # rank 2 sits in recv, not host code
    nj = next(f for f in report.findings if f.kind == FindingKind.NEVER_JOINED)
    assert nj.severity.name == "WARNING" and report.verdict == Verdict.CANNOT_TELL
    hung_in_host = _run("never_joins", stacks=_stacks({2}))
    assert (hung_in_host.verdict, hung_in_host.culprit_ranks) == (Verdict.HANG, (2,))


def test_no_rule_imports_another_rule() -> None:
    import ast

    rules = Path(__file__).parents[2] / "frtrace" / "analysis" / "rules"
    for path in rules.glob("*.py"):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("frtrace.analysis.rules"), path.name
                assert "verdict" not in node.module, path.name


def test_a_cause_after_the_waits_began_is_a_later_event_not_the_culprit() -> None:
    """The entries name rank 2 (its peers wait for it); rank 0 was killed a minute later."""
    dumps = load_dumps(GLOO / "never_joins", cache=False)
    later = max(t for t in dumps.entries.column("time_created_ns").to_pylist() if t) + 60 * 10**9
    report = _run("never_joins", _cause(0, at=later, kind=FailureKind.CRASH))
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    [line] = map(disagreement, report.disagreements)
    assert "rank(s) 0 also failed" in line and "rank(s) 2" in line
    first = next(f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE)
    assert first.severity.name == "WARNING"
    untimed = _run("never_joins", _cause(0, at=None, kind=FailureKind.CRASH))
    assert untimed.culprit_ranks == (2,)


EVIDENCE = GLOO.parent / "gloo_evidence"


def _only_dumps(src: Path, dst: Path, drop: tuple[int, ...] = ()) -> Path:
    dst.mkdir()
    for p in src.glob("comm_lib_trace_rank_*"):
        if int(p.name.rsplit("_", 1)[1].split(".")[0]) not in drop:
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_a_snapshot_of_pairs_one_op_apart_names_no_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four 2-rank groups dumped at one instant through torch's API (JSON: four pairs apart)."""
    from frtrace.analysis.rules import snapshot
    from frtrace.pipeline import analyze

    where = GLOO.parent / "gloo_evidence_json" / "healthy_pairs__instant"
    report = analyze(where)
    assert (report.verdict, report.culprit_ranks) == (Verdict.CANNOT_TELL, ())
    assert FindingKind.RUNNING_SNAPSHOT in _codes(report)
    monkeypatch.setattr(snapshot, "WINDOW_S", 0.05)  # waits that began longer ago: a hang
    assert analyze(where).verdict == Verdict.HANG


def test_a_cycle_through_new_groups_is_named_only_when_no_rank_is_free(tmp_path: Path) -> None:
    from frtrace.pipeline import analyze

    src = EVIDENCE / "cycle_new_group__timer"
    everyone = analyze(_only_dumps(src, tmp_path / "all"))
    assert (everyone.verdict, everyone.culprit_ranks) == (Verdict.HANG, (0, 1, 2))
    # rank 0's dump gone: it is a member of both groups the others wait in, and only suspected
    one_missing = analyze(_only_dumps(src, tmp_path / "some", drop=(0,)))
    assert one_missing.suspected_ranks == (0,)
    assert FindingKind.UNSEEN_MEMBERS not in _codes(one_missing)


def test_empty_buffers_are_never_healthy(tmp_path: Path) -> None:
    from frtrace.pipeline import analyze

    report = analyze(_only_dumps(EVIDENCE / "pp_gpipe_exception__signal", tmp_path / "d"))
    assert report.verdict == Verdict.CANNOT_TELL
    assert FindingKind.NOTHING_RECORDED in _codes(report)


def test_a_later_failure_is_said_to_be_later() -> None:
    from frtrace.report.wording import summary

    report = _run("never_joins", _cause(0, at=None, kind=FailureKind.CRASH))
    later = next(f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE)
    assert "a later event, not where the hang began" in summary(later)
    first = _run("never_joins", _cause(2), _symptom(0))
    assert "failed first" in summary(
        next(f for f in first.findings if f.kind == FindingKind.FIRST_FAILURE)
    )
