"""Discovery reads every file within the dump budget (frtrace.incident.attempts, issue 53,
item 6): copy detection hashes no dump listed larger than ``MAX_DUMP_BYTES`` (two sparse
8 GiB files of one rank and size took a minute, a 1 TiB one hours), and no read of discovery
blocks on a FIFO swapped in for a listed file after the listing, nor follows a link swapped
in (each is opened ``O_NONBLOCK|O_NOFOLLOW``, checked by its ``fstat``).

Each case runs in a child process with a time limit: before the fix a FIFO blocked the open
forever (the test would never end), and the sparse files took far more than the limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from frtrace.incident import attempts
from frtrace.incident.budget import MAX_DUMP_BYTES, read_listed
from frtrace.incident.discover import list_files
from tests.conftest import make_dump, make_entry, write_pickle

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 10


def _run(script: str, directory: Path) -> dict[str, object]:
    """Run ``script`` (it prints one JSON line) on ``directory`` in a child, within LIMIT_S."""
    code = textwrap.dedent(script)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    try:
        run = subprocess.run(
            [sys.executable, "-c", code, str(directory)],
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
            env=env,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"discovery's read did not return in {LIMIT_S} s (blocked, or unbudgeted)")
    assert run.returncode == 0, run.stderr
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_dumps_listed_over_the_budget_are_never_hashed(tmp_path: Path) -> None:
    """Two sparse 8 GiB files of rank 0 in two folders, the same size: not hashed (before:
    16 GiB read in the parent), each kept as a distinct file (the loader refuses both as too
    large, with its one line each)."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        with open(tmp_path / folder / "nccl_trace_rank_0", "wb") as f:
            os.truncate(f.fileno(), 8 << 30)
    result = _run(
        """
        import json, sys
        from pathlib import Path
        from frtrace.incident.attempts import drop_copies
        from frtrace.incident.discover import list_files
        listing = list_files(Path(sys.argv[1]))
        kept, problems, pairs = drop_copies(listing.candidates)
        print(json.dumps({"kept": [c.relative for c in kept], "copies": len(pairs)}))
        """,
        tmp_path,
    )
    assert result == {"kept": ["a/nccl_trace_rank_0", "b/nccl_trace_rank_0"], "copies": 0}


def test_a_dump_over_the_budget_has_no_digest(tmp_path: Path) -> None:
    """In process: a file listed one byte over ``MAX_DUMP_BYTES`` is not read at all."""
    path = tmp_path / "nccl_trace_rank_0"
    with open(path, "wb") as f:
        os.truncate(f.fileno(), MAX_DUMP_BYTES + 1)
    (cand,) = list_files(tmp_path).candidates
    assert cand.size_bytes == MAX_DUMP_BYTES + 1
    assert attempts._digest(cand) is None


def _two_snapshots(directory: Path) -> None:
    """Two folders of the same rank 0 dump (copies) with a stack sidecar each (the same
    bytes: side copies) that name the rank's process (the snapshots' proof)."""
    data = make_dump([make_entry(record_id=0, collective_seq_id=1)], world=1)
    for folder in ("a", "b"):
        (directory / folder).mkdir(parents=True)
        write_pickle(directory / folder / "nccl_trace_rank_0", data)
        sidecar = {"rank": 0, "pid": 7, "host": "h", "dumped_at_ns": 1, "stacks": []}
        (directory / folder / "stacks_rank_0.json").write_text(json.dumps(sidecar))


# Each of discovery's reads, on what the listing found, after b/'s files were swapped for FIFOs
# (or for links to a's): it returns, and takes what it could not read for no copy.
_SWAPPED = """
    import json, os, sys
    from pathlib import Path
    from frtrace.incident import attempts
    from frtrace.incident.discover import list_files
    from frtrace.incident.fingerprint import path_fingerprint
    d = Path(sys.argv[1])
    listing = list_files(d)
    for name in ("nccl_trace_rank_0", "stacks_rank_0.json"):
        os.unlink(d / "b" / name)
        if "{swap}" == "fifo":
            os.mkfifo(d / "b" / name)
        else:
            os.symlink(d / "a" / name, d / "b" / name)
    which = "{which}"
    if which == "drop_copies":
        kept, _, pairs = attempts.drop_copies(listing.candidates)
        out = [c.relative for c in kept]
    elif which == "drop_side_copies":
        out = [f.relative for f in attempts.drop_side_copies(listing.side_files)]
    elif which == "snapshot_pids":
        out = {{k: list(v) for k, v in attempts._pids_in("b", listing.side_files).items()}}
    else:
        try:
            path_fingerprint(d / "b" / "nccl_trace_rank_0")
            out = "fingerprinted"
        except OSError as exc:
            out = exc.strerror
    print(json.dumps({{"out": out}}))
"""


@pytest.mark.parametrize("swap", ["fifo", "link"])
@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("drop_copies", ["a/nccl_trace_rank_0", "b/nccl_trace_rank_0"]),
        ("drop_side_copies", ["a/stacks_rank_0.json", "b/stacks_rank_0.json"]),
        ("snapshot_pids", {}),
        ("fingerprint", None),
    ],
)
def test_a_file_swapped_after_the_listing_never_blocks_nor_is_followed(
    tmp_path: Path, swap: str, which: str, expected: object
) -> None:
    """Before: ``open()`` of the FIFO blocked forever (in the watch: the training process),
    and a link swapped in was followed and read (its bytes taken for the listed file's)."""
    _two_snapshots(tmp_path)
    result = _run(_SWAPPED.format(swap=swap, which=which), tmp_path)
    if which == "fingerprint":  # (the caches follow a dump's link, as the loader does)
        assert result["out"] == ("not a regular file" if swap == "fifo" else "fingerprinted")
    else:
        assert result["out"] == expected


def test_a_file_that_changed_size_since_the_listing_is_not_read(tmp_path: Path) -> None:
    """Never more than the listed size is read: a file grown since is not the one listed."""
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"x" * 100)
    with pytest.raises(OSError, match="not the size it was listed at"):
        b"".join(read_listed(path, 10, MAX_DUMP_BYTES))
    assert b"".join(read_listed(path, 100, MAX_DUMP_BYTES)) == b"x" * 100
    with pytest.raises(OSError, match="larger than"):
        b"".join(read_listed(path, 100, 99))


def test_copies_within_the_budget_are_still_read_once(tmp_path: Path) -> None:
    """The budget changes nothing for real copies: b/'s dump and sidecar are a's, read once."""
    _two_snapshots(tmp_path)
    listing = list_files(tmp_path)
    kept, problems, pairs = attempts.drop_copies(listing.candidates)
    assert [c.relative for c in kept] == ["a/nccl_trace_rank_0"] and len(pairs) == 1
    assert "the same bytes as a/nccl_trace_rank_0" in problems[0].message
    side = attempts.drop_side_copies(listing.side_files)
    assert [f.relative for f in side] == ["a/stacks_rank_0.json"]
    assert attempts._pids_in("b", listing.side_files) == {0: ("h", 7)}
