"""Run with a sanitized build of frtrace.load.read._scan first on the package's path (what
``test_sanitizers.py`` starts, in a process with libasan preloaded).

    python -m tests.load.read.sanitized BUILD_DIR pytest ARGS...
    python -m tests.load.read.sanitized BUILD_DIR fuzz ARGS...   (fuzz_readers.py, seeded)

Exit status 3 where the module loaded is not the one in BUILD_DIR.
"""

from __future__ import annotations

import sys


def main() -> int:
    build, what, *rest = sys.argv[1:]
    import frtrace.load.read

    frtrace.load.read.__path__.insert(0, build)
    from frtrace.load.read import _scan, native

    if not (_scan.__file__ or "").startswith(build) or not native.active():
        print(f"sanitized: not the build in {build}: {_scan.__file__}", file=sys.stderr)
        return 3
    if what == "pytest":
        import pytest

        return int(pytest.main(rest))
    from tests.load.read import fuzz_readers

    sys.argv = [fuzz_readers.__file__, "--engine", "seeded", *rest]
    return fuzz_readers.main()


if __name__ == "__main__":
    sys.exit(main())
