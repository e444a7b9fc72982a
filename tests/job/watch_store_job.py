"""One rank of tests/job/watch_job.py (same arguments) whose stall watch prints a line
``watch-dump: <why>`` on stdout for every dump it makes, so that a test can count them
(tests/job/test_watch_store.py: a hostile client of the job's store must not add any)."""

from __future__ import annotations

from frtrace.job.watch import Watch
from tests.job import watch_job

_dump = Watch._dump


def _counted(self: Watch, detail: str) -> None:
    print(f"watch-dump: {detail}", flush=True)
    _dump(self, detail)


if __name__ == "__main__":
    Watch._dump = _counted  # type: ignore[method-assign]
    watch_job.main()
