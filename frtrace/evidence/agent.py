"""A launcher's log that spans several attempts, cut at the elastic agent's restarts.

``torchrun --max-restarts N`` (any torchelastic agent) runs the workers again after a failure,
and its console (``--tee``'s copy of every rank's lines, the agent's own lines, a file the
job's output was sent to) goes on across the restart: attempt 0's ranks' lines, then attempt
1's. Read whole, attempt 0's timeouts and tracebacks would be evidence of attempt 1 (a rank
that said nothing in attempt 1 "heard from"). The agent's own lines say where one attempt ends,
in torch's words (``torch/distributed/elastic/agent/server/api.py`` and
``multiprocessing/api.py``):

* ``failed (exitcode: 1) local_rank: 0 (pid: 7069) of binary: ...`` (``of fn: ...`` for
  ``start_processes`` with a function), logged after the workers were stopped (their ``--tee``
  lines drained first), at every level but ``--log-level`` above ERROR. The next line of a
  worker (``[default3]:``, ``[rank3]:``) is the next attempt's; where none follows, the lines
  after it (the agent's ``ChildFailedError`` summary) end the same attempt;
* ``[default] Worker group FAILED. 1/3 attempts left; will restart worker group`` (INFO): the
  next attempt begins after it, and it is attempt ``3 - 1 + 1`` (torch's ``restart_count``,
  the number of the ``attempt_<N>`` log folder);
* ``[default] Rendezvous complete for workers. Result:`` then ``restart_count=2`` on the next
  line (INFO; each line of the record carries the logger's prefix): the attempt this part of
  the log is;
* ``[default] Detected 1 new nodes from group_rank=0; will restart worker group`` (INFO): the
  workers restarted for a membership change, under the same attempt number (its
  ``attempt_<N>`` folder is emptied): the lines before are of processes that are gone, never
  any attempt's evidence.

Only the agent's own lines cut the log: a line that begins with its logger's prefix, from torch's
elastic package (optionally after ``srun --label``'s ``0: ``), in any of the formats torch has
used: glog's ``I1127 10:02:57.200000 8469 .../torch/distributed/elastic/agent/server/api.py:942]
`` (torch 2.4 and later), ``[2023-11-08 10:46:34,121] torch.distributed.elastic.agent.server.api:
[INFO] `` (2.1 to 2.3), ``INFO:torch.distributed.elastic.agent.server.api:`` (1.x), the message
right after it. A worker's line (``[default2]:``, ``[rank2]:``) or any line that only quotes the
agent's words (a fetch error that says "Detected 1 new nodes ... will restart") cuts nothing.

Parts are numbered from the log's end (the last is the newest attempt the log saw) unless the
agent's lines number one (then every part is numbered from it): only the log's last bytes are
read, so its beginning may be missing. One agent's log: several agents' lines interleaved (one
``srun`` output of several nodes) are not cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from frtrace.incident.budget import MAX_LINE_CHARS

__all__ = ["Part", "attempt_parts", "chosen_part"]

# The agent's logger's prefix, at the line's start (see the module docstring), after srun
# --label's "0: " (the agent's task's output) where there is one: glog's (torch 2.4 and later:
# level, date, time, pid, then the module's path and line, checked by ``_agent_said``), torch
# 2.1-2.3's ("[asctime] logger: [LEVEL]"), logging's default of 1.x ("LEVEL:logger:"). Each
# runs in linear time (a character class, then the one character it excludes).
_AGENT = re.compile(
    r"(?:\s{0,6}\d{1,7}: )?(?:"
    r"[IWEFC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d{1,10} (?P<path>[^\]]{1,600})\]"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] torch\.distributed\.elastic\.[\w.]{1,200}: "
    r"\[[A-Z]{4,8}\]"
    r"|[A-Z]{4,8}:torch\.distributed\.elastic\.[\w.]{1,200}:"
    r")"
)
# what the agent says, right after its prefix
_FAILED = re.compile(r" ?failed \(exitcode: -?\d{1,10}\) local_rank: \d{1,7} \(pid: \d{1,10}\) of ")
_RESTART = re.compile(
    r" ?\[[^\]]{0,100}\] Worker group (?:FAILED|UNHEALTHY)\. (?P<left>\d{1,6})/(?P<most>\d{1,6})"
    r" attempts left; will restart worker group"
)
_MEMBERSHIP = re.compile(
    r" ?\[[^\]]{0,100}\] Detected \d{1,7} new nodes from group_rank=\d{1,7}; will restart"
)
_RENDEZVOUS = re.compile(r" ?\[[^\]]{0,100}\] Rendezvous complete for workers\. Result:")
# (each line of a record carries the prefix in torch 2.1 and later: "I1127 10:02:14.574000 7924
# ...api.py:553]   restart_count=1"; none in 1.x: "  restart_count=1")
_RESTART_COUNT = re.compile(r"\s*restart_count=(\d{1,6})\s*$")
# a worker's line: torchrun --tee's "[default3]:" (any role), c10d's "[rank3]:"
_WORKER = re.compile(r"^\[[A-Za-z_]{1,40}\d{1,7}\]:")


def _agent_said(line: str) -> str | None:
    """What the agent's own line says after its prefix; None for any other line (a worker's,
    one that quotes the agent, a line of another logger)."""
    m = _AGENT.match(line)
    if m is None:
        return None
    if (path := m["path"]) is not None:  # glog's: torch's elastic package's module and line
        module, _, number = path.rpartition(":")
        elastic = "/elastic/" in module or "\\elastic\\" in module
        if not (elastic and module.endswith(".py") and number.isdecimal()):
            return None
    return line[m.end() :]


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """One attempt's lines of the log: ``lines[first:end]``."""

    first: int
    end: int
    back: int  # how many restarts the log shows after it (0: the last part)
    number: int | None  # the attempt (torch's restart_count) where the agent's lines say it
    replaced: bool  # its workers were restarted for a membership change: no attempt's own


def attempt_parts(lines: Sequence[str]) -> list[Part]:
    """The log's lines cut at the agent's restarts (see the module docstring), in order; one
    part where it shows none."""
    cuts: list[tuple[int, int | None, bool]] = []  # (first line, its number, before replaced)
    pending = False  # a worker failed: its next worker line begins another attempt
    rendezvous = -10
    numbers: dict[int, int] = {}  # part index -> the number the agent's lines give it
    for i, whole in enumerate(lines):
        line = whole[:MAX_LINE_CHARS]  # (a hostile line costs no more than a long one)
        said = _agent_said(line)  # (the agent's own words: never a worker's, nor a quote)
        if said is not None and _FAILED.match(said) is not None:
            pending = True
        elif said is not None and (m := _RESTART.match(said)) is not None:
            failed = int(m["most"]) - int(m["left"])
            cuts.append((i + 1, failed + 1, False))
            numbers.setdefault(len(cuts) - 1, failed)
            pending = False
        elif said is not None and _MEMBERSHIP.match(said) is not None:
            cuts.append((i + 1, None, True))
            pending = False
        elif said is not None and _RENDEZVOUS.match(said) is not None:
            if pending:
                cuts.append((i, None, False))
                pending = False
            rendezvous = i
        elif (
            i - rendezvous <= 2
            and (m := _RESTART_COUNT.match(line if said is None else said)) is not None
        ):
            numbers[len(cuts)] = int(m[1])
        elif pending and _WORKER.match(line) is not None:
            cuts.append((i, None, False))
            pending = False
    starts = [0, *(c[0] for c in cuts)]
    ends = [*(c[0] for c in cuts), len(lines)]
    replaced = [c[2] for c in cuts] + [False]
    for k, (_, number, _) in enumerate(cuts):
        if number is not None:
            numbers.setdefault(k + 1, number)
    restarts_after = [0] * len(starts)  # (counted from the end: one pass)
    for k in range(len(cuts) - 1, -1, -1):
        restarts_after[k] = restarts_after[k + 1] + (0 if cuts[k][2] else 1)
    return [
        Part(
            first=first,
            end=end,
            back=restarts_after[k],
            number=numbers.get(k),
            replaced=replaced[k],
        )
        for k, (first, end) in enumerate(zip(starts, ends, strict=True))
    ]


def chosen_part(parts: Sequence[Part], attempt: int | None, newest: int | None) -> Part | None:
    """The part of ``attempt`` (None: the newest), where the folder's newest attempt is
    ``newest`` (None: unknown); None where the log holds no line of it. A log of one part is
    that part, whatever the attempt (it shows no restart)."""
    if len(parts) == 1:
        return parts[0]
    anchor = next((p.number + p.back for p in parts if p.number is not None), newest)
    back = 0 if attempt is None or anchor is None else anchor - attempt
    return next((p for p in parts if p.back == back and not p.replaced), None)
