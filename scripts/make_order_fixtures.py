#!/usr/bin/env python3
"""Real Gloo jobs whose ranks disagree on an order: the order groups are created in, the order
two threads issue their collectives in (issue 50, items 6 and 7).

The jobs run exactly as ``scripts/make_evidence_fixtures.py`` runs its own (real ``torchrun``,
one process per rank on CPU Gloo, ``@record``, the same captures, the same checks of what a
run left): this script adds two scenarios to that harness and writes them to their own trees,
``tests/fixtures/gloo_order/<scenario>__<capture>/`` (+ the JSON twins of a ``timer`` capture
in ``gloo_order_json/``), with the truth of each in ``gloo_order/MANIFEST.json``.

* ``new_group_order``: 4 ranks make a 2 x 2 mesh's groups (``tp`` [0, 1] [2, 3], ``dp``
  [0, 2] [1, 3], ``new_group(..., group_desc=dim)``) by iterating over a Python set of the
  dimension names, ``{"tp", "dp"}``. A set of strings iterates in an order that depends on
  ``PYTHONHASHSEED``, which a launcher does not fix: here ranks 0-2 run with seed 0 (``tp``
  first) and rank 3 with seed 1 (``dp`` first), so rank 3 creates the same groups in another
  order. Group names are a global counter: rank 3's ``tp`` group [2, 3] gets the name that is
  ``dp`` [1, 3] on the others, and Gloo connects it to rank 1. Rank 3's first tensor-parallel
  all_gather meets rank 1's data-parallel all_reduce in that group: the job hangs.
* ``thread_race``: 4 ranks, two threads each issuing collectives on the default group: the
  main thread's gradient all_reduce (64 floats) and a metrics thread's all_gather of the
  step's statistics (16 floats from each rank). Every step the metrics op goes first, except
  on rank 2 in step 3, where its metrics thread is late (forced: it waits until the gradient
  op is issued): rank 2's ops at seq N and N + 1 are the others' two, swapped, and Gloo hangs.
* ``thread_race_sizes``: the same with the metrics op an all_reduce of 16 floats: Gloo's size
  check aborts the ranks that receive more bytes than they expect, the late rank among them
  (the issue's picture: the rank whose order differs leaves no dump).

Usage::

    python3 scripts/make_order_fixtures.py                          # all -> tests/fixtures
    python3 scripts/make_order_fixtures.py --only thread_race__timer  # one (repeatable)

Five fixtures, one job at a time: about 4.5 min on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_evidence_fixtures as harness
from make_evidence_fixtures import Fixture, Job, Run

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
TREE = "gloo_order"
JSON_TREE = "gloo_order_json"

MESH = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
ODD_CREATOR = 3  # new_group_order: the rank whose hash seed differs
HASH_SEEDS = {"new_group_order": {ODD_CREATOR: "1"}}  # every other rank: "0"
# list({"tp", "dp"}) under each seed (checked by every rank before it creates a group)
SET_ORDER = {"0": ["tp", "dp"], "1": ["dp", "tp"]}
TP_IN, DP_N, LOSS_N = 8, 32, 1  # elements: tp all_gather input, dp all_reduce, loss

LATE_METRICS_RANK = 2  # thread_race: the rank whose metrics thread is late
RACE_STEP = 3
GRAD_N, METRICS_N = 64, 16
BACKWARD_S = 0.5  # thread_race: the main thread's backward, between the two ops of a step


# --------------------------------------------------------------------------------------------
# Scenario programs (run in each rank's process by the harness's worker_main).
# --------------------------------------------------------------------------------------------


def prog_new_group_order(job: Job) -> None:
    """The mesh's groups made in set order; per step a tp all_gather, a dp all_reduce of the
    gradients and a world all_reduce of the loss."""
    torch, dist = job.torch, job.dist
    seed = os.environ.get("PYTHONHASHSEED", "")
    dims = list({"tp", "dp"})  # the order depends on PYTHONHASHSEED
    if dims != SET_ORDER.get(seed):
        raise SystemExit(f"rank {job.rank}: set order {dims} under seed {seed!r}")
    print(f"rank {job.rank}: PYTHONHASHSEED={seed}: creating groups in order {dims}", flush=True)
    mine: dict[str, Any] = {}
    for dim in dims:
        for ranks in MESH[dim]:
            group = dist.new_group(ranks, timeout=job.timeout, group_desc=dim)
            if job.rank in ranks:
                mine[dim] = group
    names = {d: dist.distributed_c10d._get_process_group_name(g) for d, g in mine.items()}
    print(f"rank {job.rank}: my groups {names}", flush=True)
    job.arm_timer()
    for step in range(1, 4):
        job.step = step
        out = torch.empty(2 * TP_IN)
        job.set_state(f"in all_gather[tp={names['tp']}] step {step}", "stuck")
        dist.all_gather_single(out, torch.full((TP_IN,), float(job.rank)), group=mine["tp"])
        job.set_state(f"in all_reduce[dp={names['dp']}] step {step}", "stuck")
        dist.all_reduce(torch.full((DP_N,), float(job.rank)), group=mine["dp"])
        job.set_state(f"in all_reduce[world] step {step}")
        dist.all_reduce(torch.full((LOSS_N,), float(job.rank)))


def _thread_race(job: Job, metrics_op: str) -> None:
    """Two threads, one group: the metrics thread reports the step's statistics (``metrics_op``:
    an all_gather of every rank's, or an all_reduce) while the main thread all_reduces the
    gradients; the metrics op is issued first, except on ``LATE_METRICS_RANK`` in
    ``RACE_STEP``."""
    torch, dist = job.torch, job.dist
    metrics_issued, grad_issued = threading.Event(), threading.Event()
    todo: queue.Queue[int | None] = queue.Queue()
    done: queue.Queue[int] = queue.Queue()
    late = job.rank == LATE_METRICS_RANK

    def report(step: int) -> Any:
        stats = torch.full((METRICS_N,), float(step))
        if metrics_op == "all_gather":
            out = torch.empty(METRICS_N * job.world)
            return dist.all_gather_single(out, stats, async_op=True)
        return dist.all_reduce(stats, async_op=True)

    def metrics_loop() -> None:
        while (step := todo.get()) is not None:
            if late and step == RACE_STEP:
                grad_issued.wait()  # this step the metrics thread comes late
            work = report(step)
            metrics_issued.set()
            work.wait()
            done.put(step)

    threading.Thread(target=metrics_loop, name="metrics", daemon=True).start()
    for step in range(1, 6):
        job.step = step
        metrics_issued.clear()
        grad_issued.clear()
        racing = step == RACE_STEP
        if racing:
            job.arm_timer()
        todo.put(step)  # the step's loss is known: the metrics thread reports it
        if not (late and racing):
            metrics_issued.wait()
        time.sleep(BACKWARD_S)  # the backward pass (the metrics op is long done by then)
        what = "metrics op not issued yet" if late and racing else "after the metrics op"
        job.set_state(f"in all_reduce[grads] step {step} ({what})", "stuck" if racing else None)
        work = dist.all_reduce(torch.full((GRAD_N,), float(job.rank)), async_op=True)
        grad_issued.set()
        work.wait()
        job.set_state(f"waiting for the metrics thread step {step}")
        done.get()
    todo.put(None)


def prog_thread_race(job: Job) -> None:
    _thread_race(job, "all_gather")


def prog_thread_race_sizes(job: Job) -> None:
    _thread_race(job, "all_reduce")


PROGRAMS = {
    "new_group_order": prog_new_group_order,
    "thread_race": prog_thread_race,
    "thread_race_sizes": prog_thread_race_sizes,
}


# --------------------------------------------------------------------------------------------
# The fixtures and their truth.
# --------------------------------------------------------------------------------------------

_NGO = (
    "World 4, a 2 x 2 mesh made with new_group(ranks, group_desc=dim): tp [0, 1] [2, 3], dp "
    "[0, 2] [1, 3], created by iterating over the set {'tp', 'dp'}. Ranks 0-2 run with "
    "PYTHONHASHSEED=0 (the set iterates tp, dp), rank 3 with PYTHONHASHSEED=1 (dp, tp): group "
    "names are torch's global new_group counter, so rank 3's groups get other names than its "
    "peers' (its tp [2, 3] is named '4', which is dp [1, 3] on the others, and Gloo connects "
    "it to rank 1; its dp [1, 3] is named '2', tp [2, 3] on the others). Each step: an "
    f"all_gather_single of {TP_IN} floats on tp, an all_reduce of {DP_N} floats on dp, an "
    "all_reduce of the loss on the world. Rank 3's first tp all_gather meets rank 1's dp "
    "all_reduce in group '4': the job hangs at step 1 (ranks 0 and 1 finish their tp op)."
)
_WHY_NGO = (
    "rank 3 created its groups in another order (its hash seed differs): its group '4' is "
    "its tp group where every other rank's '4' is dp; its dump says so itself (its entries "
    "in '4' carry desc 'tp', at its second group, where ranks 0-2 hold dp)"
)
_RACE = (
    "World 4, default group used by two threads of each rank: the main thread all_reduces "
    f"{GRAD_N} floats of gradients after a {BACKWARD_S} s backward, a 'metrics' thread "
    "reports the step's statistics ({metrics}); the main thread starts its backward once the "
    "metrics op is issued (async_op=True), so the metrics op comes first. In step "
    f"{RACE_STEP} rank {LATE_METRICS_RANK}'s metrics thread is late (forced: it waits until "
    "the gradient op is issued), so its ops at that step's two sequence numbers are the "
    "others' two, swapped. {outcome}"
)
_RACE_GATHER = _RACE.format(
    metrics=f"all_gather_single of {METRICS_N} floats from every rank",
    outcome=(
        "An all_gather meets an all_reduce at both seqs: Gloo hangs (no error), every rank "
        "with both ops in flight."
    ),
)
_RACE_SIZES = _RACE.format(
    metrics=f"all_reduce of {METRICS_N} floats",
    outcome=(
        "All_reduces of different sizes meet: Gloo's size check aborts the ranks that receive "
        "more bytes than they expect (gloo::EnforceNotMet, SIGABRT), rank "
        f"{LATE_METRICS_RANK} among them (its second op receives the others' gradients): "
        "the issue's picture, where the rank whose order differs leaves no dump."
    ),
)
_WHY_RACE = (
    f"rank {LATE_METRICS_RANK} issued the step's two ops on the default group in the other "
    "order (two threads, a race): its dump holds the gradient all_reduce where the others "
    "hold the metrics op, and the reverse; its two ops come from two threads"
)
_WHY_RACE_SIZES = (
    f"rank {LATE_METRICS_RANK}, whose order differs, was aborted by Gloo and left no dump; the "
    "ranks with a dump agree with each other, and Gloo's abort message names no peer: who "
    "cannot be told, the aborted ranks are suspected (no dump)"
)

_EXPECT_NGO = {"verdict": "desync", "culprit_ranks": [ODD_CREATOR]}
_EXPECT_RACE = {"verdict": "desync", "culprit_ranks": [LATE_METRICS_RANK]}
_EXPECT_RACE_SIZES = {"verdict": "cannot_tell", "culprit_ranks": []}
BASE: dict[str, dict[str, Any]] = {
    "new_group_order": {
        "world_size": 4,
        "description": _NGO,
        "culprit_ranks": [ODD_CREATOR],
        "waiting_ranks": [0, 1, 2],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "new_group (creation order), then all_gather on tp",
        "first_failure": None,
        "expect": _EXPECT_NGO,
        "why_expect": _WHY_NGO,
        "stuck": [0, 1, 2, 3],
        "extra": {
            "groups": MESH,
            "hash_seeds": {str(r): HASH_SEEDS["new_group_order"].get(r, "0") for r in range(4)},
            "creation_order": {
                str(r): SET_ORDER["1" if r == ODD_CREATOR else "0"] for r in range(4)
            },
        },
    },
    "thread_race": {
        "world_size": 4,
        "description": _RACE_GATHER,
        "culprit_ranks": [LATE_METRICS_RANK],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce and all_gather (two threads, swapped order)",
        "first_failure": None,
        "expect": _EXPECT_RACE,
        "why_expect": _WHY_RACE,
        "stuck": [0, 1, 2, 3],
        "extra": {
            "race_step": RACE_STEP,
            "ops": {"grads": ["all_reduce", [GRAD_N]], "metrics": ["all_gather", [METRICS_N]]},
        },
    },
    "thread_race_sizes": {
        "world_size": 4,
        "description": _RACE_SIZES,
        "culprit_ranks": [LATE_METRICS_RANK],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce (two threads, swapped order, different sizes)",
        "first_failure": None,  # a rank Gloo aborts, found from the run
        "expect": _EXPECT_RACE_SIZES,
        "why_expect": _WHY_RACE_SIZES,
        "stuck": [LATE_METRICS_RANK],
        "min_dead": 1,
        "extra": {
            "race_step": RACE_STEP,
            "ops": {"grads": ["all_reduce", [GRAD_N]], "metrics": ["all_reduce", [METRICS_N]]},
        },
    },
}

_TIMEOUT_MONITOR = (
    "torchrun --monitor-interval 20: every rank's blocked collective times out after 6 s and "
    "raises, and each rank's recorder dumps on its exception before torchrun stops the job"
)
FIXTURE_LIST: list[Fixture] = [
    Fixture(
        scenario="new_group_order",
        capture="exception",
        **{k: v for k, v in BASE["new_group_order"].items() if k != "extra"},
        wait_for_torchrun=True,
        require={"dump": [0, 1, 2, 3], "sidecar": [0, 1, 2, 3], "error_json": [0, 1, 2, 3]},
        extra={
            **BASE["new_group_order"]["extra"],
            "monitor_interval_s": harness.NOTICE_MONITOR_S,
            "why_monitor": _TIMEOUT_MONITOR,
        },
    ),
    Fixture(
        scenario="new_group_order",
        capture="timer",
        **BASE["new_group_order"],
        json_twin=True,
        pg_timeout_long=True,
        require={"dump": [0, 1, 2, 3], "pyspy": [0, 1, 2, 3]},
    ),
    Fixture(
        scenario="thread_race",
        capture="signal",
        **BASE["thread_race"],
        require={"dump": [0, 1, 2, 3], "sidecar": [0, 1, 2, 3], "pyspy": [0, 1, 2, 3]},
    ),
    Fixture(
        scenario="thread_race",
        capture="timer",
        **BASE["thread_race"],
        json_twin=True,
        pg_timeout_long=True,
        require={"dump": [0, 1, 2, 3], "pyspy": [0, 1, 2, 3]},
    ),
    Fixture(
        scenario="thread_race_sizes",
        capture="signal",
        **BASE["thread_race_sizes"],
        wait_for_torchrun=True,
        require={"no_dump": [LATE_METRICS_RANK]},
    ),
]
# (timer captures: the PG timeout of a signal capture, since a rank's first dump with stacks
# took 11 s on a loaded 2-core machine, past the 6 s in which the hung ops would raise)
FIXTURES: dict[str, Fixture] = {f.name: f for f in FIXTURE_LIST}

# The harness runs these programs and fixtures, this file as the worker, into these trees.
harness.PROGRAMS.update(PROGRAMS)
harness.FIXTURES.clear()
harness.FIXTURES.update(FIXTURES)
harness.FIXTURE_LIST[:] = FIXTURE_LIST
harness.SCRIPT = SCRIPT
harness.TREE = TREE
harness.JSON_TREE = JSON_TREE


def _as_built(run: Run, entry: dict[str, Any]) -> list[str]:
    """What the harness's checks do not know of these scenarios: Gloo aborted a peer of the
    late rank (and not the late rank, whose dump is the evidence)."""
    errors: list[str] = []
    if run.fx.scenario == "thread_race_sizes":
        aborted = [
            r for r in range(run.fx.world_size) if "EnforceNotMet" in harness._worker_log(run, r)
        ]
        dumped = [
            r for r in range(run.fx.world_size) if (run.dir / f"{harness.DUMP_STEM}{r}").exists()
        ]
        if LATE_METRICS_RANK not in aborted:
            errors.append(f"Gloo aborted {aborted}: expected rank {LATE_METRICS_RANK} among them")
        elif sorted(set(dumped) | set(aborted)) != list(range(run.fx.world_size)):
            errors.append(f"ranks {dumped} dumped, {aborted} aborted: a survivor left no dump")
        else:
            entry["first_failure"] = harness._ff(
                aborted[0],
                "crash",
                "symptom",
                "aborted by Gloo: received more bytes than its all_reduce expected (the ranks' "
                "two ops at the race step met in other orders)",
            )
    if run.fx.scenario == "new_group_order":
        log = harness._worker_log(run, ODD_CREATOR, "stdout")
        if "creating groups in order ['dp', 'tp']" not in log:
            errors.append(f"rank {ODD_CREATOR} did not create its groups in the other order")
    # (the harness spells its own script's name where it ran this one)
    entry["launcher"] = entry["launcher"].replace(
        "scripts/make_evidence_fixtures.py", "scripts/make_order_fixtures.py"
    )
    return errors


def build(fx: Fixture, out: Path) -> tuple[Run, dict[str, Any] | None]:
    run, entry = harness.build(fx, out)
    if entry is not None:
        run.errors += _as_built(run, entry)
        if run.errors:
            entry = None
    return run, entry


def _worker(name: str, scratch: Path, argv: list[str]) -> int:
    """One rank: with its scenario's hash seed (re-executed once where it differs), then the
    harness's worker under torchelastic's ``@record``."""
    rank = os.environ.get("RANK", "0")
    seed = HASH_SEEDS.get(FIXTURES[name].scenario, {}).get(int(rank), "0")
    if os.environ.get("PYTHONHASHSEED") != seed:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        os.execve(sys.executable, [sys.executable, str(SCRIPT), *argv], env)
    from torch.distributed.elastic.multiprocessing.errors import record

    record(harness.worker_main)(name, scratch.resolve())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "fixtures")
    ap.add_argument("--only", action="append", choices=sorted(FIXTURES), metavar="FIXTURE")
    ap.add_argument("--retries", type=int, default=2, help="reruns of a failed fixture")
    ap.add_argument("--worker", choices=sorted(FIXTURES), help=argparse.SUPPRESS)
    ap.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.scratch, argv)

    out: Path = args.out.resolve()
    chosen = [FIXTURES[n] for n in args.only] if args.only else FIXTURE_LIST
    t0 = time.monotonic()

    # one job at a time: timing
    results = [harness.with_retries(build, fx, out, args.retries) for fx in chosen]
    return harness.record_manifest(out / TREE / "MANIFEST.json", results, FIXTURE_LIST, t0)


if __name__ == "__main__":
    sys.exit(main())
