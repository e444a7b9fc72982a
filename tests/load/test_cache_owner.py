"""A cache folder others share never decides a verdict (issue 53, item 5): with one
``XDG_CACHE_HOME`` for every user, an entry of another user's (or one others may write) is never
read, tables nor diagnosis; the diagnosis file carries a checksum, so an edited one is a miss.

"Another user" is this process with another effective uid (``os.geteuid``): every folder and
file the first run made is then another user's, as an entry a colleague left in the shared
folder is."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frtrace import diagnosis_cache as dc
from frtrace.cli import app
from frtrace.load import cache as cache_mod
from frtrace.load import tables
from frtrace.load.tables import load_dumps
from tests.conftest import FIXTURES, healthy_set

STACKS = FIXTURES / "stacks" / "recorder_hang"  # a hang: rank 2 the culprit, exit code 1


def _analyze(directory: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["analyze", str(directory), "-f", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout[result.stdout.index("{") :])


def _sidecar(directory: Path) -> Path:
    store = cache_mod.DirectoryCache(cache_mod.cache_root(), directory, ())
    return store.entry / dc.SIDECAR


def _as_another_user(monkeypatch: pytest.MonkeyPatch) -> None:
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 4242)


def _healthy_diagnosis(tmp_path: Path) -> dict[str, Any]:
    """What a healthy set's stored diagnosis holds (its report and problems)."""
    directory = healthy_set(tmp_path / "healthy")
    assert _analyze(directory)[0] == 0
    data = _sidecar(directory).read_bytes()
    stored: dict[str, Any] = json.loads(data)
    return stored


def _hang(tmp_path: Path) -> Path:
    directory = tmp_path / "job"
    shutil.copytree(STACKS, directory)
    return directory


def test_another_users_edited_diagnosis_never_makes_a_hang_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: another user's entry for this directory, its diagnosis.json edited
    to a healthy report under the right identity (no checksum). Before: HEALTHY, exit 0."""
    directory = _hang(tmp_path)
    assert _analyze(directory)[0] == 1
    healthy = _healthy_diagnosis(tmp_path)
    sidecar = _sidecar(directory)
    stored = json.loads(sidecar.read_bytes())
    forged = {"identity": stored["identity"], "report": healthy["report"]}
    forged["problems"] = healthy["problems"]
    sidecar.write_text(json.dumps(forged, separators=(",", ":")))
    _as_another_user(monkeypatch)
    code, doc = _analyze(directory)
    assert (code, doc["verdict"], doc["culprit_ranks"]) == (1, "hang", [2])


def test_another_users_sealed_diagnosis_is_not_read_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checksum is no key (anyone can compute it): the owner check alone refuses a forged
    diagnosis that carries a right one."""
    directory = _hang(tmp_path)
    assert _analyze(directory)[0] == 1
    healthy = _healthy_diagnosis(tmp_path)
    sidecar = _sidecar(directory)
    stored = json.loads(sidecar.read_bytes())
    forged = {k: stored["identity"] if k == "identity" else healthy[k] for k in stored}
    del forged["checksum"]
    sidecar.write_bytes(dc._sealed(json.dumps(forged, separators=(",", ":")).encode()))
    assert _analyze(directory)[1]["verdict"] == "healthy"  # (this user's own: a hit)
    _as_another_user(monkeypatch)
    read: list[str] = []
    real = cache_mod.read_private
    monkeypatch.setattr(cache_mod, "read_private", lambda *a: read.append(a[0]) or real(*a))
    code, doc = _analyze(directory)
    assert (code, doc["verdict"]) == (1, "hang")
    assert read == []  # (nothing of the entry opened: not even the manifest)


def test_an_edited_diagnosis_is_a_miss_and_deleted(tmp_path: Path) -> None:
    """This user's own entry, its report swapped for a healthy one (valid JSON, the identity
    kept): the checksum does not match, so the hang is diagnosed again. Before: HEALTHY."""
    directory = _hang(tmp_path)
    first = _analyze(directory)
    assert first[0] == 1
    healthy = _healthy_diagnosis(tmp_path)
    sidecar = _sidecar(directory)
    stored = json.loads(sidecar.read_bytes())
    stored["report"], stored["problems"] = healthy["report"], healthy["problems"]
    sidecar.write_text(json.dumps(stored, separators=(",", ":")))
    edited = sidecar.read_bytes()
    assert _analyze(directory) == first
    assert sidecar.read_bytes() != edited  # (deleted, stored again)
    assert json.loads(sidecar.read_bytes())["report"] != healthy["report"]


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = tables.open_executor
    monkeypatch.setattr(tables, "open_executor", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_another_users_tables_are_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's entry of tables for this directory: the dumps are read (before: the
    tables, whatever they held), and the entry is left as it is (not this user's to delete)."""
    directory = healthy_set(tmp_path / "d", world=3)
    fresh = load_dumps(directory, cache=True)
    entry = _sidecar(directory).parent
    before = sorted(p.name for p in entry.rglob("*"))
    _as_another_user(monkeypatch)
    calls = _count_loads(monkeypatch)
    again = load_dumps(directory, cache=True)
    assert calls == [1]
    assert again.entries.equals(fresh.entries)
    assert sorted(p.name for p in entry.rglob("*")) == before


@pytest.mark.parametrize("where", ["frtrace", "v1", "sets", "entry"])
def test_a_folder_others_may_write_is_a_miss_until_narrowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """This user's cache folder open to others' writes (an earlier version's 0775, a chmod):
    never read; the next store narrows it to 0700, and the load after is a hit."""
    directory = healthy_set(tmp_path / "d", world=2)
    load_dumps(directory, cache=True)
    entry = _sidecar(directory).parent
    folder = {
        "frtrace": entry.parents[2],
        "v1": entry.parents[1],
        "sets": entry.parent,
        "entry": entry,
    }[where]
    os.chmod(folder, 0o777)
    with monkeypatch.context() as m:
        calls = _count_loads(m)
        load_dumps(directory, cache=True)
        assert calls == [1]  # (stored again: the folder narrowed)
    assert oct(os.stat(folder).st_mode & 0o777) == oct(0o700)
    calls = _count_loads(monkeypatch)
    load_dumps(directory, cache=True)
    assert calls == []


def test_a_sidecar_of_another_user_or_through_a_link_is_not_read(tmp_path: Path) -> None:
    directory = healthy_set(tmp_path / "d", world=2)
    load_dumps(directory, cache=True)
    store = cache_mod.DirectoryCache(cache_mod.cache_root(), directory, ())
    store.write_sidecar("extra.json", b"{}", "test")
    assert store.read_sidecar("extra.json") == b"{}"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b'{"planted": 1}')
    (store.entry / "extra.json").unlink()
    (store.entry / "extra.json").symlink_to(elsewhere)
    assert store.read_sidecar("extra.json") is None
    (store.entry / "extra.json").unlink()
    (store.entry / "extra.json").write_bytes(b"{}")
    os.chmod(store.entry / "extra.json", 0o666)
    assert store.read_sidecar("extra.json") is None
