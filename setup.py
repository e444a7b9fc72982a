"""The one compiled part: frtrace.load.read._scan (optional), the C reader of a dump's pickle and
the C pass that reads its columns.

Everything else is in pyproject.toml. Where the module cannot be built (no C compiler), the
install goes on without it and frtrace unpickles every file and reads every column in Python,
with the same results. ``FRTRACE_REQUIRE_C=1`` makes a failed build an error instead: the
release wheels (scripts/build_wheels.sh) must carry the module.
"""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "frtrace.load.read._scan",
            ["frtrace/load/read/_scan.c", "frtrace/load/read/_tree.c"],
            depends=["frtrace/load/read/_scan.h"],
            optional=os.environ.get("FRTRACE_REQUIRE_C", "") in ("", "0"),
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
