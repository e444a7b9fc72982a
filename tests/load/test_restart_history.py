"""A restarted job's report reads as its history: this attempt's verdict, then a line per
other attempt (each from its own dumps and attempt_N logs), then the rank or host named in
several, said plainly. Built with ``restarted_job`` (one fixed dump folder, torchrun's
``--log-dir``), run through the CLI as a user would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frtrace.analysis.history import MAX_OTHER_ATTEMPTS
from frtrace.cli.app import app
from frtrace.load.restarts import other_attempt
from frtrace.load.tables import load_dumps
from frtrace.report.json_schema import report_schema
from tests.load.restarted_job import CUDA, restarted_job, stopped_at, waited_in

jsonschema = pytest.importorskip("jsonschema")

# attempt 0: rank 1 (node-b) fails with a CUDA error and dumps; attempt 1: it fails again
# (no dump: its file is attempt 0's), the others wait in all_reduce #3 and dump
SAME_RANK = {
    "dumps": {0: {1: stopped_at(5)}, 1: {0: waited_in(3), 2: waited_in(3), 3: waited_in(3)}},
    "errors": {0: {1: CUDA}, 1: {1: CUDA}},
    "hosts": {0: "node-a", 1: "node-b", 2: "node-c", 3: "node-d"},
}


def _run(folder: Path, *args: str) -> tuple[dict[str, Any], str]:
    """The JSON report (validated against the schema) and the text report."""
    runner = CliRunner()
    out = runner.invoke(app, ["analyze", str(folder), "-f", "json", "--no-cache", *args])
    assert out.exit_code in (0, 1), out.output
    doc: dict[str, Any] = json.loads(out.stdout[out.stdout.index("{") :])
    jsonschema.Draft202012Validator(report_schema()).validate(doc)
    text = runner.invoke(app, ["analyze", str(folder), "--no-cache", *args])
    assert text.exit_code in (0, 1), text.output
    return doc, text.stdout


def _lines(doc: dict[str, Any]) -> list[tuple[int, list[int], list[int]]]:
    """(attempt, culprits, suspects) of each line of the history, in its order."""
    return [
        (a["attempt"], a["culprit_ranks"], a["suspected_ranks"]) for a in doc["history"]["attempts"]
    ]


def test_the_same_rank_failing_in_two_attempts_is_said_plainly(tmp_path: Path) -> None:
    doc, text = _run(restarted_job(tmp_path / "job", **SAME_RANK))
    assert doc["culprit_ranks"] == [1]
    assert _lines(doc) == [(1, [1], []), (0, [1], [])]
    this, earlier = doc["history"]["attempts"]
    assert (this["this"], earlier["this"], earlier["later"]) == (True, False, False)
    assert earlier["hosts"] == {"1": "node-b"} and earlier["cause"] == "cuda_error"
    assert earlier["ranks_loaded"] == 1  # rank 1's dump of attempt 0 (the others' overwritten)
    (repeat,) = doc["history"]["repeat_offenders"]
    assert (repeat["rank"], repeat["hosts"], repeat["attempts"]) == (1, ["node-b"], [0, 1])
    said = (
        "rank 1 (node-b) was the culprit in attempts 0 and 1 (this one): suspect the machine, "
        "not the code"
    )
    assert repeat["summary"] == said
    # the verdict first, then this attempt's line, then the earlier one's, then the repeat
    flat = " ".join(text.split())
    order = [
        "HANG: culprit rank 1",
        "Restart history",
        "attempt 1 (this report): hang; rank 1",
        "attempt 0: hang; rank 1 (on node-b): failed first (cuda_error)",
        said,
        "What failed, and when",
    ]
    at = [flat.index(s) for s in order]
    assert at == sorted(at), at


def test_one_host_holding_the_culprit_of_two_attempts_is_said_plainly(tmp_path: Path) -> None:
    """Attempt 0's culprit is rank 1 and attempt 1's rank 0, both on node-b: the host, not
    one rank, repeats."""
    folder = restarted_job(
        tmp_path / "job",
        dumps={0: {1: stopped_at(5)}, 1: {0: stopped_at(3), 2: waited_in(3), 3: waited_in(3)}},
        errors={0: {1: CUDA}, 1: {0: CUDA}},
        hosts={0: "node-b", 1: "node-b", 2: "node-c", 3: "node-c"},
    )
    doc, text = _run(folder)
    assert _lines(doc) == [(1, [0], []), (0, [1], [])]
    (repeat,) = doc["history"]["repeat_offenders"]
    assert (repeat["rank"], repeat["hosts"], repeat["ranks"]) == (None, ["node-b"], [0, 1])
    assert "host node-b held the culprit in attempts 0 and 1 (this one) (ranks 0-1): suspect " in (
        " ".join(text.split())
    )


def test_attempt_0_on_request_lists_attempt_1_as_later(tmp_path: Path) -> None:
    doc, text = _run(restarted_job(tmp_path / "job", **SAME_RANK), "--attempt", "0")
    assert doc["ranks_loaded"] == [1] and doc["history"]["attempt"] == 0
    assert _lines(doc) == [(0, [1], []), (1, [1], [])]
    assert [a["later"] for a in doc["history"]["attempts"]] == [False, True]
    assert "attempt 1 (later): hang; rank 1" in " ".join(text.split())
    assert doc["history"]["repeat_offenders"][0]["attempts"] == [0, 1]


def test_attempts_are_numbered_from_the_newest_folder_under_attempt(tmp_path: Path) -> None:
    """Three attempt folders, dumps of attempts 1 and 2: --attempt 1 is the older lifetime
    (it was the newest: the lifetimes were numbered from the attempt asked for), and attempt
    0, whose dumps were all overwritten, is its logs alone."""
    folder = restarted_job(
        tmp_path / "job",
        dumps={1: {1: stopped_at(4)}, 2: {0: waited_in(3), 2: waited_in(3), 3: waited_in(3)}},
        errors={0: {2: CUDA}, 1: {1: CUDA}, 2: {1: CUDA}},
    )
    doc, _ = _run(folder, "--attempt", "1")
    assert doc["ranks_loaded"] == [1]
    assert _lines(doc) == [(1, [1], []), (0, [2], []), (2, [1], [])]
    assert [a["ranks_loaded"] for a in doc["history"]["attempts"]] == [1, 0, 3]
    logs_only, _ = _run(folder, "--attempt", "0")
    assert logs_only["ranks_loaded"] == [] and logs_only["culprit_ranks"] == [2]


def test_a_job_restarted_many_times_analyses_the_nearest_attempts(tmp_path: Path) -> None:
    newest = MAX_OTHER_ATTEMPTS + 3
    folder = restarted_job(
        tmp_path / "job",
        dumps={newest: {0: waited_in(3), 2: waited_in(3), 3: waited_in(3)}},
        errors={n: {1: CUDA} for n in range(newest + 1)},
    )
    doc, text = _run(folder)
    history = doc["history"]
    analysed = [a["attempt"] for a in history["attempts"]]
    assert analysed == [newest, *range(3, newest)]
    assert history["left_out"] == [0, 1, 2]
    assert "3 other attempts not analysed (0-2): --attempt N analyses one" in text
    (repeat,) = history["repeat_offenders"]
    assert (repeat["rank"], repeat["attempts"]) == (1, list(range(3, newest + 1)))


def test_another_attempt_is_cut_from_its_own_files_only(tmp_path: Path) -> None:
    """Attempt 0: rank 1's dump and sidecar, its attempt_0 folder; never attempt 1's logs
    nor the other ranks' sidecars."""
    folder = restarted_job(tmp_path / "job", **SAME_RANK)
    dumps = load_dumps(folder)
    assert dumps.restarts is not None and dumps.restarts.others == (0,)
    assert dumps.restarts.attempt == 1 and dumps.restarts.folders
    earlier = other_attempt(dumps, 0)
    assert earlier.loaded_ranks == (1,) and earlier.missing_ranks == (0, 2, 3)
    assert earlier.world.size == 4 and earlier.restarts is None
    files = sorted(f.relative for f in earlier.side_files or ())
    assert files == sorted(
        [f"logs/run/attempt_0/{r}/{n}" for r in range(4) for n in ("error.json", "stderr.log")]
        + ["stacks_rank_1.json"]
    )
    with pytest.raises(ValueError, match="attempt 1 is not another attempt"):
        other_attempt(dumps, 1)


def test_one_attempt_has_no_history(tmp_path: Path) -> None:
    folder = restarted_job(
        tmp_path / "job",
        dumps={1: {0: waited_in(3), 2: waited_in(3), 3: waited_in(3)}},
        errors={1: {1: CUDA}},
    )
    doc, text = _run(folder)
    assert load_dumps(folder).restarts is None
    assert "history" not in doc and "Restart history" not in text
