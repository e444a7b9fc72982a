"""The Python stacks raise a finding's confidence where they agree with it, and only there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from frtrace.model import Confidence, Finding
from frtrace.pipeline import analyze
from frtrace.report.wording import why
from tests.conftest import FIXTURES

RECORDER_HANG = FIXTURES / "stacks" / "recorder_hang"  # rank 2 in load_batch; 0,1,3 wait


def _only(directory: Path) -> Finding:
    (finding,) = analyze(directory).findings
    return finding


def test_stacks_that_agree_make_the_finding_high_confidence() -> None:
    """The waiting ranks' stacks are in the function that issued the all_reduce they wait in,
    and rank 2's is in host code, where its entries (every op retired) put it."""
    f = _only(RECORDER_HANG)
    assert f.confidence == Confidence.HIGH
    assert f.stacks_agree == "both"
    assert why(f).endswith(
        "; the Python stacks confirm it: the waiting ranks' stacks are in the op, and rank 2's "
        "where the entries put it"
    )


def test_without_stacks_the_confidence_is_the_dumps_alone(tmp_path: Path) -> None:
    """The same dumps without the stack files: medium (membership inferred), as before."""
    for dump in RECORDER_HANG.glob("comm_lib_trace_rank_*"):
        shutil.copy(dump, tmp_path / dump.name)
    f = _only(tmp_path)
    assert f.confidence == Confidence.MEDIUM
    assert f.stacks_agree is None
    assert "Python stacks" not in why(f)


def test_stacks_that_disagree_do_not_raise_it(tmp_path: Path) -> None:
    """Rank 2's stack is the waiting ranks' (in train_step, like them): it questions the
    finding, which keeps its medium confidence."""
    shutil.copytree(RECORDER_HANG, tmp_path, dirs_exist_ok=True)
    sidecar = json.loads((RECORDER_HANG / "stacks_rank_0.json").read_text())
    sidecar["rank"] = 2
    (tmp_path / "stacks_rank_2.json").write_text(json.dumps(sidecar))
    shutil.copy(RECORDER_HANG / "pyspy_rank_0.txt", tmp_path / "pyspy_rank_2.txt")
    report = analyze(tmp_path)
    (f,) = report.findings
    assert report.stacks is not None and report.stacks.agreement == "questions"
    assert f.confidence == Confidence.MEDIUM
    assert f.stacks_agree is None


def test_the_waiting_ranks_stacks_alone_do_not_raise_it(tmp_path: Path) -> None:
    """Only the waiting ranks' stacks (rank 2's left out): they show that ranks 0, 1 and 3
    wait in the op, not that rank 2 is the one they wait on: medium, and said."""
    shutil.copytree(RECORDER_HANG, tmp_path, dirs_exist_ok=True)
    for name in ("stacks_rank_2.json", "pyspy_rank_2.txt", "pyspy_rank_2.json"):
        (tmp_path / name).unlink(missing_ok=True)
    f = _only(tmp_path)
    assert f.stacks_agree == "waiting"
    assert f.confidence == Confidence.MEDIUM
    assert why(f).endswith("; the Python stacks show the waiting ranks in the op")
