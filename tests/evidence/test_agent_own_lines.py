"""Only the elastic agent's own lines cut a launcher's log at a restart
(frtrace.evidence.agent): a worker's line that quotes the agent's words ("Detected 1 new nodes
...; will restart worker group" in a fetch error) cuts nothing, whatever prefix it has; the
agent's lines cut in each format torch has logged them in (issue 53, item 4)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from frtrace.evidence.agent import attempt_parts
from frtrace.evidence.discover import load_evidence

LOGS = Path(__file__).resolve().parent / "agent_logs"
_UP = re.compile(r"^\[default\d\]:attempt (\d) rank \d up$")
_API = "site-packages/torch/distributed/elastic/agent/server/api.py"
_GLOG = "I1127 10:02:49.500000 8283 " + _API
DETECTED = "[default] Detected 1 new nodes from group_rank=0; will restart worker group"

# What a worker may print: each quotes an agent's line, none is one.
QUOTES = {
    "tee-detected": f"[default0]:RuntimeError: fetch failed: {_GLOG}:962] {DETECTED}",
    "tee-whole-agent-line": f"[default0]:{_GLOG}:962] {DETECTED}",
    "c10d-detected": f"[rank0]:{_GLOG}:962] {DETECTED}",
    "tee-c10d-detected": f"[default0]:[rank0]: store get failed ({DETECTED})",
    "bare-quote": f'retrying store get: "{_GLOG}:962] {DETECTED}"',
    "bare-1x-quote": f"fetch failed: INFO:torch.distributed.elastic.agent.server.api:{DETECTED}",
    "tee-worker-group-failed": (
        "[default1]:saw: [default] Worker group FAILED. 1/3 attempts left; "
        "will restart worker group"
    ),
    "tee-rendezvous": "[default1]:] [default] Rendezvous complete for workers. Result:",
    "not-elastic-module": f"I1127 10:02:49.500000 8283 job/fetch.py:12] {DETECTED}",
}


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def _attempts_said(lines: list[str], first: int, end: int) -> set[int]:
    return {int(m[1]) for ln in lines[first:end] if (m := _UP.match(ln))}


def _with_quote(quote: str) -> list[str]:
    """restarts_warning.log with ``quote`` printed by attempt 2's failing rank right after its
    error (before the agent notices): its cause precedes the quote."""
    lines = _lines("restarts_warning.log")
    at = lines.index("[default0]:RuntimeError: boom in attempt 2") + 1
    return [*lines[:at], quote, *lines[at:]]


@pytest.mark.parametrize("quote", list(QUOTES.values()), ids=list(QUOTES))
def test_a_line_quoting_the_agent_cuts_nothing(quote: str) -> None:
    lines = _with_quote(quote)
    parts = attempt_parts(lines)
    assert [(p.back, p.number, p.replaced) for p in parts] == [
        (2, None, False),
        (1, None, False),
        (0, None, False),
    ]
    assert [_attempts_said(lines, p.first, p.end) for p in parts] == [{0}, {1}, {2}]


@pytest.mark.parametrize("quote", list(QUOTES.values()), ids=list(QUOTES))
def test_a_worker_quoting_a_restart_keeps_the_culprits_cause(tmp_path: Path, quote: str) -> None:
    """Before: the quote cut the log, the lines before it (rank 0's 'boom in attempt 2')
    were set aside as a replaced group's, and the newest attempt had no cause."""
    (tmp_path / "torchrun.log").write_text("\n".join(_with_quote(quote)) + "\n")
    found = load_evidence(tmp_path, world=2)
    booms = [f for f in found.failures if "boom in attempt" in f.message]
    assert [(f.rank, f.message[-1]) for f in booms] == [(0, "2")]
    (problem,) = found.problems
    assert problem.startswith("torchrun.log: the elastic agent restarted the workers 2 time(s)")


def test_a_quoted_agent_failure_is_no_restart() -> None:
    """'failed (exitcode: ...)' in a worker's line, a worker's line after it: one part less
    than the agent's own would make (before: a cut inside attempt 2)."""
    lines = _with_quote(
        "[default0]:E1127 10:02:49.900000 8283 site-packages/torch/distributed/elastic/"
        "multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: x"
    )
    lines.insert(lines.index("[default0]:RuntimeError: boom in attempt 2") + 2, "[default1]:more")
    parts = attempt_parts(lines)
    assert len(parts) == 3
    assert _attempts_said(lines, parts[-1].first, parts[-1].end) == {2}


_PREFIX = re.compile(
    r"^(?P<level>[IWE])(?P<md>\d{4}) (?P<t>\d\d:\d\d:\d\d)\.(?P<ms>\d{3})\d{3} \d+ "
    r"site-packages/(?P<module>torch/[\w/]+)\.py:\d+\] (?P<said>.*)$"
)
_LEVEL = {"I": "INFO", "W": "WARNING", "E": "ERROR"}


def _as_torch(lines: list[str], version: str) -> list[str]:
    """The glog log of torch 2.13 as torch 2.1-2.3 (every line of a record prefixed
    "[asctime] logger: [LEVEL]") or 1.x (logging's "LEVEL:logger:", on a record's first
    line only) wrote it, or behind srun --label's "0: "."""
    out = []
    for line in lines:
        m = _PREFIX.match(line)
        if version == "srun":
            out.append(f"0: {line}")
        elif m is None:
            out.append(line)
        elif version == "2.1":
            name = m["module"].replace("/", ".")
            when = f"2026-{m['md'][:2]}-{m['md'][2:]} {m['t']},{m['ms']}"
            out.append(f"[{when}] {name}: [{_LEVEL[m['level']]}] {m['said']}")
        elif m["said"].startswith("  ") or not m["said"]:  # (1.x: a record's next lines bare)
            out.append(m["said"])
        else:
            out.append(f"{_LEVEL[m['level']]}:{m['module'].replace('/', '.')}:{m['said']}")
    return out


@pytest.mark.parametrize("version", ["2.1", "1.x", "srun"])
def test_the_agents_own_lines_cut_in_each_torch_format(version: str) -> None:
    """The same cuts and numbers as glog's (torch 2.4 and later) in the older formats (behind
    srun's label, at INFO: its workers' lines are labelled too, never taken for --tee's)."""
    for name, expected in (
        ("restarts_info.log", [(1, 0, False), (0, 1, False)]),
        ("restarts_warning.log", [(2, None, False), (1, None, False), (0, None, False)]),
    ):
        if version == "srun" and name == "restarts_warning.log":
            continue
        lines = _lines(name)
        assert _as_torch(lines, version) != lines
        parts = attempt_parts(_as_torch(lines, version))
        assert [(p.back, p.number, p.replaced) for p in parts] == expected, name
        assert [(p.first, p.end) for p in parts] == [(p.first, p.end) for p in attempt_parts(lines)]


def test_the_agents_membership_restart_still_cuts() -> None:
    lines = _lines("restarts_info.log")
    at = max(i for i, ln in enumerate(lines) if _UP.match(ln)) + 1
    lines.insert(at, f"{_GLOG}:962] {DETECTED}")
    assert [(p.back, p.replaced) for p in attempt_parts(lines)] == [
        (1, False),
        (0, True),
        (0, False),
    ]


def test_hostile_prefixes_cost_linear_time() -> None:
    """Lines that look like the agent's prefix but never close it: read in linear time."""
    line = "I1127 10:02:49.500000 8283 " + "/elastic/" * 900
    lines = [line, "2026-11-27 " + "[" * 8000, "INFO:torch.distributed.elastic." + "a." * 4000]
    started = time.monotonic()
    parts = attempt_parts(lines * 2000)
    assert len(parts) == 1 and time.monotonic() - started < 10
