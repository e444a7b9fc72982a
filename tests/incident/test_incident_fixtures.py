"""Real folders real jobs left (scripts/make_incident_fixtures.py): a torchrun restart, a
rerun into the same folder, collect into the recorder's folder, two snapshots, pod logs and a
Ray session's logs. Each gives its truth, or says it cannot tell: never an innocent rank; the
two with an earlier attempt or run give its history, each line from its own files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frtrace.cli.app import app
from frtrace.report.json_schema import report_schema

TREE = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
TRUTH = json.loads((TREE / "MANIFEST.json").read_text())
SEVERAL = {"restart", "rerun"}  # the folders that hold an earlier attempt or run


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures with their files' times as the jobs left them (a checkout's are new)."""
    root = tmp_path_factory.mktemp("incidents")
    for name, truth in TRUTH.items():
        shutil.copytree(TREE / name, root / name)
        for relative, mtime in truth["mtimes"].items():
            os.utime(root / name / relative, (mtime, mtime))
    return root


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures as a checkout leaves them, at their worst: every file's time new (a
    year and more after the jobs ran), in reverse path order (an earlier snapshot's files
    newer than the later one's, a stale dump newer than today's)."""
    root = tmp_path_factory.mktemp("checkout")
    later = max(m for truth in TRUTH.values() for m in truth["mtimes"].values()) + 400 * 86400
    for name in TRUTH:
        shutil.copytree(TREE / name, root / name)
        files = sorted(p for p in (root / name).rglob("*") if p.is_file())
        for i, path in enumerate(reversed(files)):
            os.utime(path, (later + i, later + i))
    return root


def analyze(root: Path, name: str, *args: str) -> tuple[int, dict[str, Any], list[str]]:
    result = CliRunner().invoke(
        app, ["analyze", str(root / name), "-f", "json", "--no-cache", *args]
    )
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(report_schema()).validate(doc)
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")]
    return result.exit_code, doc, warnings


def named(doc: dict[str, Any]) -> set[int]:
    return set(doc["culprit_ranks"]) | set(doc.get("suspected_ranks") or ())


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_no_fixture_names_an_innocent_rank_or_one_outside_the_job(
    incidents: Path, name: str
) -> None:
    _, doc, _ = analyze(incidents, name)
    truth = TRUTH[name]
    assert not named(doc) & set(truth["innocent_ranks"]), doc["headline"]
    assert named(doc) <= set(truth["culprit_ranks"])
    ranks = [e["rank"] for e in doc.get("timeline") or () if e["rank"] is not None]
    assert all(0 <= r < truth["world_size"] for r in ranks)
    assert ("history" in doc) == (name in SEVERAL)
    for line in doc["history"]["attempts"] if name in SEVERAL else ():
        said = truth.get("attempts", {}).get(str(line["attempt"]), truth)
        if line["this"]:
            said = truth
        assert set(line["culprit_ranks"]) <= set(said.get("culprit_ranks") or ()), line
        ranks = line["culprit_ranks"] + line["suspected_ranks"]
        assert all(0 <= r < truth["world_size"] for r in ranks), line


def history(doc: dict[str, Any]) -> list[tuple[int, bool, str, list[int], list[int]]]:
    """Each line of the report's history: (attempt, later, verdict, culprits, suspects)."""
    return [
        (a["attempt"], a["later"], a["verdict"], a["culprit_ranks"], a["suspected_ranks"])
        for a in doc["history"]["attempts"]
    ]


def test_restart_analyses_the_last_attempt_and_sets_the_stale_dump_aside(incidents: Path) -> None:
    """rank 3's file is attempt 0's (it never dumped in attempt 1, where it hung): a rank
    without a dump of attempt 1, never the op the others 'never joined'; attempt 0's logs set
    aside. (Before: 'culprit ranks 0-2', the three innocent ranks.)"""
    _, doc, warnings = analyze(incidents, "restart")
    assert doc["ranks_loaded"] == [0, 1, 2]
    assert any(
        "comm_lib_trace_rank_3: rank 3's dump is of an earlier attempt or run" in w
        and "rank 3 has no dump of attempt 1" in w
        for w in warnings
    ), warnings
    assert any("/attempt_0/: 11 logs and error files of an earlier attempt" in w for w in warnings)
    assert not {0, 1, 2} & named(doc)
    sources = {e["source"].split(":")[0] for e in doc.get("timeline") or ()}
    assert not any("/attempt_0/" in s for s in sources), sources


def test_restart_reads_torchruns_console_for_this_attempt_only(incidents: Path) -> None:
    """torchrun.log (--tee) spans both attempts: only the lines after the agent's 'failed
    (exitcode: 1)' of attempt 0 are attempt 1's evidence, so rank 3 (timed out in attempt 0,
    silent in attempt 1 but for the agent's SIGTERM) is the rank the others waited on, as the
    fixture was built (it was 'cannot tell': attempt 0's lines made rank 3 heard from)."""
    code, doc, _ = analyze(incidents, "restart")
    assert (code, doc["verdict"], doc["suspected_ranks"]) == (1, "hang", [3])
    lines = [
        int(e["source"].split(":")[1])
        for e in doc["timeline"]
        if e["source"].startswith("torchrun.log:")
    ]
    assert lines and min(lines) > 93  # (line 93: attempt 0's failure, the restart)
    (aside,) = [p for p in doc["evidence_problems"] if p.startswith("torchrun.log: ")]
    assert "only lines 94-256 (attempt 1) read" in aside
    _, doc0, _ = analyze(incidents, "restart", "--attempt", "0")
    lines = [
        int(e["source"].split(":")[1])
        for e in doc0["timeline"]
        if e["source"].startswith("torchrun.log:")
    ]
    assert lines and max(lines) <= 93


def test_attempt_0_is_analysed_on_request_and_an_unknown_attempt_is_one_line(
    incidents: Path,
) -> None:
    _, doc, warnings = analyze(incidents, "restart", "--attempt", "0")
    assert any("/attempt_1/: " in w and "a later attempt" in w for w in warnings), warnings
    assert 3 not in doc["culprit_ranks"]  # rank 3 waited in attempt 0 (rank 1 never joined)
    sources = {e["source"].split(":")[0] for e in doc.get("timeline") or ()}
    assert not any("/attempt_1/" in s for s in sources), sources
    result = CliRunner().invoke(app, ["analyze", str(incidents / "restart"), "--attempt", "7"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: --attempt 7: ") and "attempt_0, attempt_1" in line


def test_rerun_into_the_same_folder(incidents: Path) -> None:
    code, doc, warnings = analyze(incidents, "rerun")
    assert (code, doc["verdict"], doc["culprit_ranks"]) == (1, "hang", [3])
    assert any("rank 3 has no dump of attempt" in w for w in warnings), warnings


def test_collect_into_the_recorders_folder_gives_the_verdict(incidents: Path) -> None:
    """frtrace.recorder.enable(DIR), then frtrace collect DIR, then analyze DIR: exit 1 with
    the culprit (it was 'holds 2 dump sets for the same ranks', exit 2)."""
    code, doc, warnings = analyze(incidents, "recorder_collect")
    assert (code, doc["verdict"], doc["culprit_ranks"]) == (1, "hang", [2])
    assert any("(copies): each read once" in w for w in warnings), warnings


def test_snapshots_of_one_job_the_newest_is_the_incident(incidents: Path) -> None:
    code, doc, warnings = analyze(incidents, "snapshots")
    assert (code, doc["verdict"], doc["culprit_ranks"]) == (1, "hang", [2])
    assert any(
        w.startswith("warning: snap1/") and "an earlier snapshot of the same ranks" in w
        for w in warnings
    ), warnings


def test_pod_logs_are_their_pytorchjob_ranks(incidents: Path) -> None:
    """train-master-0 is rank 0, train-worker-<i> rank i + 1: never the pod's index."""
    _, doc, _ = analyze(incidents, "pod_logs")
    pods = {"train-master-0.log": 0, "train-worker-0.log": 1, "train-worker-2.log": 3}
    seen = [(e["source"].split(":")[0], e["rank"]) for e in doc.get("timeline") or ()]
    assert seen and all(pods.get(src, rank) == rank for src, rank in seen), seen
    assert {src for src, _ in seen} & set(pods)


def test_ray_logs_take_ranks_from_rays_table_never_from_a_pid(incidents: Path) -> None:
    _, doc, _ = analyze(incidents, "ray_logs")
    seen = {e["rank"] for e in doc.get("timeline") or ()}
    assert seen and seen <= {0, 2, 3, None}, seen  # (rank 1 hung: it never failed)
    assert {0, 2, 3} <= seen  # the driver's (RayTrainWorker pid=...) lines, by Ray's table


def test_pod_logs_name_the_pod_that_retried_to_the_end(incidents: Path) -> None:
    """rank 2 (train-worker-1) left no dump; its pod log retries a refused fetch until the
    pod is stopped: the first cause, while every other rank failed waiting (it was 'cannot
    tell', no suspect)."""
    code, doc, _ = analyze(incidents, "pod_logs")
    assert (code, doc["verdict"], doc["culprit_ranks"]) == (1, "hang", [2])
    retrying = [e for e in doc["timeline"] if e["kind"] == "retrying"]
    assert [(e["rank"], e["role"], e["source"]) for e in retrying] == [
        (2, "cause", "train-worker-1.log:5")
    ]


def test_restart_reads_as_history_attempt_1_then_attempt_0(incidents: Path) -> None:
    """Attempt 0's own files (rank 3's dump, its attempt_0 logs) suspect rank 1, the truth:
    ranks 0 and 2 lost their dumps to attempt 1, but their attempt_0 logs say they timed out
    waiting, so they waited with rank 3 (they were suspected with rank 1 before); no rank
    repeats. Attempt 1 suspects rank 3 (torchrun.log read for its lines only)."""
    _, doc, _ = analyze(incidents, "restart")
    assert history(doc) == [
        (1, False, "hang", [], [3]),
        (0, False, "hang", [], [1]),
    ]
    earlier = doc["history"]["attempts"][1]
    assert earlier["code"] == "FR008"
    assert earlier["summary"].startswith(
        "attempt 0: hang; suspected (no dump) rank 1: the others stopped in an op (from 1 of 4 "
        "dumps"
    )
    assert doc["history"]["repeat_offenders"] == [] and doc["history"]["left_out"] == []
    _, doc0, _ = analyze(incidents, "restart", "--attempt", "0")
    assert [(n, later) for n, later, *_ in history(doc0)] == [(0, False), (1, True)]
    # attempt 1's own files: every rank with a dump failed waiting, rank 3 left none
    assert doc0["history"]["attempts"][1]["summary"].startswith(
        "attempt 1 (later): hang; suspected (no dump) rank 3"
    )


def test_rerun_history_is_the_earlier_runs_own_dump_never_todays_logs(incidents: Path) -> None:
    """Run a's rank 3 finished: healthy from its own dump. Its folder's logs are two runs'
    attempt_0 (not numbered as the dumps' lifetimes): never its evidence, so run b's rank 3
    is not named twice (which would blame its machine)."""
    _, doc, _ = analyze(incidents, "rerun")
    assert history(doc) == [(1, False, "hang", [3], []), (0, False, "healthy", [], [])]
    assert doc["history"]["attempts"][1]["evidence_files"] == 0
    assert doc["history"]["repeat_offenders"] == []


def test_ray_logs_suspect_the_rank_that_left_no_dump_and_said_nothing(incidents: Path) -> None:
    """Ranks 0, 2 and 3 dumped and each failed waiting (Ray's driver lines, by its table);
    rank 1 left no dump and said nothing: suspected, never confirmed (it was 'cannot tell')."""
    code, doc, _ = analyze(incidents, "ray_logs")
    assert (code, doc["verdict"], doc["suspected_ranks"]) == (1, "hang", [1])
    (f,) = [f for f in doc["findings"] if f["kind"] == "missing_dump"]
    assert (f["culprit_ranks"], f["waiting_ranks"], f["confidence"]) == ([1], [0, 2, 3], "low")


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_a_checkouts_file_times_change_no_verdict(
    incidents: Path, checkout: Path, name: str
) -> None:
    """Analysed in place (new file times, in any order), each fixture gives what it gives with
    the times its job left: which dump is stale, which snapshot is the newest and the year
    of a log's glog times come from what the files carry (entries, dump times), not their
    file times. (Before: the rerun named ranks 0-2, the three innocents, and the snapshots
    analysed the earlier one.)"""
    _, doc, warnings = analyze(checkout, name)
    truth = TRUTH[name]
    assert not named(doc) & set(truth["innocent_ranks"]), doc["headline"]
    _, want, want_warnings = analyze(incidents, name)
    keys = ("verdict", "culprit_ranks", "suspected_ranks", "ranks_loaded", "timeline", "history")
    assert {k: doc.get(k) for k in keys} == {k: want.get(k) for k in keys}
    assert warnings == want_warnings
