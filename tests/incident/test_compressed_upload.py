"""``incidents/compressed_upload/``: a real hung job's files as an upload to object storage
leaves them (each gzipped on its own, under ``job-7f3a/attempt-0/node-0/``), made by
``scripts/make_compressed_fixture.py`` from ``gloo_evidence/monitored_barrier__exception``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
UPLOAD = FIXTURES / "incidents" / "compressed_upload"
SOURCE = FIXTURES / "gloo_evidence" / "monitored_barrier__exception"


def _script() -> ModuleType:
    path = ROOT / "scripts" / "make_compressed_fixture.py"
    spec = importlib.util.spec_from_file_location("make_compressed_fixture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_upload_names_the_culprit_the_source_set_names() -> None:
    """The same verdict, culprit and suspects, from the same dumps, logs, error files and
    stack sidecars (each read from its ``.gz``)."""
    source, upload = analyze(SOURCE), analyze(UPLOAD)
    assert upload.verdict == source.verdict
    assert upload.culprit_ranks == source.culprit_ranks == (3,)
    assert upload.suspected_ranks == source.suspected_ranks
    assert upload.ranks_loaded == source.ranks_loaded == (0, 1, 2)
    prefix = "job-7f3a/attempt-0/node-0/"
    assert [f.removeprefix(prefix) for f in upload.evidence_files] == list(source.evidence_files)
    assert upload.stacks is not None and source.stacks is not None
    assert upload.stacks.ranks_with_stacks == source.stacks.ranks_with_stacks
    assert not upload.evidence_problems or all(
        p.startswith(prefix) for p in upload.evidence_problems
    )


def test_the_cli_reads_the_upload() -> None:
    """``frtrace analyze`` on it: a hang, rank 3, exit 1 (once it said "no Flight Recorder
    dumps found", exit 2)."""
    result = CliRunner().invoke(app, ["analyze", str(UPLOAD), "--no-cache"])
    assert result.exit_code == 1, result.output
    assert "HANG: culprit rank 3" in result.stdout


def test_the_script_writes_the_same_bytes_again(tmp_path: Path) -> None:
    written = _script().write(SOURCE, tmp_path / "out")
    again = {p.relative_to(tmp_path / "out").as_posix(): p.read_bytes() for p in written}
    committed = {
        p.relative_to(UPLOAD).as_posix(): p.read_bytes() for p in UPLOAD.rglob("*") if p.is_file()
    }
    assert again == committed
    assert all(name.endswith(".gz") for name in committed)
