"""File discovery: ranks from file names, what is skipped, what is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from frtrace.errors import DumpDirNotFound, DuplicateRank, NoDumpsFound
from frtrace.incident.discover import discover, parse_dump_name


@pytest.mark.parametrize(
    ("name", "prefix", "rank", "encoding"),
    [
        ("nccl_trace_rank_3", "nccl_trace_rank_", 3, "auto"),
        ("comm_lib_trace_rank_12", "comm_lib_trace_rank_", 12, "auto"),
        ("rank_3", "rank_", 3, "auto"),
        ("trace_3", "trace_", 3, "auto"),
        ("nccl_trace_rank_node02_5", "nccl_trace_rank_node02_", 5, "auto"),
        (
            "nccl_trace_rank_container-node02.cluster_7",
            "nccl_trace_rank_container-node02.cluster_",
            7,
            "auto",
        ),
        ("rank_3.json", "rank_", 3, "json"),
        ("rank_3.pkl", "rank_", 3, "pickle"),
        ("rank_3.pickle", "rank_", 3, "pickle"),
        ("4", "", 4, "auto"),
    ],
)
def test_rank_comes_from_the_digits_ending_the_name(
    name: str, prefix: str, rank: int, encoding: str
) -> None:
    """Every naming torch and its users produce yields the global rank."""
    assert parse_dump_name(name) == (prefix, rank, encoding)


@pytest.mark.parametrize(
    "name",
    [
        "nccl_trace_rank_3.pipe",
        "train.log",
        "rank_3.log",
        "rank_3.log.1",
        "README.md",
        "MANIFEST.json",
        "expected.json",
        "core.1234",
        "rank_3.txt",
        "notes",
    ],
)
def test_names_that_are_not_dumps_are_rejected(name: str) -> None:
    """Logs, pipes, READMEs, core files are not dumps."""
    assert parse_dump_name(name) is None


def test_directory_walk_is_recursive_and_notes_skipped_files(tmp_path: Path) -> None:
    """Dumps in subfolders are found; a log is a side file (analyze reads it); other files
    are listed as skipped with a reason."""
    (tmp_path / "comm_traces").mkdir()
    (tmp_path / "comm_traces" / "rank_0").write_bytes(b"x")
    (tmp_path / "comm_traces" / "rank_1").write_bytes(b"x")
    (tmp_path / "train.log").write_text("log")
    (tmp_path / "notes.md").write_text("notes")
    os.mkfifo(tmp_path / "nccl_trace_rank_0.pipe")
    found = discover(tmp_path)
    assert [c.rank for c in found.candidates] == [0, 1]
    assert [(f.relative, f.kind) for f in found.side_files] == [("train.log", "log")]
    reasons = {p.path.name: p.reason for p in found.skipped}
    assert reasons == {
        "notes.md": "name does not end in a rank number",
        "nccl_trace_rank_0.pipe": "not a regular file",
    }


def test_two_files_for_one_rank_is_an_error_naming_both(tmp_path: Path) -> None:
    """rank_3 and rank_3.json in one tree are ambiguous."""
    (tmp_path / "rank_3").write_bytes(b"x")
    (tmp_path / "rank_3.json").write_text("{}")
    with pytest.raises(DuplicateRank) as err:
        discover(tmp_path)
    assert "rank_3 and" in str(err.value) and "rank_3.json" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_empty_directories_raise_input_errors(tmp_path: Path) -> None:
    """No directory, a file, or nothing dump-like: one-line errors with a next step."""
    with pytest.raises(DumpDirNotFound, match="no such directory"):
        discover(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(DumpDirNotFound, match="is a file"):
        discover(tmp_path / "f")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NoDumpsFound, match="frtrace env"):
        discover(empty)
