"""Vectorised execution of the fault-free prefix of a job (the same program on every rank of
a stage), giving each unit's post, start and completion time on every rank.

Times are microseconds since the job started, on one global clock (host clock skew is added
when entries are written). The model, shared with execute.py:

    post[k]  = max(post[k-1] + host_gap, done[k-1-lookahead])   host enqueues ahead, then blocks
    start[k] = max(post[k], done[k-1] + gpu_gap)                one GPU stream per rank
    done[k]  = max over its matches of (max start of the matched units + kernel cost)

A collective matches the units of all members of its group; each p2p op matches its peer's op.
Stages are walked node by node ((stage, unit) pairs) in the order the job would finish them,
each node vectorised over the stage's ranks in (dp, tp) order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from frsim.program import EPILOGUE, PROLOGUE, Programs
from frsim.spec import FaultKind
from frsim.units import Unit, UnitKind

FloatArray = NDArray[np.float64]
HOST_NOISE, GPU_NOISE, COST_NOISE = 0.15, 0.05, 0.05


@dataclass(slots=True)
class PrefixTimes:
    """Times of the prefix units: arrays of shape (units, ranks of the stage) per stage."""

    units: list[tuple[Unit, ...]]
    post: list[FloatArray]
    start: list[FloatArray]
    done: list[FloatArray]
    steps: int
    """Number of full steps in the prefix (after the prologue)."""
    has_epilogue: bool


@dataclass(slots=True)
class _Link:
    kind: str  # "tp", "dp", "world", "p2p"
    nodes: list[tuple[int, int]]
    cost: float


def _build_links(units: list[tuple[Unit, ...]]) -> tuple[list[_Link], list[list[list[int]]]]:
    """Matches of the prefix: one link per collective instance or p2p send/recv pair."""
    links: list[_Link] = []
    node_links: list[list[list[int]]] = [[[] for _ in u] for u in units]
    world: dict[int, int] = {}
    sends: dict[tuple[int, int, str], list[int]] = {}
    recvs: dict[tuple[int, int, str], list[int]] = {}
    for s, stage_units in enumerate(units):
        n_world = 0
        for k, unit in enumerate(stage_units):
            if unit.kind in (UnitKind.COLL, UnitKind.SLOW):
                if unit.axis == "world":
                    if n_world not in world:
                        world[n_world] = len(links)
                        links.append(_Link("world", [], unit.cost_us))
                    link = world[n_world]
                    links[link].nodes.append((s, k))
                    node_links[s][k].append(link)
                    n_world += 1
                elif unit.axis in ("tp", "dp"):
                    node_links[s][k].append(len(links))
                    links.append(_Link(unit.axis, [(s, k)], unit.cost_us))
                else:  # pragma: no cover - the templates have no pp collectives
                    raise ValueError(f"unsupported collective axis {unit.axis}")
                continue
            for call in unit.calls:
                if call.op == "send":
                    sends.setdefault((s, s + call.peer, call.tag), []).append(k)
                else:
                    recvs.setdefault((s + call.peer, s, call.tag), []).append(k)
    for key, send_nodes in sends.items():
        recv_nodes = recvs.get(key, [])
        if len(recv_nodes) != len(send_nodes):
            raise ValueError(f"unmatched pipeline p2p in the step template: {key}")
        src, dst, _ = key
        for ks, kr in zip(send_nodes, recv_nodes, strict=True):
            link = len(links)
            cost = units[src][ks].cost_us
            links.append(_Link("p2p", [(src, ks), (dst, kr)], cost))
            node_links[src][ks].append(link)
            node_links[dst][kr].append(link)
    return links, node_links


def simulate_prefix(programs: Programs, n_steps: int, with_epilogue: bool) -> PrefixTimes:
    """Run prologue + `n_steps` healthy steps (+ epilogue) on every rank, vectorised."""
    spec, mesh = programs.spec, programs.mesh
    rng = np.random.default_rng([spec.seed, 7])
    pp, dp, tp = spec.pp, spec.dp_size, spec.tp
    width = dp * tp
    lookahead = spec.lookahead
    units = [
        PROLOGUE + programs.templates[s] * n_steps + (EPILOGUE if with_epilogue else ())
        for s in range(pp)
    ]
    sizes = [len(u) for u in units]
    post = [np.zeros((k, width)) for k in sizes]
    start = [np.zeros((k, width)) for k in sizes]
    done = [np.full((k, width), -np.inf) for k in sizes]
    links, node_links = _build_links(units)
    remaining = [[len(node_links[s][k]) for k in range(sizes[s])] for s in range(pp)]
    fired = [False] * len(links)
    head = [0] * pp

    delay: list[FloatArray | None] = [None] * pp
    fault = spec.fault
    first_slow_step = 0
    if fault is not None and fault.kind is FaultKind.STRAGGLER:
        first_slow_step = max(fault.step, 0)
        stage = mesh.stage(fault.rank)
        arr = np.zeros(width)
        arr[fault.rank - stage * width] = fault.delay_ms * 1000.0
        delay[stage] = arr
    step_len = [len(t) for t in programs.templates]

    def enter(s: int) -> None:
        k = head[s]
        unit = units[s][k]
        gap = unit.host_gap_us * rng.lognormal(0.0, HOST_NOISE, width)
        if k == 0:
            post[s][k] = gap
        else:
            post[s][k] = post[s][k - 1] + gap
            if k - 1 - lookahead >= 0:
                np.maximum(post[s][k], done[s][k - 1 - lookahead], out=post[s][k])
        extra = delay[s]
        if extra is not None and k >= len(PROLOGUE):
            index = k - len(PROLOGUE)
            if index % step_len[s] == 0 and first_slow_step <= index // step_len[s] < n_steps:
                post[s][k] += extra
        gpu = unit.gpu_gap_us * rng.lognormal(0.0, GPU_NOISE, width)
        prev = done[s][k - 1] + gpu if k else gpu
        start[s][k] = np.maximum(post[s][k], prev)

    def fire(link_id: int) -> list[int]:
        link = links[link_id]
        fired[link_id] = True
        if link.kind == "world":
            top = max(float(start[s][k].max()) for s, k in link.nodes)
            value = top + link.cost * float(rng.lognormal(0.0, COST_NOISE))
            arrays = {s: np.full(width, value) for s, _ in link.nodes}
        elif link.kind == "p2p":
            (s1, k1), (s2, k2) = link.nodes
            both = np.maximum(start[s1][k1], start[s2][k2])
            both += link.cost * rng.lognormal(0.0, COST_NOISE, width)
            arrays = {s1: both, s2: both}
        else:
            ((s, k),) = link.nodes
            grid = start[s][k].reshape(dp, tp)
            if link.kind == "tp":
                top = grid.max(axis=1, keepdims=True)
                noise = rng.lognormal(0.0, COST_NOISE, (dp, 1))
            else:
                top = grid.max(axis=0, keepdims=True)
                noise = rng.lognormal(0.0, COST_NOISE, (1, tp))
            arrays = {s: np.broadcast_to(top + link.cost * noise, (dp, tp)).ravel()}
        advanced = []
        for s, k in link.nodes:
            np.maximum(done[s][k], arrays[s], out=done[s][k])
            remaining[s][k] -= 1
            if remaining[s][k] == 0:
                advanced.append(s)
        return advanced

    todo = list(range(pp))
    for s in todo:
        enter(s)
    while todo:
        s = todo.pop()
        while head[s] < sizes[s]:
            k = head[s]
            if remaining[s][k] == 0:
                if not node_links[s][k]:
                    done[s][k] = start[s][k] + units[s][k].cost_us
                head[s] += 1
                if head[s] < sizes[s]:
                    enter(s)
                continue
            progressed = False
            for link_id in node_links[s][k]:
                if fired[link_id]:
                    continue
                if all(head[s2] == k2 for s2, k2 in links[link_id].nodes):
                    for s2 in fire(link_id):
                        if s2 != s:
                            todo.append(s2)
                    progressed = True
            if not progressed and remaining[s][k]:
                break
    stuck = [s for s in range(pp) if head[s] < sizes[s]]
    if stuck:
        raise RuntimeError(f"healthy step template deadlocks (stages {stuck}); this is a bug")
    return PrefixTimes(units, post, start, done, n_steps, with_epilogue)
