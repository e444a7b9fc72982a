"""What `pip install frtrace` installs: the sdist and the wheel built from it hold the package,
its types, its C sources (sdist) or module (wheel), the license, and nothing of the checkout's
tools (frsim, tests, scripts); the metadata asks for no torch.

Built without build isolation (the installed setuptools), a few seconds.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.conftest import SERIAL

ROOT = Path(__file__).parent.parent
pytestmark = SERIAL  # builds the sdist in the checkout


def _build(kind: str, source: Path, out: Path) -> Path:
    if importlib.util.find_spec("build") is None:
        pytest.skip("the build package is not installed (pip install build)")
    run = subprocess.run(
        [sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    (built,) = out.glob("*.tar.gz" if kind == "sdist" else "*.whl")
    return built


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build("sdist", ROOT, tmp_path_factory.mktemp("sdist"))


def _sources() -> set[str]:
    """The package's Python files in this checkout (caches and build outputs aside)."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "frtrace").rglob("*.py")
        if "__pycache__" not in p.parts
    }


def test_the_sdist_holds_the_package_and_nothing_of_the_checkout(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        names = {m.name.removeprefix(top) for m in tar.getmembers() if m.isfile()}
        info = Parser().parsestr(tar.extractfile(f"{top}PKG-INFO").read().decode())  # type: ignore[union-attr]
    for wanted in (
        "LICENSE",
        "README.md",
        "SECURITY.md",
        "pyproject.toml",
        "setup.py",
        "frtrace/py.typed",
        "frtrace/load/read/_scan.c",
        "frtrace/load/read/_tree.c",
        "frtrace/load/read/_scan.h",
        "frtrace/load/read/_scan.pyi",
        "frtrace/report/report.schema.json",
        "frtrace_torch_plugin.py",
    ):
        assert wanted in names, wanted
    assert _sources() <= names, sorted(_sources() - names)
    assert not [n for n in names if n.split("/")[0] in ("frsim", "tests", "scripts", "docs")]
    assert not [n for n in names if n.endswith((".so", ".pyc"))]
    assert info["License-Expression"] == "Apache-2.0"
    assert "License-File" in info and info.get_all("Project-URL")


def test_no_install_a_user_asks_for_pulls_torch(sdist: Path) -> None:
    """Only the dev extra names torch: `pip install frtrace` or any user extra never
    replaces the job's own torch (a pinned torch is another build: CPU for CUDA)."""
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/PKG-INFO")
        info = Parser().parsestr(member.read().decode())  # type: ignore[union-attr]
    requires = info.get_all("Requires-Dist") or []
    torch = [r for r in requires if r.replace(" ", "").startswith("torch")]
    assert torch and all('extra=="dev"' in r.replace(" ", "") for r in torch), torch
    assert set(info.get_all("Provides-Extra") or []) == {"stacks", "dask", "debug-server", "dev"}


def test_the_wheel_built_from_the_sdist_is_frtrace_alone(sdist: Path, tmp_path: Path) -> None:
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (source,) = (p for p in tmp_path.iterdir() if p.is_dir())
    wheel = _build("wheel", source, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        # (and torch's entry point, a module of its own: frtrace_torch_plugin's docstring)
        assert whl.read(top_level).decode().split() == ["frtrace", "frtrace_torch_plugin"]
        points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "frtrace_watch = frtrace_torch_plugin:load" in whl.read(points).decode()
    assert {"frtrace/py.typed", "frtrace/load/read/_scan.pyi", "frtrace_torch_plugin.py"} <= names
    assert not [n for n in names if n.endswith((".c", ".h")) or n.startswith("frsim/")]
    if shutil.which("cc") or shutil.which("gcc"):  # (without one the module is left out)
        assert any(n.startswith("frtrace/load/read/_scan.") and n.endswith(".so") for n in names)


def test_frsim_is_imported_from_the_checkout() -> None:
    """frsim is not installed (not in the wheel): the tests find it at the repository root
    (pytest's pythonpath), whatever the editable install maps."""
    import frsim

    assert Path(frsim.__file__).resolve().parent == ROOT / "frsim"
