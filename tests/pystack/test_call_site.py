"""The call site is the innermost frame of the user's code: standard-library, site-packages
and torch frames are context, never the call site, however the path is spelled."""

from __future__ import annotations

import sysconfig

import pytest

from frtrace.model import OpSignature
from frtrace.pystack.model import Frame, ThreadStack
from frtrace.pystack.where import call_site, is_library_file, where
from frtrace.report.common import Column, compare_rows, stack_rows

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


@pytest.mark.parametrize(
    "filename",
    [
        "/usr/lib64/python3.11/queue.py",  # Fedora, RHEL
        "/usr/lib64/python3.11/threading.py",
        "/opt/py/lib/python3.12/concurrent/futures/_base.py",
        "python3.11/selectors.py",
        "lib/python3.11/queue.py",
        "C:\\Python311\\Lib\\threading.py",
        "<frozen importlib._bootstrap>",
        sysconfig.get_paths()["stdlib"] + "/contextlib.py",
        sysconfig.get_paths()["purelib"] + "/numpy/core/fromnumeric.py",
        TORCH,
    ],
)
def test_standard_library_and_torch_files_are_library(filename: str) -> None:
    assert is_library_file(filename)


@pytest.mark.parametrize(
    "filename", ["/job/train.py", "/home/u/python3/train.py", "/home/u/Lib/data.py", "<string>"]
)
def test_the_users_files_are_not(filename: str) -> None:
    assert not is_library_file(filename)


def test_where_skips_the_standard_library_spelled_absolute() -> None:
    """faulthandler writes absolute paths: a Fedora Python's queue.py is not the user's."""
    thread = ThreadStack(
        thread_id="1",
        name="MainThread",
        is_main=True,
        frames=(
            Frame(function="wait", filename="/usr/lib64/python3.11/threading.py", line=331),
            Frame(function="get", filename="/usr/lib64/python3.11/queue.py", line=180),
            Frame(function="load_batch", filename="/job/data.py", line=88),
            Frame(function="main", filename="/job/train.py", line=5),
        ),
    )
    w = where(thread)
    assert w.user_frame is not None and w.user_frame.function == "load_batch"
    assert w.summary == "load_batch (data.py:88), in wait (threading.py:331)"


def _sig(stack: tuple[str, ...]) -> OpSignature:
    return OpSignature(
        op="all_reduce",
        input_sizes=((4,),),
        output_sizes=((4,),),
        input_dtypes=("Float",),
        output_dtypes=("Float",),
        state="scheduled",
        stack=stack,
    )


STACK = (
    f"all_reduce ({TORCH}:3245)",
    "wrapper (/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83)",
    "inner (/usr/lib64/python3.11/contextlib.py:81)",
    "step (/job/train.py:22)",
    "main (/job/train.py:40)",
)


def test_the_call_site_is_the_users_frame_past_torch_and_the_standard_library() -> None:
    assert call_site(STACK) == "step (/job/train.py:22)"
    rows = compare_rows([Column(title="majority", sig=_sig(STACK))])
    assert rows[-1] == ["called from", "step (job/train.py:22)"]


def test_a_stack_of_library_code_only_has_no_call_site() -> None:
    assert call_site(STACK[:3]) is None
    rows = compare_rows([Column(title="majority", sig=_sig(STACK[:3]))])
    assert rows[-1] == ["called from", "(library code only)"]


def test_stack_summaries_fold_the_library_frames_before_the_users() -> None:
    """The collective is shown (context), the rest of the library run is counted."""
    rows = stack_rows([Column(title="majority", sig=_sig(STACK))])
    assert rows is not None
    assert [r[0] for r in rows] == [
        "all_reduce (distributed/distributed_c10d.py:3245)",
        "(+2 library frames)",
        "step (job/train.py:22)",
        "main (job/train.py:40)",
    ]
