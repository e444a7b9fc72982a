"""The diagnosis cache: a second analyze/check reads no dump and no table, sees every change
(dumps, stack files, code), survives damage, and never changes an answer."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frtrace import diagnosis_cache as dc
from frtrace.cli import app
from frtrace.incident.discover import Discovery
from frtrace.load import cache as cache_mod
from frtrace.load import tables
from frtrace.load.dumpset import DumpSet
from tests.conftest import FIXTURES, fixture_sets, healthy_set

SCENARIOS = fixture_sets()
STACKS = FIXTURES / "stacks" / "recorder_hang"
ROOT = Path(__file__).resolve().parents[1]


def _sidecars() -> list[Path]:
    return sorted((cache_mod.cache_root() / "sets").glob(f"*/{dc.SIDECAR}"))


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every load the CLI makes (of a discovered incident), recorded."""
    calls: list[Path] = []
    real = tables.load_discovered

    def spy(discovery: Discovery, *args: Any, **kwargs: Any) -> DumpSet:
        calls.append(discovery.directory)
        return real(discovery, *args, **kwargs)

    monkeypatch.setattr(tables, "load_discovered", spy)
    return calls


def _no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, loading dumps or tables, reading stacks or diagnosing fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("read or diagnosed although the diagnosis is cached")

    import frtrace.pipeline
    import frtrace.pystack.discover

    monkeypatch.setattr(tables, "load_dumps", refuse)
    monkeypatch.setattr(tables, "load_discovered", refuse)
    monkeypatch.setattr(tables, "open_executor", refuse)
    monkeypatch.setattr(cache_mod.DirectoryCache, "load", refuse)
    monkeypatch.setattr(frtrace.pystack.discover, "load_stacks", refuse)
    monkeypatch.setattr(frtrace.pipeline, "analyze_dumps", refuse)


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cache_never_changes_an_answer(scenario: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fixture: analyze and check from the cache say what the first run said, and the
    second run neither loads, nor reads stacks, nor diagnoses."""
    first = _invoke("analyze", str(scenario), "-f", "json", "--allow-partial")
    verdict = json.loads(first[1][first[1].index("{") :])["verdict"]
    check = _invoke("check", str(scenario), "--expect-verdict", verdict)
    assert len(_sidecars()) == 1
    _no_reading(monkeypatch)
    assert _invoke("analyze", str(scenario), "-f", "json", "--allow-partial") == first
    assert _invoke("check", str(scenario), "--expect-verdict", verdict) == check


def _frtrace(cache: Path, *args: str) -> tuple[int, str, str]:
    env = os.environ | {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("FRTRACE_NO_CACHE", None)
    run = subprocess.run(
        [sys.executable, "-m", "frtrace", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=ROOT,
    )
    return run.returncode, run.stdout, run.stderr


@pytest.mark.parametrize(
    ("scenario", "flags"),
    [
        (STACKS, ("-f", "text")),  # stack warnings on stderr, culprit locations
        (FIXTURES / "damaged", ("-f", "markdown")),  # load problems on stderr
        (FIXTURES / "gloo" / "healthy", ("-q",)),  # exit code 0
        (STACKS, ("--ranks", "2", "-f", "json")),  # a selection, from the same entry
    ],
    ids=["stacks", "damaged", "healthy", "selection"],
)
def test_second_process_is_byte_identical(
    scenario: Path, flags: tuple[str, ...], tmp_path: Path
) -> None:
    """python -m frtrace: the cached run prints exactly what the first and --no-cache print,
    with the same exit code, and loads nothing: tables deleted after the first run stay gone
    (a load would have stored them again)."""
    cache = tmp_path / "xdg"
    args = ("analyze", str(scenario), *flags)
    first = _frtrace(cache, *args)
    (entry,) = (cache / "frtrace" / "v1" / "sets").iterdir()
    assert (entry / dc.SIDECAR).is_file()
    for path in entry.iterdir():
        if path.name != dc.SIDECAR:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    second = _frtrace(cache, *args)
    assert second == first
    assert sorted(p.name for p in entry.iterdir()) == [dc.SIDECAR]
    assert _frtrace(cache, *args, "--no-cache") == first


def _copy_stacks(tmp_path: Path) -> Path:
    directory = tmp_path / "job"
    shutil.copytree(STACKS, directory)
    return directory


CHANGES = ["dump_changed", "dump_added", "dump_removed", "stack_changed", "stack_added", "code"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_is_a_miss(tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed, added or removed dump, a changed or added stack file, other analysis code:
    diagnosed again, and the answer is the uncached one."""
    directory = _copy_stacks(tmp_path)
    _invoke("analyze", str(directory))
    if change == "dump_changed":  # rank 2's dump becomes rank 0's: no culprit any more
        shutil.copy(directory / "comm_lib_trace_rank_0", directory / "comm_lib_trace_rank_2")
    elif change == "dump_added":
        shutil.copy(directory / "comm_lib_trace_rank_0", directory / "comm_lib_trace_rank_4")
    elif change == "dump_removed":
        (directory / "comm_lib_trace_rank_3").unlink()
    elif change == "stack_changed":  # rank 2's sample becomes rank 0's
        shutil.copy(directory / "stacks_rank_0.json", directory / "stacks_rank_2.json")
    elif change == "stack_added":
        shutil.copy(directory / "pyspy_rank_2.txt", directory / "py-spy-dump-extra.txt")
    else:
        monkeypatch.setattr(dc, "code_digest", lambda: "another frtrace")
    loads = _count_loads(monkeypatch)
    again = _invoke("analyze", str(directory), "--allow-partial")
    assert loads == [directory]
    assert again == _invoke("analyze", str(directory), "--allow-partial", "--no-cache")
    _no_reading(monkeypatch)  # stored again: the next run is a hit
    assert _invoke("analyze", str(directory), "--allow-partial") == again


def test_code_digest_covers_the_analysis(tmp_path: Path) -> None:
    """Editing any source the Report depends on changes the digest; a renderer or the words
    of report/ do not (the cached Report holds none)."""
    package = tmp_path / "frtrace"
    shutil.copytree(dc.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = dc.code_digest(package)
    for name in ("analysis/diagnose.py", "pystack/where.py", "load/read/parse.py", "pipeline.py"):
        path = package / name
        text = path.read_text()
        path.write_text(text + "\n# edited\n")
        assert dc.code_digest(package) != before, name
        path.write_text(text)
    assert dc.code_digest(package) == before
    (package / "report" / "text.py").write_text("# another renderer\n")
    assert dc.code_digest(package) == before
    for name in ("wording.py", "words_hang.py", "words_notes.py"):  # the words: said when shown
        (package / "report" / name).write_text("# other words\n")
        assert dc.code_digest(package) == before, name


def _module_file(module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = dc.PACKAGE.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def test_code_digest_lists_every_module_the_report_depends_on() -> None:
    """Every frtrace module the pipeline and this cache import, transitively, is hashed."""
    todo = [dc.PACKAGE / "pipeline.py", dc.PACKAGE / "diagnosis_cache.py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                found = _module_file(name) if name.startswith("frtrace.") else None
                if found is not None:
                    todo.append(found)
    covered = {p.resolve() for name in dc.CODE for p in _hashed(dc.PACKAGE / name)}
    assert {p.resolve() for p in seen} - covered == set()
    assert len(seen) > 30  # the walk found the stages


def _hashed(top: Path) -> list[Path]:
    return sorted(top.rglob("*.py")) if top.is_dir() else [top]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong_type", "unknown", "identity"])
def test_a_damaged_entry_is_ignored_and_rebuilt(
    tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated file, garbage, a field of the wrong type or an unknown one: diagnosed
    again, stored again; never an error, never a different answer."""
    directory = _copy_stacks(tmp_path)
    first = _invoke("analyze", str(directory))
    (sidecar,) = _sidecars()
    data = sidecar.read_bytes()
    stored = json.loads(data)
    if damage == "truncated":
        sidecar.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        sidecar.write_bytes(b"\x80\x04garbage, maybe a pickle")
    elif damage == "wrong_type":
        stored["report"]["report"]["world_size"] = "4"
        sidecar.write_text(json.dumps(stored))
    elif damage == "unknown":
        stored["report"]["report"]["findings"][0]["by"] = "someone"
        sidecar.write_text(json.dumps(stored))
    else:
        stored["identity"] = [1, 2]
        sidecar.write_text(json.dumps(stored))
    loads = _count_loads(monkeypatch)
    assert _invoke("analyze", str(directory)) == first
    assert loads == [directory]
    assert json.loads(sidecar.read_bytes()) == json.loads(data)  # rebuilt as it was
    _no_reading(monkeypatch)
    assert _invoke("analyze", str(directory)) == first


def test_no_cache_env_and_archives_store_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--no-cache and FRTRACE_NO_CACHE=1 neither read nor store it; archives are not cached."""
    directory = healthy_set(tmp_path / "d")
    assert _invoke("analyze", str(directory), "--no-cache")[0] == 0
    assert _sidecars() == []
    monkeypatch.setenv("FRTRACE_NO_CACHE", "1")
    assert _invoke("check", str(directory), "--expect-healthy")[0] == 0
    assert _sidecars() == []
    monkeypatch.delenv("FRTRACE_NO_CACHE")
    archive = tmp_path / "d.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(directory, arcname="d")
    assert _invoke("analyze", str(archive))[0] == 0
    assert _sidecars() == []
    assert _invoke("analyze", str(directory))[0] == 0
    assert len(_sidecars()) == 1
    loads = _count_loads(monkeypatch)
    assert _invoke("analyze", str(directory), "--no-cache")[0] == 0
    assert loads == [directory]  # not read from the cache either


def test_unwritable_cache_is_a_note_never_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache that cannot be written: the same answer, with notes on stderr."""
    directory = _copy_stacks(tmp_path)
    expected = _invoke("analyze", str(directory), "-f", "json", "--no-cache")
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    code, output = _invoke("analyze", str(directory), "-f", "json")
    assert code == expected[0]
    assert "not caching the diagnosis" in output
    assert expected[1] in output


def test_the_sidecar_counts_in_the_budget_and_as_a_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eviction counts the diagnosis' bytes, and a hit (touching only it) keeps the entry."""
    dirs = [healthy_set(tmp_path / f"d{i}", steps=3) for i in range(3)]
    _invoke("analyze", str(dirs[0]))
    (one,) = (cache_mod.cache_root() / "sets").iterdir()
    size = sum(f.stat().st_size for f in one.rglob("*") if f.is_file())
    monkeypatch.setenv("FRTRACE_CACHE_MAX_BYTES", str(int(size * 2.5)))
    _invoke("analyze", str(dirs[1]))
    os.utime(one / "manifest.json", ns=(1, 1))  # its tables used long ago...
    os.utime(one / dc.SIDECAR, ns=(1, 1))
    with monkeypatch.context() as hit:
        _no_reading(hit)
        _invoke("analyze", str(dirs[0]))  # ...but its diagnosis just now
    _invoke("analyze", str(dirs[2]))  # three entries do not fit: d1 goes, not d0
    entries = sorted((cache_mod.cache_root() / "sets").iterdir())
    assert one in entries and len(entries) == 2


def test_a_first_run_lists_once_and_leaves_the_fingerprints_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a miss the load reuses the files the diagnosis cache listed; with nothing stored to
    compare with, no dump is fingerprinted here: each worker takes its file's as it reads it,
    and the diagnosis is stored under those (the next run a hit)."""
    directory = healthy_set(tmp_path / "dumps", world=4)
    import frtrace.incident.discover
    import frtrace.pipeline

    listed: list[Path] = []
    real_discover = frtrace.incident.discover.discover

    def discover(path: Path, **kwargs: Any) -> Any:
        listed.append(path)
        return real_discover(path, **kwargs)

    def fingerprint(cand: Any) -> list[Any]:
        raise AssertionError(f"{cand.path} fingerprinted before the workers read it")

    monkeypatch.setattr(frtrace.pipeline, "discover", discover)
    monkeypatch.setattr(tables, "discover", discover)
    with monkeypatch.context() as first:
        first.setattr(cache_mod, "file_fingerprint", fingerprint)
        code, _ = _invoke("analyze", str(directory))
    assert code == 0
    assert listed == [directory]
    assert _sidecars()  # and it was stored, under the workers' fingerprints
    with monkeypatch.context() as hit:
        _no_reading(hit)
        code, _ = _invoke("analyze", str(directory))
    assert code == 0


def test_an_edit_in_the_middle_with_size_and_mtime_kept_is_a_miss(tmp_path: Path) -> None:
    """rank 1's op in the middle of its dump becomes another one, size and mtime kept
    (``cp -p``, ``rsync -t``): the verdict is the new one, not the cached one."""
    from tests.load.test_cache import edit_keeping_size_and_mtime, edited_in_the_middle

    target = edited_in_the_middle(tmp_path / "d")
    first = _invoke("analyze", str(target.parent), "-f", "json")
    edit_keeping_size_and_mtime(target)
    again = _invoke("analyze", str(target.parent), "-f", "json")
    fresh = _invoke("analyze", str(target.parent), "-f", "json", "--no-cache")
    assert fresh != first  # (the edit changes the answer)
    assert again == fresh


@pytest.mark.parametrize("cache", [True, False])
def test_a_folder_without_dumps_is_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool
) -> None:
    """Where no file is a dump, the side files the one listing found are what the job's
    failures are read from: the folder is not listed a second time (with the cache or not)."""
    import frtrace.incident.discover

    directory = tmp_path / "no_dumps"
    directory.mkdir()
    (directory / "notes.txt").write_text("nothing here\n")
    listed: list[Path] = []
    real = frtrace.incident.discover.list_files

    def list_files(path: Path) -> Any:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(frtrace.incident.discover, "list_files", list_files)
    code, out = _invoke("analyze", str(directory), *([] if cache else ["--no-cache"]))
    assert code == 2 and "no Flight Recorder dumps found" in out
    assert listed == [directory]
