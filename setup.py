"""The one compiled part: frtrace.load._scan (optional), the C reader of a dump's pickle and
the C pass that reads its columns.

Everything else is in pyproject.toml. Where the module cannot be built (no C compiler), the
install goes on without it and frtrace unpickles every file and reads every column in Python,
with the same results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "frtrace.load._scan",
            ["frtrace/load/_scan.c", "frtrace/load/_tree.c"],
            depends=["frtrace/load/_scan.h"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
