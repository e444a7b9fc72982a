"""Failures read from the files a job leaves: torchrun --log-dir, --tee and srun -l output,
torchelastic's error.json and failure summary, the recorder's exception triggers."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from frtrace.evidence.discover import find_evidence_files, load_evidence
from frtrace.evidence.errorfile import ErrorFileError, parse_error_file
from frtrace.evidence.logs import parse_log
from frtrace.evidence.model import FailureKind, Role
from frtrace.pystack.discover import load_stacks
from tests.conftest import FIXTURES

TRACEBACK = """\
Traceback (most recent call last):
  File "/job/train.py", line 88, in <module>
    main()
  File "/job/train.py", line 61, in main
    loss = step(batch)
  File "/job/model.py", line 42, in forward
    raise ValueError("corrupt sample")
  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751, in _call_impl
    return forward_call(*args, **kwargs)
ValueError: corrupt sample in batch 3
"""


def _ns(stamp: str) -> int:
    return int(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()) * 1_000_000_000


def test_a_traceback_is_one_failure_at_the_innermost_frame_of_the_job() -> None:
    [f] = parse_log(TRACEBACK, "rank2.log", rank=2, year=None)
    assert (f.rank, f.kind, f.role, f.exc_type) == (
        2,
        FailureKind.EXCEPTION,
        Role.CAUSE,
        "ValueError",
    )
    assert f.where == "forward (model.py:42)"  # torch's frame is not the job's
    assert f.source == "rank2.log:10"


def test_tee_prefixes_give_each_line_its_rank() -> None:
    text = "".join(f"[default{r}]:step 1\n" for r in range(4))
    text += "".join(f"[default1]:{line}\n" for line in TRACEBACK.splitlines())
    text += "[default0]:RuntimeError: Connection closed by peer [127.0.0.1]:40000\n"
    found = parse_log(text, "torchrun.log", rank=None, year=None)
    assert [(f.rank, f.role) for f in found] == [(1, Role.CAUSE), (0, Role.SYMPTOM)]


def test_srun_prefixes_and_c10d_rank_prefixes() -> None:
    lines = [f"{r}: starting" for r in range(4)]
    lines += [
        "3: [rank3]:[E1125 10:00:01.500000 99 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, "
        "NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600010 milliseconds"
    ]
    [f] = parse_log("\n".join(lines), "slurm-1.out", rank=None, year=2026)
    assert (f.rank, f.kind, f.op, f.seq) == (3, FailureKind.TIMEOUT, "broadcast", 7)
    assert f.at_ns == _ns("2026-11-25 10:00:01") + 500_000_000


def test_a_digit_prefix_in_a_few_lines_is_not_srun() -> None:
    text = "1: first item\nplain line\nanother plain line\nValueError: boom\n"
    assert all(f.rank is None for f in parse_log(text, "x.log", rank=None, year=None))


def test_python_logging_timestamps_and_gloo_abort_with_its_what_line() -> None:
    text = (
        "2026-11-25 10:00:02,250 INFO step 3\n"
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 32 vs 16\n"
    )
    [f] = parse_log(text, "stderr.log", rank=1, year=None)
    assert (f.kind, f.role) == (FailureKind.SIZE_CHECK, Role.SYMPTOM)


def test_torchelastic_failure_summary() -> None:
    text = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_10:00:05
  host      : node-1
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4242
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_10:00:03
  host      : node-0
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 4244)
  error_file: /tmp/torchelastic/error.json
  traceback : Traceback (most recent call last):
    File "/job/train.py", line 30, in step
      raise KeyError("lr")
  KeyError: 'lr'
============================================================
"""
    found = parse_log(text, "torchrun.log", rank=None, year=None)
    by_rank = {f.rank: f for f in found}
    assert by_rank[1].kind == FailureKind.CRASH and by_rank[1].signal == "SIGABRT"
    assert by_rank[3].kind == FailureKind.EXCEPTION and by_rank[3].exc_type == "KeyError"
    assert by_rank[3].where == "step (train.py:30)"
    assert by_rank[3].at_ns == _ns("2026-11-25 10:00:03")


def test_error_json_both_shapes() -> None:
    record = {
        "message": {
            "message": "ValueError: bad shard",
            "extraInfo": {"py_callstack": TRACEBACK, "timestamp": "1764064800"},
        }
    }
    [f] = parse_error_file(json.dumps(record), "attempt_0/2/error.json", rank=2)
    assert (f.rank, f.exc_type, f.at_ns) == (2, "ValueError", 1764064800 * 10**9)
    assert f.where == "forward (model.py:42)"
    [g] = parse_error_file(json.dumps({"message": "OOM killed", "timestamp": 5}), "e.json", rank=0)
    assert g.at_ns == 5 * 10**9
    with pytest.raises(ErrorFileError):
        parse_error_file("{not json", "e.json", rank=0)
    with pytest.raises(ErrorFileError):
        parse_error_file("[]", "e.json", rank=0)


def _torchrun_dir(root: Path) -> Path:
    attempt = root / "logs" / "job_abc" / "attempt_0"
    for r in range(3):
        (attempt / str(r)).mkdir(parents=True)
        (attempt / str(r) / "stdout.log").write_text("step 1\n")
    (attempt / "2" / "stderr.log").write_text(TRACEBACK)
    (attempt / "0" / "stderr.log").write_text(
        "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:41000\n"
    )
    (attempt / "2" / "error.json").write_text(
        json.dumps(
            {
                "message": {
                    "message": "ValueError: corrupt sample in batch 3",
                    "extraInfo": {"py_callstack": TRACEBACK, "timestamp": "100"},
                }
            }
        )
    )
    return root


def test_torchrun_log_dir_ranks_from_the_folders(tmp_path: Path) -> None:
    ev = load_evidence(_torchrun_dir(tmp_path))
    causes = [f for f in ev.failures if f.role == Role.CAUSE]
    assert {f.rank for f in causes} == {2}
    assert {f.rank for f in ev.failures if f.role == Role.SYMPTOM} == {0}
    assert "logs/job_abc/attempt_0/2/error.json" in ev.files
    assert ev.failures[0].at_ns == 100 * 10**9  # the error file's time; untimed last


def test_links_are_never_followed_and_bad_files_cost_one_line(tmp_path: Path) -> None:
    secret = tmp_path / "outside.log"
    secret.write_text("ValueError: not from this job\n")
    job = tmp_path / "job"
    job.mkdir()
    os.symlink(secret, job / "rank0.log")
    (job / "error.json").write_text("{broken")
    ev = load_evidence(job)
    assert not ev.failures
    assert [p.split(":")[0] for p in ev.problems] == ["error.json"]
    assert [p.name for p, _ in find_evidence_files(job)] == ["error.json"]


def test_a_recorder_sidecar_exception_is_a_failure_with_its_dump_time() -> None:
    path = FIXTURES / "gloo_capture" / "ddp_exception__recorder"
    ev = load_evidence(path, load_stacks(path))
    first = ev.failures[0]
    assert (first.rank, first.role, first.exc_type) == (2, Role.CAUSE, "ValueError")
    assert {f.rank for f in ev.failures[1:]} == {0, 1, 3}
    assert all(f.role == Role.SYMPTOM for f in ev.failures[1:])
    assert first.at_ns is not None and all(
        f.at_ns is not None and f.at_ns > first.at_ns for f in ev.failures[1:]
    )


def test_a_tee_prefix_counts_in_any_file_and_the_launchers_report_is_no_ranks_failure() -> None:
    text = (
        "I1125 10:00:00.000000 1 api.py:1] starting workers\n"
        "I1125 10:00:00.100000 1 api.py:1] more launcher chatter\n"
        "[default1]:[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:1\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    found = parse_log(text, "torchrun.log", rank=None, year=2026)
    assert [(f.rank, f.role) for f in found] == [(1, Role.SYMPTOM)]
