"""Where a culprit is, said from its typed place exactly as the stack reader sums it up."""

from __future__ import annotations

from pathlib import Path

import pytest

from frtrace.analysis.stackjoin import culprit_where
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.pystack.parse import read_stack_file
from frtrace.pystack.where import where
from frtrace.report.words_where import where_said
from tests.conftest import FIXTURES

SAMPLES = sorted(
    p
    for p in (FIXTURES / "pystack").iterdir()
    if p.suffix in (".txt", ".json") and not p.name.startswith("faulthandler_job")
)


def _said_by_the_reader(sample: ProcessStacks) -> str:
    """What the words were when the analysis made them from ``pystack.where``'s summary."""
    w = where(sample)
    return (
        w.summary
        if w.user_frame is None
        else (
            f"in {'a collective' if _collective(w.library_frame) else 'host code'} at {w.summary}"
        )
    )


def _collective(frame: Frame | None) -> bool:
    return frame is not None and "torch/distributed/" in frame.filename.replace("\\", "/")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_fixture_sample_is_said_as_before(path: Path) -> None:
    """Each stack fixture's place, said from its typed value, is the reader's summary."""
    sample = read_stack_file(path)
    assert where_said(culprit_where(1, sample)) == _said_by_the_reader(sample)


def _thread(frames: tuple[Frame, ...], *, is_main: bool) -> ThreadStack:
    return ThreadStack(thread_id="7", name="worker", is_main=is_main, frames=frames)


LIB = Frame(function="wait", filename="/usr/lib/python3.11/threading.py", line=331)
USER = Frame(function="load_batch", filename="/job/data.py", line=88)


@pytest.mark.parametrize(
    "threads",
    [
        (),  # no thread at all
        (_thread((), is_main=True),),  # a main thread with no frames
        (_thread((LIB,), is_main=True),),  # no user frame: the innermost one
        (_thread((LIB, USER), is_main=False),),  # not the main thread: which, said
        (_thread((), is_main=False), _thread((LIB,), is_main=False)),  # no main, one with frames
    ],
    ids=["no-thread", "empty", "library-only", "off-main", "no-main"],
)
def test_the_edges_are_said_as_before(threads: tuple[ThreadStack, ...]) -> None:
    """No frames, no user frame, a thread other than the main one: as the reader said."""
    sample = ProcessStacks(
        rank=1, pid=None, host=None, source="py-spy-text", path="/x/r1.txt", threads=threads
    )
    assert where_said(culprit_where(1, sample)) == _said_by_the_reader(sample)
