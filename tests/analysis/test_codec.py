"""The Report codec: lossless on every fixture, strict on anything else, never pickle."""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from frtrace.analysis import codec
from frtrace.analysis.codec import CodecError, decode, decode_report, encode, encode_report
from frtrace.detail import StuckInCollective
from frtrace.evidence.model import FailureKind
from frtrace.model import Finding, FindingKind, OpSignature, Report, Severity
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES, fixture_sets
from tests.report.test_words_notes import EXAMPLES as NOTES
from tests.report.test_words_notes import STRAGGLERS, straggler
from tests.report.test_words_stacks import EXAMPLES as READINGS

SCENARIOS = fixture_sets()
RENDERERS = (render_text, render_markdown, render_html, render_json)


def _through_json(report: Report) -> Report:
    return decode_report(json.loads(json.dumps(encode_report(report))))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_round_trip_is_lossless(scenario: Path) -> None:
    """Every fixture (stacks included): equal after JSON and back, and rendered alike."""
    report = analyze(scenario)
    back = _through_json(report)
    assert back == report
    for render in RENDERERS:
        assert render(back, None) == render(report, None), render.__name__


def _stacks_report() -> Report:
    report = analyze(FIXTURES / "stacks" / "recorder_hang")
    assert report.stacks is not None and report.findings
    return report


def test_round_trip_keeps_what_the_fixtures_may_not_hold() -> None:
    """Per-rank signatures (int keys), an int in a float field, optional values left None."""
    report = _stacks_report()
    sig = OpSignature(
        op="all_reduce",
        input_sizes=((4, 2), ()),
        output_sizes=((4, 2),),
        input_dtypes=("Float",),
        output_dtypes=("Float",),
    )
    finding = Finding(
        kind=FindingKind.OP_MISMATCH,
        severity=Severity.ERROR,
        detail=StuckInCollective(entered=(1, 3), held=0),
        culprit_ranks=(3,),
        expected=sig,
        actual={3: replace(sig, op="broadcast"), 1: sig},
        seq=7,
    )
    report = replace(report, findings=(finding,), wait_edges=((0, 3, "waits"),))
    back = _through_json(report)
    assert back == report
    assert list(back.findings[0].actual) == [3, 1]  # order kept: reporters iterate it


def test_round_trip_keeps_every_kind_of_note_and_straggler() -> None:
    """Every data note kind, straggler basis and stack reading: equal after JSON."""
    notes = tuple(n for n, _ in NOTES)
    stragglers = tuple(straggler(b, ms) for b, ms, _ in STRAGGLERS)
    report = replace(_stacks_report(), data_notes=notes, stragglers=stragglers)
    back = _through_json(report)
    assert back == report
    assert back.data_notes == notes and back.stragglers == stragglers
    assert render_json(back) == render_json(report)
    stacks = report.stacks
    assert stacks is not None
    for reading, _ in READINGS:
        with_reading = replace(report, stacks=replace(stacks, reading=reading))
        assert _through_json(with_reading) == with_reading


def test_round_trip_keeps_a_restarted_jobs_history() -> None:
    """Every field of the history (a summary's optional enums and group, its hosts' pairs, a
    repeat offender of a rank and of a host): equal after JSON, rendered alike."""
    from frtrace.model import History, RepeatOffender
    from tests.report.test_words_history import NEVER

    history = History(
        this=replace(NEVER, attempt=3, cause=FailureKind.CUDA_ERROR),
        others=(NEVER, replace(NEVER, attempt=4, later=True, kind=None, group=None)),
        left_out=(1, 2),
        repeats=(
            RepeatOffender(attempts=(0, 3), rank=1, hosts=("node-1",)),
            RepeatOffender(attempts=(0, 4), hosts=("node-1",), ranks=(1, 2)),
        ),
    )
    report = replace(_stacks_report(), history=history)
    back = _through_json(report)
    assert back == report
    for render in RENDERERS:
        assert render(back, None) == render(report, None), render.__name__


def _damaged(mutate: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(encode_report(_stacks_report())))
    mutate(data["report"])
    return data


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(unknown=1),  # an unknown field
        lambda r: r.pop("verdict"),  # a missing field
        lambda r: r.update(world_size="4"),  # a str for an int
        lambda r: r.update(world_size=True),  # a bool for an int
        lambda r: r.update(world_size=4.0),  # a float for an int
        lambda r: r.update(verdict="crashed"),  # no such enum value
        lambda r: r["findings"][0].update(severity="2"),  # an IntEnum as a str
        lambda r: r.update(culprit_ranks={"0": 1}),  # a dict for a tuple
        lambda r: r.update(wait_edges=[[0, 1]]),  # a pair for a triple
        lambda r: r["findings"][0].update(actual={"3": None}),  # a dict for [key, value] pairs
        lambda r: r.update(stacks={"py/object": "os.system"}),  # someone else's encoding
        lambda r: r["stacks"]["classes"].update(tree=[]),  # a list for a dataclass
        lambda r: r["findings"][0]["detail"].update(type="Report"),  # a class not in the union
        lambda r: r["findings"][0]["detail"].update(type=None),  # no class name
        lambda r: r["findings"][0]["detail"].pop("type"),  # a union value without its class
        lambda r: r["findings"][0].update(detail=None),  # None where the union has no None
    ],
    ids=[
        "unknown",
        "missing",
        "str",
        "bool",
        "float",
        "enum",
        "intenum",
        "dict",
        "short",
        "pairs",
        "foreign",
        "nested",
        "union-class",
        "union-name",
        "union-untagged",
        "union-none",
    ],
)
def test_anything_else_is_a_decode_error(mutate: Any) -> None:
    """An unknown or missing field, a wrong type anywhere: CodecError, never a Report."""
    with pytest.raises(CodecError):
        decode_report(_damaged(mutate))


def test_a_union_of_dataclasses_names_its_class() -> None:
    """A finding's detail is one of the hinted classes, tagged by name; nothing else encodes."""
    finding = _stacks_report().findings[0]
    data = encode(Finding, finding)
    assert set(data["detail"]) == {"type", "value"}
    assert data["detail"]["type"] == type(finding.detail).__name__
    assert decode(Finding, data) == finding
    with pytest.raises(CodecError):
        encode(Finding, replace(finding, detail=finding.group))


def test_another_format_is_a_decode_error() -> None:
    data = encode_report(_stacks_report())
    for bad in ({**data, "format": "frtrace-report-0"}, {**data, "extra": 1}, [data], None):
        with pytest.raises(CodecError):
            decode_report(bad)


def test_encoding_is_strict_too() -> None:
    """A value that would not come back equal (a list for a tuple) is refused when stored."""
    report = _stacks_report()
    with pytest.raises(CodecError, match=r"Report\.culprit_ranks"):
        encode_report(replace(report, culprit_ranks=[1]))  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="not a Report"):
        encode_report(copy.copy(report.findings[0]))  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="no codec"):
        encode(list[int], [1])
    with pytest.raises(CodecError, match=r"X \| None"):
        encode(int | str, 1)


def test_decoding_builds_only_the_hinted_classes() -> None:
    """The hints say what is built; the data never names a class (unlike pickle)."""
    tree = ast.parse(Path(codec.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"pickle", "importlib", "marshal", "shelve", "copyreg"}
    assert decode(tuple[int, ...], [1, 2]) == (1, 2)
    assert decode(dict[int, str], [[1, "a"]]) == {1: "a"}
    with pytest.raises(CodecError, match="twice"):
        decode(dict[int, str], [[1, "a"], [1, "b"]])
