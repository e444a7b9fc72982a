"""The local collect's table and hints, on made-up outcomes: what was tried is said only where
nothing of its kind was got; no dump at all points at ``--store`` for torch's debug server."""

from __future__ import annotations

from pathlib import Path

from frtrace.collect.mechanisms import Outcome
from frtrace.collect.procs import RankProcess
from frtrace.collect.run import CollectResult, RankCollection, render_table, store_hint

SKIPPED = Outcome(
    mechanism="worker_server",
    kind="stacks",
    ok=False,
    skipped=True,
    detail="TORCH_WORKER_SERVER_SOCKET not set",
)
NO_DUMP = Outcome(mechanism="recorder", kind="dump", ok=False, detail="no registry entry")
DUMP = Outcome(mechanism="recorder", kind="dump", ok=True, detail="socket")
STACKS = Outcome(mechanism="py-spy", kind="stacks", ok=True, detail="py-spy dump")


def _row(*outcomes: Outcome) -> list[str]:
    rc = RankCollection(rank=0, host="node-1", pid=42, outcomes=outcomes)
    return render_table(CollectResult(directory=Path("x"), ranks=(rc,)))[0]


def test_what_was_tried_is_said_only_where_nothing_was_got() -> None:
    assert _row(DUMP, STACKS, SKIPPED)[-1] == "-"  # stacks got by py-spy: no word on the rest
    assert _row(DUMP, SKIPPED)[-1] == "worker_server: TORCH_WORKER_SERVER_SOCKET not set"
    assert _row(NO_DUMP, STACKS, SKIPPED)[-1] == "recorder: no registry entry"
    assert _row(NO_DUMP, STACKS, SKIPPED)[3] == "NONE"


def test_no_dump_anywhere_points_at_the_debug_server_through_the_store() -> None:
    env = {"RANK": "0", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}
    procs = [RankProcess(pid=42, rank=0, local_rank=0, cmdline="python train.py", env=env)]
    (hint,) = store_hint(procs)
    assert "frtrace collect DIR --store 10.0.0.7:29500" in hint
    assert "torch's debug server" in hint
    bare = [RankProcess(pid=42, rank=0, local_rank=0, cmdline="python train.py", env={})]
    assert store_hint(bare) == ()  # no address to give: nothing said
