"""FR 2.11 all_to_all split sizes name the mismatched peer pair (FR003)."""

from __future__ import annotations

from pathlib import Path

from frtrace.pipeline import analyze
from frtrace.report.wording import summary
from tests.conftest import fr211_set


def test_a_mismatched_split_names_the_pair(tmp_path: Path) -> None:
    """Rank 1 sends 8 to rank 2, which expects 4: FR003 names both, with the sizes."""
    report = analyze(fr211_set(tmp_path), jobs=1)
    found = [f for f in report.findings if f.code == "FR003"]
    assert len(found) == 1
    f = found[0]
    assert f.culprit_ranks == (1, 2)
    assert "rank 1 sends 8 elements to rank 2, which expects 4" in summary(f)
    assert f.group is not None and f.group.desc == "ep" and f.seq == 1
    assert report.verdict == "desync"


def test_one_rank_off_for_every_peer_is_the_culprit(tmp_path: Path) -> None:
    """A rank in every mismatched pair is named alone, with high confidence."""
    fr211_set(tmp_path)
    import pickle

    path = tmp_path / "comm_lib_trace_rank_3"
    dump = pickle.loads(path.read_bytes())
    dump["entries"][1]["output_split_sizes"] = [2, 2, 2, 2]
    dump["entries"][1]["input_split_sizes"] = [4, 4, 4, 4]
    path.write_bytes(pickle.dumps(dump, protocol=2))
    other = tmp_path / "comm_lib_trace_rank_1"
    fixed = pickle.loads(other.read_bytes())
    fixed["entries"][1]["input_split_sizes"] = [4, 4, 4, 4]
    other.write_bytes(pickle.dumps(fixed, protocol=2))
    report = analyze(tmp_path, jobs=1)
    (f,) = [f for f in report.findings if f.code == "FR003"]
    assert f.culprit_ranks == (3,)
    assert "more pairs" in summary(f)


def test_matching_splits_give_no_size_finding(tmp_path: Path) -> None:
    """Consistent splits: no FR003 (the hang itself is below the recorder: FR009)."""
    report = analyze(fr211_set(tmp_path, bad_split=False), jobs=1)
    assert not [f for f in report.findings if f.code == "FR003"]
    assert report.verdict == "cannot_tell"


def test_a_split_mismatch_is_not_also_called_matching(tmp_path: Path) -> None:
    """Once FR003 says the splits disagree, no FR009 says the same op had matching arguments."""
    report = analyze(fr211_set(tmp_path), jobs=1)
    assert [f.kind.value for f in report.findings] == ["size_mismatch"]
