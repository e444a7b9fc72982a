"""The watch confirms before it pages, and takes a stall back when it ends (issue 52, item 1).

In-process: the second look (:class:`frtrace.job.stallclock.Confirmation`) on made-up readings
and stacks; the confirmation window's settings; the phase a job marks and the one torch's
checkpoint writers show on a real stack; the leader saying once that its stall ended; the
report files written with what the watch knew, then marked superseded. The real jobs (a slow
checkpoint superseded, one over before the second look paging nobody, hung jobs still
reported) are in tests/job/test_watch.py.
"""

from __future__ import annotations

import io
import json
import shutil
import types
from pathlib import Path
from typing import Any

import pytest

from frtrace.job import phase as phases
from frtrace.job import watch as watching
from frtrace.job.sidecar import capture_current_stacks, write_stacks
from frtrace.job.stallclock import (
    MAX_RESTARTS,
    Confirmation,
    PendingOp,
    Stall,
    StallClock,
    StallContext,
    resolve_confirm,
)
from frtrace.report.json_schema import report_schema
from tests.conftest import GLOO

jsonschema = pytest.importorskip("jsonschema")

PG = ("fr", "0")
OTHER = ("fr", "3")


class Stack:
    """A main thread's stack a test moves by hand."""

    def __init__(self) -> None:
        self.where = "all_reduce"

    def __call__(self) -> object:
        return (("train.py", self.where, 12),)


def _look(clock: StallClock, confirm: Confirmation, status: dict[Any, Any], t: float) -> list[Any]:
    return confirm.check(clock.update(status, t), t)


def test_a_stall_is_confirmed_by_a_second_look_a_window_later() -> None:
    clock, stack = StallClock(10.0), Stack()
    confirm = Confirmation(5.0, stack)
    assert _look(clock, confirm, {PG: (6, 5)}, 0.0) == []  # op 6 pending
    assert _look(clock, confirm, {PG: (6, 5)}, 10.0) == []  # the threshold: the first look
    assert _look(clock, confirm, {PG: (6, 5)}, 14.9) == []  # within the window
    assert _look(clock, confirm, {PG: (6, 5)}, 15.0) == [Stall(PG, 5, 15.0)]  # the second


def test_an_op_done_before_the_second_look_is_never_confirmed() -> None:
    clock = StallClock(10.0)
    confirm = Confirmation(5.0, Stack())
    assert _look(clock, confirm, {PG: (6, 5)}, 0.0) == []
    assert _look(clock, confirm, {PG: (6, 5)}, 10.0) == []  # the first look
    assert _look(clock, confirm, {PG: (7, 6)}, 12.0) == []  # op 6 done, op 7 just began
    for t in (15.0, 20.0, 21.9):
        assert _look(clock, confirm, {PG: (7, 6)}, t) == []  # op 7: its own first look at 22
    assert _look(clock, confirm, {PG: (7, 6)}, 22.0) == []
    assert _look(clock, confirm, {PG: (7, 6)}, 27.0) == [Stall(PG, 6, 15.0)]


def test_without_a_window_one_look_raises() -> None:
    clock = StallClock(10.0)
    confirm = Confirmation(0.0, Stack())
    assert _look(clock, confirm, {PG: (6, 5)}, 0.0) == []
    assert _look(clock, confirm, {PG: (6, 5)}, 10.0) == [Stall(PG, 5, 10.0)]


def test_a_main_thread_that_moved_looks_again_but_never_hides_a_hang() -> None:
    """A stack that moved between the looks starts the window again, MAX_RESTARTS times at
    most: a main thread that never settles still gets its alarm."""
    clock, stack = StallClock(10.0), Stack()
    confirm = Confirmation(5.0, stack)
    _look(clock, confirm, {PG: (6, 5)}, 0.0)
    assert _look(clock, confirm, {PG: (6, 5)}, 10.0) == []
    t = 10.0
    for n in range(MAX_RESTARTS):
        stack.where = f"step_{n}"  # it moved
        t += 5.0
        assert _look(clock, confirm, {PG: (6, 5)}, t) == [], n
    stack.where = "elsewhere"
    t += 5.0
    assert _look(clock, confirm, {PG: (6, 5)}, t) == [Stall(PG, 5, t)]
    # settled: one window is enough
    clock2, stack2 = StallClock(10.0), Stack()
    confirm2 = Confirmation(5.0, stack2)
    _look(clock2, confirm2, {PG: (6, 5)}, 0.0)
    _look(clock2, confirm2, {PG: (6, 5)}, 10.0)
    stack2.where = "elsewhere"
    assert _look(clock2, confirm2, {PG: (6, 5)}, 15.0) == []
    assert _look(clock2, confirm2, {PG: (6, 5)}, 20.0) == [Stall(PG, 5, 20.0)]


def test_only_the_ops_seen_at_both_looks_are_confirmed() -> None:
    clock = StallClock(10.0)
    confirm = Confirmation(5.0, Stack())
    _look(clock, confirm, {PG: (6, 5), OTHER: (2, 2)}, 0.0)
    _look(clock, confirm, {PG: (6, 5), OTHER: (3, 2)}, 4.0)  # group 3's op from t=4
    assert _look(clock, confirm, {PG: (6, 5), OTHER: (3, 2)}, 10.0) == []  # PG's first look
    assert _look(clock, confirm, {PG: (6, 5), OTHER: (3, 2)}, 15.0) == [Stall(PG, 5, 15.0)]


def test_the_window_is_half_the_threshold_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRTRACE_WATCH_CONFIRM", raising=False)
    assert resolve_confirm(None, 20.0) == 10.0
    assert resolve_confirm(3, 20.0) == 3.0
    assert resolve_confirm("0", 20.0) == 0.0
    assert resolve_confirm(-1, 20.0) == 0.0
    with pytest.raises(ValueError, match="confirm='soon' is not a number of seconds"):
        resolve_confirm("soon", 20.0)
    monkeypatch.setenv("FRTRACE_WATCH_CONFIRM", "7")
    assert resolve_confirm(None, 20.0) == 7.0
    assert resolve_confirm(2, 20.0) == 2.0  # the keyword wins
    monkeypatch.setenv("FRTRACE_WATCH_CONFIRM", "nan")
    with pytest.warns(RuntimeWarning, match="FRTRACE_WATCH_CONFIRM='nan'.*: 10 s"):
        assert resolve_confirm(None, 20.0) == 10.0


def test_enable_takes_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from frtrace.job import recorder

    started: list[float] = []

    def start(*args: Any, confirm_s: float, **kw: Any) -> None:
        started.append(confirm_s)

    monkeypatch.setattr(watching, "start", start)
    monkeypatch.delenv("FRTRACE_WATCH_CONFIRM", raising=False)
    for confirm in (None, 1.5):
        recorder.enable(tmp_path, watch=8, confirm=confirm, signals=(), on_exception=False)
        recorder.disable()
    monkeypatch.setenv("FRTRACE_WATCH_CONFIRM", "3")
    recorder.attach(tmp_path, 8.0)
    recorder.disable()
    assert started == [4.0, 1.5, 3.0]


def test_a_marked_phase_is_in_the_sidecar_while_it_lasts() -> None:
    assert phases.current() is None
    with phases.phase("checkpoint"):
        assert capture_current_stacks()["phase"] == "checkpoint"
        with phases.phase("eval"):
            assert phases.current() == "eval"
        assert phases.current() == "checkpoint"
    assert capture_current_stacks()["phase"] is None
    with pytest.raises(ValueError, match="a phase is a name"), phases.phase(" "):
        pass
    with pytest.raises(RuntimeError), phases.phase("checkpoint"):
        raise RuntimeError("the block failed")
    assert phases.current() is None  # (ended with its block, however it ended)


class _Capturing(io.RawIOBase):
    """A file that takes the calling thread's stack as torch.save writes it (or torch.load
    reads it)."""

    def __init__(self, data: bytes = b"") -> None:
        self.inner = io.BytesIO(data)
        self.frames: list[tuple[str, str]] = []

    def _take(self) -> None:
        if not self.frames:
            stacks = capture_current_stacks()
            main = next(t for t in stacks["threads"] if t["is_main"])
            self.frames = [(f["filename"], f["name"]) for f in main["frames"]]

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._take()
        return self.inner.write(data)

    def readinto(self, buffer: Any) -> int:
        self._take()
        return self.inner.readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()


def test_torch_checkpoint_writers_show_on_a_real_stack() -> None:
    torch = pytest.importorskip("torch")
    out = _Capturing()
    torch.save({"w": torch.ones(4)}, out)
    assert phases.phase_of_frames(out.frames) == phases.CHECKPOINT
    back = _Capturing(out.inner.getvalue())
    torch.load(back)
    assert phases.phase_of_frames(back.frames) == phases.CHECKPOINT_LOAD
    assert phases.phase_of_frames([("train.py", "step"), ("train.py", "<module>")]) is None
    dcp = "/site-packages/torch/distributed/checkpoint/"
    ser = "/site-packages/torch/serialization.py"
    assert (  # a save that reads a file with torch.load is a save
        phases.phase_of_frames([(ser, "load"), (dcp + "state_dict_saver.py", "save")])
        == phases.CHECKPOINT
    )
    assert (
        phases.phase_of_frames(
            [(dcp + "filesystem.py", "read_data"), (dcp + "state_dict_saver.py", "save")]
        )
        == phases.CHECKPOINT
    )  # (innermost first: the outermost of torch's frames decides)
    assert (
        phases.phase_of_frames(
            [(dcp + "filesystem.py", "write_data"), (dcp + "state_dict_loader.py", "load")]
        )
        == phases.CHECKPOINT_LOAD
    )


def _context(ended_after_s: float | None = None, *, at_most: bool = False) -> StallContext:
    op = PendingOp(PG, 4, "all_reduce", 1800.0)
    return StallContext(20.0, 10.0, 31.0, 1, op, ended_after_s=ended_after_s, at_most=at_most)


def test_the_end_of_a_reported_stall_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The leader's report: superseded once its op completed (said once), left alone while it
    is pending, forgotten without a word when its group is gone."""
    said: list[StallContext] = []

    def supersede(written: object, context: StallContext) -> str:
        said.append(context)
        return "ended"

    reporter = types.SimpleNamespace(supersede=supersede)
    w = watching.Watch(dump_dir=Path("."), watch_s=20.0, dump=lambda *a: None)
    w._reported = watching._Reported(_context(), 100.0, object(), reporter)
    assert w._ended({PG: (4, 3)}, 120.0) is False  # op 4 still pending
    assert w._ended({PG: (5, 4)}, 143.0) is True  # done
    assert w._ended({PG: (5, 4)}, 150.0) is False  # (said once)
    assert [(c.ended_after_s, c.at_most) for c in said] == [(43.0, False)]
    assert capsys.readouterr().err == "frtrace: ended\n"
    w._reported = watching._Reported(_context(), 100.0, object(), reporter)
    assert w._ended({}, 160.0) is False  # its group is gone: forgotten
    assert not said[1:]
    w._reported = watching._Reported(_context(), 100.0, object(), reporter)
    assert w._ended({PG: (5, 4)}, 160.0, late=True) is True  # done while the report was made
    w._reported = watching._Reported(_context(), 100.0, object(), reporter)
    assert w._ended({PG: (5, 4)}, 160.0, seen=130.0, late=True) is True  # seen, at 130
    assert [(c.ended_after_s, c.at_most) for c in said[1:]] == [(60.0, True), (30.0, False)]


def test_the_watch_report_says_what_the_watch_knew_then_that_it_ended(tmp_path: Path) -> None:
    from frtrace.gate import watchreport

    folder = tmp_path / "dumps"
    shutil.copytree(GLOO / "mesh_stall", folder)
    with phases.phase("checkpoint"):  # rank 5 (the culprit) marked its phase
        write_stacks(folder / "stacks_rank_5.json", capture_current_stacks(rank=5))
    written = watchreport.analyse_and_report(folder, 0.0, _context())
    assert written.phases == (watchreport.RankPhase(5, "checkpoint", "marked"),)
    stall = (
        "all_reduce #4 of pg 0 pending 31 s on rank 1 (threshold 20 s, confirmed 10 s later; "
        "the group's timeout 1800 s)"
    )
    phase = "rank 5 was writing a checkpoint (the job marked it)"
    text = (folder / "frtrace-report.txt").read_text()
    assert text.startswith("HANG: culprit rank 5;")
    assert f"\nwatch:    {stall}\nphase:    {phase}\n\n" in text
    line = watchreport.hang_line(written, _context())
    assert line.startswith("job hung: culprit rank 5")
    assert line.endswith(f"; {stall}; {phase}; report: {folder / 'frtrace-report.html'}")
    doc = json.loads((folder / "frtrace-report.json").read_text())
    jsonschema.validate(doc, report_schema())
    assert doc["watch"]["group_timeout_s"] == 1800.0 and doc["watch"]["superseded"] is None
    assert "rank 5 was writing a checkpoint" in (folder / "frtrace-report.html").read_text()

    ended = watchreport.supersede(written, _context(ended_after_s=43.0))
    head = "the stall of all_reduce #4 ended after 43 s: a slow step, not a hang"
    assert ended == f"{head}; {written.html} marked superseded"
    text = (folder / "frtrace-report.txt").read_text()
    assert text.startswith(f"SUPERSEDED: {head}; this report was written while it lasted.\n\n")
    assert "\nHANG: culprit rank 5;" in text  # (kept for the record)
    doc = json.loads((folder / "frtrace-report.json").read_text())
    jsonschema.validate(doc, report_schema())
    assert doc["watch"]["superseded"] == {"ended_after_s": 43.0, "at_most": False, "summary": head}
    page = (folder / "frtrace-report.html").read_text()
    assert page.index("SUPERSEDED: ") < page.index("<h1>")
    at_most = watchreport.supersede(written, _context(ended_after_s=43.0, at_most=True))
    assert at_most.startswith("the stall of all_reduce #4 ended after at most 43 s")
    assert not [p for p in folder.iterdir() if p.name.startswith(".frtrace-watch")]


def test_a_stack_in_torch_save_names_the_phase_without_a_mark(tmp_path: Path) -> None:
    from frtrace.gate.watchreport import RankPhase, phase_words, stall_phases

    save = "/usr/lib/python3/site-packages/torch/serialization.py"
    for rank, frames in enumerate(
        [
            [("train.py", "step"), ("train.py", "main")],
            [("/x/zipfile.py", "write"), (save, "_save"), (save, "save"), ("train.py", "ckpt")],
            [(save, "save"), ("train.py", "ckpt")],
        ]
    ):
        doc = capture_current_stacks(rank=rank)
        main = next(t for t in doc["threads"] if t["is_main"])
        main["frames"] = [{"filename": f, "name": n, "line": 1} for f, n in frames]
        write_stacks(tmp_path / f"stacks_rank_{rank}.json", doc)
    (tmp_path / "stacks_rank_9.json").write_text("{not json")  # says nothing
    found = stall_phases(sorted(tmp_path.iterdir()))
    assert found == (RankPhase(1, "checkpoint", "stack"), RankPhase(2, "checkpoint", "stack"))
    assert [text for text, _ in phase_words(found)] == [
        "ranks 1-2 were writing a checkpoint (torch's checkpoint code on its stack)"
    ]


def test_the_phase_resets_in_a_forked_child() -> None:
    import os

    with phases.phase("checkpoint"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a data loader's worker
            os.write(w, repr(phases.current()).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        assert os.read(r, 100) == b"None"
        os.close(r)
    assert phases.current() is None
