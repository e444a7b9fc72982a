"""Exact, rank-by-rank execution of the tail of a faulty job (from the fault step on), run to
a fixpoint: the moment a hung job's dumps are taken.

Same timing model as timing.py, but every rank has its own program, so faults that change a
rank's calls or their order can be run. Matching is by key: the n-th collective a rank posts
on a group must meet the n-th of every other member (("C", group, n)); the n-th send from a to
b meets b's n-th recv from a (("P", group, a, b, n)). A collective fires only when every
member has it at the head of its stream; one with a corrupt (mismatched) member never fires.
A rank posts up to `lookahead` units past its oldest unfinished one and never posts past a
host stall. When nothing can move any more, the job is hung (or finished).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from frsim.program import EPILOGUE, Programs
from frsim.timing import COST_NOISE, GPU_NOISE, HOST_NOISE, PrefixTimes
from frsim.units import Unit, UnitKind

Key = tuple[str, int, int, int, int]
"""("C", group id, 0, 0, n) for collectives, ("P", group id, src, dst, n) for p2p."""
INF = math.inf


class TailProgram:
    """The units of one rank from step `first_step` on: fault step, later steps, epilogue."""

    def __init__(self, programs: Programs, rank: int, first_step: int) -> None:
        steps = programs.spec.steps
        self.first_step = first_step
        self.first = programs.step_units(rank, first_step) if first_step < steps else ()
        self.template = programs.templates[programs.mesh.stage(rank)]
        self.n_rest = max(0, steps - first_step - 1)
        self.length = len(self.first) + self.n_rest * len(self.template) + len(EPILOGUE)

    def __len__(self) -> int:
        return self.length

    def unit(self, j: int) -> Unit:
        """The j-th unit of the tail."""
        if j < len(self.first):
            return self.first[j]
        j -= len(self.first)
        rest = self.n_rest * len(self.template)
        if j < rest:
            return self.template[j % len(self.template)]
        return EPILOGUE[j - rest]

    def step_of(self, j: int) -> int:
        """Training step of the j-th unit (the number of steps for the epilogue)."""
        if j < len(self.first):
            return self.first_step
        j -= len(self.first)
        if j < self.n_rest * len(self.template):
            return self.first_step + 1 + j // len(self.template)
        return self.first_step + 1 + self.n_rest


@dataclass(slots=True)
class TailTimes:
    """Outcome of the tail per rank: posted units, their keys and times (inf: never)."""

    programs: list[TailProgram]
    post: list[list[float]]
    start: list[list[float]]
    done: list[list[float]]
    keys: list[list[tuple[Key, ...]]]
    head: list[int]
    """Units completed per rank (index of the oldest unfinished unit)."""
    poisoned: set[Key] = field(default_factory=set)
    """Collective keys that can never fire: their members posted mismatched calls."""

    def posted(self, rank: int) -> int:
        """Number of tail units `rank` posted."""
        return len(self.post[rank])

    def hung(self) -> bool:
        """Whether any rank is left with unfinished or unposted units."""
        return any(h < len(p) for h, p in zip(self.head, self.programs, strict=True))


def run_tail(programs: Programs, prefix: PrefixTimes) -> TailTimes:
    """Run every rank from the end of `prefix` to a fixpoint."""
    spec, mesh = programs.spec, programs.mesh
    rnd = random.Random(spec.seed * 1_000_003 + 11)
    world, look = spec.world_size, spec.lookahead
    width = mesh.dp * mesh.tp
    first = prefix.steps
    progs = [TailProgram(programs, r, first) for r in range(world)]
    stall = [
        programs.plan.stall.get(r, len(progs[r])) if programs.plan.step == first else len(progs[r])
        for r in range(world)
    ]
    hist: list[list[float]] = []
    last_post: list[float] = []
    for r in range(world):
        s, i = divmod(r, width)
        column = prefix.done[s][:, i]
        hist.append([float(x) for x in column[-(look + 1) :]])
        last_post.append(float(prefix.post[s][-1, i]))
    out = TailTimes(
        progs,
        [[] for _ in progs],
        [[] for _ in progs],
        [[] for _ in progs],
        [[] for _ in progs],
        [0] * world,
    )
    coll_n: list[dict[int, int]] = [{} for _ in range(world)]
    p2p_n: list[dict[tuple[int, int], int]] = [{} for _ in range(world)]
    at_head: dict[Key, list[int]] = {}
    fired: dict[Key, float] = {}
    entered = [False] * world

    def keys_of(r: int, unit: Unit) -> tuple[Key, ...]:
        if unit.kind in (UnitKind.COLL, UnitKind.SLOW):
            gid = mesh.group(r, unit.axis).gid
            n = coll_n[r].get(gid, 0)
            coll_n[r][gid] = n + 1
            return (("C", gid, 0, 0, n),)
        keys: list[Key] = []
        gid = mesh.group(r, "pp").gid
        for call in unit.calls:
            peer = r + call.peer * width
            pair = (r, peer) if call.op == "send" else (peer, r)
            n = p2p_n[r].get(pair, 0)
            p2p_n[r][pair] = n + 1
            keys.append(("P", gid, pair[0], pair[1], n))
        return tuple(keys)

    def done_at(r: int, j: int) -> float:
        if j >= 0:
            return out.done[r][j]
        back = len(hist[r]) + j
        return hist[r][back] if back >= 0 else -INF

    def post_more(r: int) -> None:
        prog = progs[r]
        while (n := len(out.post[r])) < min(len(prog), stall[r], out.head[r] + look + 1):
            unit = prog.unit(n)
            prev = out.post[r][-1] if n else last_post[r]
            t = prev + unit.host_gap_us * rnd.lognormvariate(0.0, HOST_NOISE)
            out.post[r].append(max(t, done_at(r, n - 1 - look)))
            out.start[r].append(INF)
            out.done[r].append(INF)
            out.keys[r].append(keys_of(r, unit))

    def complete(r: int, when: float) -> None:
        out.done[r][out.head[r]] = when
        out.head[r] += 1
        entered[r] = False

    def try_fire(key: Key, cost_us: float) -> list[int]:
        waiting = at_head[key]
        need = 2 if key[0] == "P" else len(mesh.groups[key[1]].ranks)
        if key in fired or len(waiting) < need:
            return []
        if any(progs[m].unit(out.head[m]).corrupt for m in waiting):
            out.poisoned.add(key)
            return []
        cost = cost_us * rnd.lognormvariate(0.0, COST_NOISE)
        fired[key] = max(out.start[m][out.head[m]] for m in waiting) + cost
        finished = [m for m in waiting if all(k in fired for k in out.keys[m][out.head[m]])]
        for m in finished:
            complete(m, max(fired[k] for k in out.keys[m][out.head[m]]))
        return finished

    todo = list(range(world - 1, -1, -1))
    while todo:
        r = todo.pop()
        post_more(r)
        h = out.head[r]
        if entered[r] or h >= len(out.post[r]):
            continue
        entered[r] = True
        unit = progs[r].unit(h)
        prev = out.done[r][h - 1] if h else hist[r][-1]
        gpu = unit.gpu_gap_us * rnd.lognormvariate(0.0, GPU_NOISE)
        out.start[r][h] = max(out.post[r][h], prev + gpu)
        if not out.keys[r][h]:
            complete(r, out.start[r][h] + unit.cost_us)
            todo.append(r)
            continue
        for key in out.keys[r][h]:
            at_head.setdefault(key, []).append(r)
        for key in out.keys[r][h]:
            todo.extend(try_fire(key, unit.cost_us))
    return out
