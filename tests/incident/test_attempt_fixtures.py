"""Real restarted jobs whose attempts differ (scripts/make_attempt_fixtures.py, issue 50):
an attempt that died in ``init_process_group`` and a world that shrank between attempts. Each
attempt is what its own evidence says: the truth of the judged attempt, from its own dumps and
logs; no rank named outside its attempt's world; the other attempt's files never evidence.
"""

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
TRUTH = json.loads((TREE / "MANIFEST_attempts.json").read_text())


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures with their files' times as the jobs left them (a checkout's are new)."""
    root = tmp_path_factory.mktemp("attempts")
    for name, truth in TRUTH.items():
        shutil.copytree(TREE / name, root / name)
        for relative, mtime in truth["mtimes"].items():
            os.utime(root / name / relative, (mtime, mtime))
    return root


def analyze(folder: Path, *args: str) -> tuple[dict[str, Any], list[str]]:
    result = CliRunner().invoke(app, ["analyze", str(folder), "-f", "json", "--no-cache", *args])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(report_schema()).validate(doc)
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")]
    return doc, warnings


def named(doc: dict[str, Any]) -> set[int]:
    """Every rank the report names: culprits, suspects, what the findings and the timeline
    name, its named ranks (each with its role)."""
    ranks = set(doc["culprit_ranks"]) | set(doc["suspected_ranks"])
    ranks |= {n["rank"] for n in doc["named_ranks"]}
    for f in doc["findings"]:
        ranks |= set(f["culprit_ranks"]) | set(f["waiting_ranks"])
    ranks |= {e["rank"] for e in doc.get("timeline") or () if e["rank"] is not None}
    return ranks


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_the_judged_attempt_names_its_truth_and_no_rank_outside_its_world(
    folders: Path, name: str
) -> None:
    doc, _ = analyze(folders / name)
    truth = TRUTH[name]
    judged = doc["history"]["attempt"]
    assert judged == truth["judged_attempt"]
    assert doc["verdict"] == truth["verdict"]
    culprits = set(doc["culprit_ranks"]) | set(doc["suspected_ranks"])
    assert culprits == set(truth["culprit_ranks"]), doc["headline"]
    assert doc["world_size"] == truth["attempts"][str(judged)]["world_size"]
    assert all(0 <= r < doc["world_size"] for r in named(doc)), named(doc)
    assert not culprits & set(truth["innocent_ranks"])
    for line in doc["history"]["attempts"]:
        said = truth["attempts"][str(line["attempt"])]
        ranks = set(line["culprit_ranks"]) | set(line["suspected_ranks"])
        assert set(line["culprit_ranks"]) <= set(said.get("culprit_ranks", ())), line
        assert all(0 <= r < said["world_size"] for r in ranks), line
        assert line["world_size"] == said["world_size"], line
        assert line.get("died_in_init", False) == said.get("died_in_init", False), line


def test_an_attempt_that_died_in_init_never_takes_the_earlier_attempts_dumps(
    folders: Path,
) -> None:
    """Attempt 1 died in init_process_group (rank 2's connectFullMesh failed; its dump has no
    op): attempt 0, the only one with ops, is judged from its own dumps (ranks 0, 1, 3), its
    attempt_0 logs and its part of torchrun's console; rank 2 left no dump of it: suspected.
    Attempt 1's line names nobody. (Before: attempt 0's dumps were filed under attempt 1, and
    rank 2 named from attempt 1's init failure.)"""
    doc, warnings = analyze(folders / "restart_dies_in_init")
    assert doc["ranks_loaded"] == [0, 1, 3]
    assert (doc["culprit_ranks"], doc["suspected_ranks"]) == ([2], [2])
    assert any(
        w.startswith("warning: comm_lib_trace_rank_2: rank 2's dump is not of attempt 0")
        and "never got through init_process_group" in w
        and "a later attempt" in w
        for w in warnings
    ), warnings
    assert any("attempt 1 died in init_process_group" in w for w in warnings), warnings
    assert any("/attempt_1/: " in w and "a later attempt" in w for w in warnings), warnings
    sources = {e["source"].split(":")[0] for e in doc["timeline"]}
    assert not any("/attempt_1/" in s for s in sources), sources
    console = [
        int(e["source"].split(":")[1]) for e in doc["timeline"] if "torchrun.log:" in e["source"]
    ]
    restart = _restart_line(folders / "restart_dies_in_init" / "torchrun.log")
    assert console and max(console) <= restart
    this, later = doc["history"]["attempts"]
    assert (this["attempt"], later["attempt"], later["later"]) == (0, 1, True)
    assert later["died_in_init"] and later["culprit_ranks"] == later["suspected_ranks"] == []
    assert later["summary"].startswith("attempt 1 (later): died in init_process_group")
    assert doc["history"]["repeat_offenders"] == []


def _restart_line(log: Path) -> int:
    """The line of torchrun's console where the agent says attempt 0's worker failed."""
    lines = log.read_text().splitlines()
    return next(i + 1 for i, ln in enumerate(lines) if "failed (exitcode:" in ln)


def test_the_attempt_that_died_in_init_is_analysed_on_request(folders: Path) -> None:
    doc, warnings = analyze(folders / "restart_dies_in_init", "--attempt", "1")
    assert doc["ranks_loaded"] == [2]
    assert doc["history"]["attempt"] == 1 and doc["history"]["attempts"][0]["died_in_init"]
    assert any("rank 3's dump is of an earlier attempt" in w for w in warnings), warnings
    assert all(0 <= r < doc["world_size"] for r in named(doc))


def test_a_shrunk_world_is_its_own_and_the_lost_rank_is_never_named(folders: Path) -> None:
    """Attempt 1 ran 3 ranks (its dumps' recorder sidecars say so: Gloo records no group's
    members); rank 3's dump and node b's ValueError are attempt 0's: rank 3 is not of attempt
    1, never named, and never a repeat offender. (Before: a world of 4, rank 3 'no dump' and
    the culprit from attempt 0's ValueError.)"""
    doc, warnings = analyze(folders / "shrinking_world")
    assert (doc["world_size"], doc["ranks_loaded"], doc["ranks_missing"]) == (3, [0, 2], [1])
    assert 3 not in named(doc)
    assert any(
        w.startswith("warning: comm_lib_trace_rank_3: ")
        and "rank 3 is not of attempt 1 (its world: 3 ranks)" in w
        for w in warnings
    ), warnings
    assert doc["history"]["repeat_offenders"] == []
    earlier = doc["history"]["attempts"][1]
    assert (earlier["attempt"], earlier["world_size"], earlier["culprit_ranks"]) == (0, 4, [3])


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_a_checkouts_file_times_change_no_answer(folders: Path, tmp_path: Path, name: str) -> None:
    """Every file's time new, in reverse path order: which attempt each dump is of comes from
    what the files carry (entries, the sidecars' dump times and worlds), not their times."""
    shutil.copytree(TREE / name, tmp_path / name)
    files = sorted(p for p in (tmp_path / name).rglob("*") if p.is_file())
    later = max(TRUTH[name]["mtimes"].values()) + 400 * 86400
    for i, path in enumerate(reversed(files)):
        os.utime(path, (later + i, later + i))
    doc, warnings = analyze(tmp_path / name)
    want, want_warnings = analyze(folders / name)
    keys = ("verdict", "culprit_ranks", "suspected_ranks", "ranks_loaded", "world_size", "history")
    assert {k: doc.get(k) for k in keys} == {k: want.get(k) for k in keys}
    assert warnings == want_warnings
