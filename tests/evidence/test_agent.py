"""A launcher log spanning attempts, cut at the elastic agent's restarts
(frtrace.evidence.agent), on real torchrun consoles (``agent_logs/`` beside this file: the
job ``job.py`` there, whose one rank fails in each attempt, run in that folder with
``python -m torch.distributed.run --nproc-per-node 2 --max-restarts 2 --tee 3
--monitor-interval 0.2 job.py > restarts_warning.log 2>&1`` (torchrun's default log level),
and with ``LOGLEVEL=INFO`` and ``--max-restarts 1`` into ``restarts_info.log``; torch 2.13)."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest

from frtrace.evidence.agent import attempt_parts, chosen_part
from frtrace.evidence.discover import load_evidence

LOGS = Path(__file__).resolve().parent / "agent_logs"
_UP = re.compile(r"^\[default\d\]:attempt (\d) rank \d up$")


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def _attempts_said(lines: list[str], first: int, end: int) -> set[int]:
    """The attempts the workers' own lines in lines[first:end] say they are."""
    return {int(m[1]) for ln in lines[first:end] if (m := _UP.match(ln))}


def test_default_level_log_is_cut_after_each_failure_before_the_next_workers() -> None:
    """torchrun's default level shows only the agent's 'failed (exitcode: ...)' line: each
    attempt's workers are in a part of their own, the agent's summary ends the last."""
    lines = _lines("restarts_warning.log")
    parts = attempt_parts(lines)
    assert [(p.back, p.number, p.replaced) for p in parts] == [
        (2, None, False),
        (1, None, False),
        (0, None, False),
    ]
    assert [_attempts_said(lines, p.first, p.end) for p in parts] == [{0}, {1}, {2}]
    assert "ChildFailedError" in "\n".join(lines[parts[-1].first : parts[-1].end])
    assert parts[0].first == 0 and parts[-1].end == len(lines)
    assert all(a.end == b.first for a, b in itertools.pairwise(parts))
    for attempt in (0, 1, 2):
        part = chosen_part(parts, attempt, 2)
        assert part is not None and _attempts_said(lines, part.first, part.end) == {attempt}
    assert chosen_part(parts, None, None) == parts[-1]


def test_info_level_log_numbers_its_attempts_itself() -> None:
    """At INFO the agent says 'Worker group FAILED. 1/1 attempts left; will restart' and each
    rendezvous's restart_count: the parts are numbered by the log, whatever the folder says."""
    lines = _lines("restarts_info.log")
    parts = attempt_parts(lines)
    assert [(p.number, p.back) for p in parts] == [(0, 1), (1, 0)]
    assert [_attempts_said(lines, p.first, p.end) for p in parts] == [{0}, {1}]
    restart = next(i for i, ln in enumerate(lines) if "will restart worker group" in ln)
    assert parts[1].first == restart + 1  # (the next rendezvous is the next attempt's)
    part = chosen_part(parts, 0, 7)  # (a folder that says otherwise: the log's own numbers)
    assert part is not None and _attempts_said(lines, part.first, part.end) == {0}


def test_a_log_whose_beginning_was_not_read_is_numbered_from_its_end() -> None:
    lines = _lines("restarts_warning.log")[12:]  # (only a log's last bytes are read)
    parts = attempt_parts(lines)
    assert [_attempts_said(lines, p.first, p.end) for p in parts] == [{1}, {2}]
    assert chosen_part(parts, 0, 2) is None  # attempt 0's lines are not in what was read
    part = chosen_part(parts, 1, 2)
    assert part is not None and _attempts_said(lines, part.first, part.end) == {1}


def test_a_membership_restart_leaves_lines_of_no_attempt() -> None:
    """'Detected 1 new nodes ...; will restart worker group' (api.py:962): the workers restart
    under the same attempt number; the lines before are of processes that are gone."""
    lines = _lines("restarts_info.log")
    grow = (
        "I1127 10:02:58.000000 8469 site-packages/torch/distributed/elastic/agent/server/"
        "api.py:962] [default] Detected 1 new nodes from group_rank=0; will restart worker group"
    )
    at = max(i for i, ln in enumerate(lines) if _UP.match(ln)) + 1
    lines = [
        *lines[:at],
        grow,
        *(ln.replace("attempt 1 ", "attempt 9 ") for ln in lines[at - 2 : at]),
        *lines[at:],
    ]
    parts = attempt_parts(lines)
    assert [(p.back, p.replaced) for p in parts] == [(1, False), (0, True), (0, False)]
    part = chosen_part(parts, 1, 1)
    assert part is parts[2] and _attempts_said(lines, part.first, part.end) == {9}


def test_a_log_without_restarts_is_one_part() -> None:
    lines = _lines("restarts_warning.log")[:12]
    (part,) = attempt_parts(lines)
    assert (part.first, part.end, part.back) == (0, len(lines), 0)
    assert chosen_part([part], 5, 9) is part


@pytest.mark.parametrize(
    ("attempt", "newest", "said"), [(None, None, "2"), (1, 2, "1"), (0, 2, "0"), (2, 2, "2")]
)
def test_each_attempt_reads_only_its_own_lines_of_the_tee_log(
    tmp_path: Path, attempt: int | None, newest: int | None, said: str
) -> None:
    """Read whole, the log held three failures of three attempts (two of them rank 0's):
    each attempt now gets its own, and the report says the rest was set aside."""
    shutil.copy(LOGS / "restarts_warning.log", tmp_path / "torchrun.log")
    found = load_evidence(tmp_path, world=2, attempt=attempt, newest=newest)
    booms = [f for f in found.failures if "boom in attempt" in f.message]
    assert [(f.rank, f.message[-1]) for f in booms] == [(1 if said == "0" else 0, said)]
    (problem,) = found.problems
    assert problem.startswith("torchrun.log: the elastic agent restarted the workers 2 time(s)")
    assert "set aside, never evidence" in problem


def test_an_attempt_the_log_does_not_hold_reads_none_of_it(tmp_path: Path) -> None:
    (tmp_path / "torchrun.log").write_text("\n".join(_lines("restarts_warning.log")[12:]))
    found = load_evidence(tmp_path, world=2, attempt=0, newest=2)
    assert not [f for f in found.failures if "boom" in f.message]
    assert [p.split(":")[0] for p in found.problems] == ["torchrun.log"]
    assert "none of attempt 0" in found.problems[0]
