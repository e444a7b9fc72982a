"""One file, one spelling in a report: the shortest unique among the files it names."""

from __future__ import annotations

import json
import re
from functools import cache

import pytest

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.filenames import FileNames
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES, GLOO

_PY = re.compile(r"[\w.@+~/\\-]*\w\.py\b")


def test_the_spellings_of_one_file_become_one() -> None:
    names = FileNames(["train.py", "job/train.py", "/abs/job/train.py", "/x/data.py"])
    said = names.text("step (train.py:22), from job/train.py:31 and main (/abs/job/train.py:40)")
    assert said == "step (train.py:22), from train.py:31 and main (train.py:40)"
    assert names.name("/x/data.py") == "data.py"


def test_two_files_of_one_name_keep_the_parts_that_tell_them_apart() -> None:
    names = FileNames(["/job/a/util.py", "/job/b/util.py", "a/util.py", "/lib/b/x/io.py"])
    assert names.name("a/util.py") == "a/util.py"
    assert names.name("/job/b/util.py") == "b/util.py"
    assert names.name("x/io.py") == "io.py"
    assert names.name("util.py") == "util.py"  # either of them: left as written
    assert names.text("no file here: 1.5 s, a.pyc") == "no file here: 1.5 s, a.pyc"


@cache
def _report(where: str) -> Report:
    return analyze(FIXTURES / where)


def _display_json(report: Report) -> str:
    """The JSON's display strings (where a user reads sentences), not its structured paths."""
    data = json.loads(render_json(report))
    said = [*data["next_steps"], *data["data_notes"]]
    for f in data["findings"]:
        said += [f["summary"], f["why"], *f["evidence"], *f["next_steps"]]
        said += [w["summary"] for w in f.get("where", [])]
    if "stacks" in data:
        said += [
            data["stacks"]["statement"],
            *(c["description"] for c in data["stacks"]["classes"]),
        ]
    return "\n".join(said)


@pytest.mark.parametrize("where", ["stacks/recorder_hang", "gloo/mesh_stall", "gloo/size_mismatch"])
@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_every_format_spells_each_file_one_way(where: str, fmt: str) -> None:
    """recorder_hang named hung_job.py three ways (hung_job.py:27, collect/hung_job.py:37,
    /work/wt-stacks/tests/collect/hung_job.py:37); each file here has a name of its own."""
    report = _report(where)
    shown = {
        "text": render_text,
        "markdown": render_markdown,
        "html": render_html,
        "json": _display_json,
    }[fmt](report)
    spellings: dict[str, set[str]] = {}
    for s in _PY.findall(shown):
        spellings.setdefault(s.replace("\\", "/").rsplit("/", 1)[-1], set()).add(s)
    assert spellings, "no file named"
    assert all(v == {k} for k, v in spellings.items()), spellings


def test_the_json_keeps_the_full_paths_it_has() -> None:
    data = json.loads(render_json(_report("stacks/recorder_hang")))
    stack = data["findings"][0]["expected"]["stack"]
    assert "train_step (/work/wt-stacks/tests/collect/hung_job.py:37)" in stack
    assert data["findings"][0]["where"][0]["file"] == "hung_job.py"


def test_gloo_fixture_paths_are_short_everywhere() -> None:
    text = render_text(analyze(GLOO / "never_joins"))
    assert "scripts/make_fixtures.py" not in text and "make_fixtures.py:132" in text
