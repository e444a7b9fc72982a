"""One rank's flight recorder at dump time: its ring buffer turned into a dump object.

Entries follow `FlightRecorder::record()` and `getCollectiveTrace()`:
- record_id counts every recorded entry of the process (all groups) from 0, so a wrapped
  buffer starts at record_id = recorded - buffer_size;
- collective_seq_id +1 per collective or per coalesced group, p2p_seq_id +1 per standalone
  p2p op or per batch_isend_irecv group; every entry carries the group's current values;
  op_id +1 per logical op (each op inside a coalesced group, the end entry repeats the last);
- per-op entries inside a coalesced group have no CUDA events: "scheduled", never retired, no
  discovery times or duration; the end entry (no sizes) carries the group's state;
- state comes from events queried at dump time: "completed" (discovered by the watchdog, then
  retired, with duration_ms when timing is on), "started" (kernel running, timing on only,
  discovered by the dump itself), else "scheduled";
- pg_status holds the watchdog's view per pg_id: seq of the last enqueued / started (timing
  only) / retired work, where a p2p work's seq is its p2p_seq_id.

Frame dicts are shared between the entries of one dump, as in real dumps: `torch::symbolize`
de-duplicates frames and torch's pickler memoizes an IValue that is referenced more than once,
so a repeated frame is a BINGET (checked on a torch 2.13 dump: equal frames unpickle to the
same dict object). Every entry gets its own frames list. `share_frames=False` gives every
entry fresh frame dicts instead (bigger files, slower to load than real ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from frsim.frames import AUTOGRAD_CONTEXTS, Frame, stack
from frsim.job import Job
from frsim.layout import Layout, entries_of, layout_of
from frsim.program import EPILOGUE, PROLOGUE, TOKENS
from frsim.truth import Truth
from frsim.units import Call, Unit, UnitKind

INF = math.inf
Status = tuple[str, int | None, int | None, bool, float | None]
"""state, time_discovered_started_ns, time_discovered_completed_ns, retired, duration_ms."""
_Walk = tuple[Unit, int, float, float, float, bool, bool]
"""unit, step, post, start, done, timed out and retired before the dump, unmarked (run by a
failing GPU that no longer marks completions: Fault.gpu_unmarked)."""
WATCHDOG_TICK_US = 100_000.0  # kWatchdogThreadSleepMillis
RETIRE_BEFORE_DUMP_NS = 20_000_000
"""A timed-out work retired before the dump was last updated ~20 ms before it."""
PART_GAP_NS = 15_000  # host time between the calls of one coalesced group
MAIN_THREAD, AUTOGRAD_THREAD = "python3", "pt_autograd_{}"

_STACKS: dict[tuple[str, str, int], tuple[Frame, ...]] = {}


def _stack(api: str, context: str, depth: int) -> tuple[Frame, ...]:
    key = (api, context, depth)
    if key not in _STACKS:
        _STACKS[key] = stack(api, context, depth)
    return _STACKS[key]


@dataclass(slots=True)
class _Counters:
    """Per-group counters of a rank, indexed by pg_id."""

    coll: list[int]
    p2p: list[int]
    op: list[int]
    seq: list[int]
    enqueued: list[int]
    started: list[int]
    completed: list[int]
    used: list[bool]
    record: int = 0

    @classmethod
    def zero(cls, n: int) -> _Counters:
        return cls([0] * n, [0] * n, [0] * n, [0] * n, [-1] * n, [-1] * n, [-1] * n, [False] * n)


def _bump(c: _Counters, unit: Unit, a: int) -> int:
    """Advance the counters of group `a` for `unit`; return the watchdog work's seq."""
    kind = unit.kind
    c.seq[a] += 1
    c.used[a] = True
    if kind is UnitKind.COLL:
        c.coll[a] += 1
        c.op[a] += 1
        return c.coll[a]
    if kind is UnitKind.P2P:
        c.p2p[a] += 1
        c.op[a] += 1
        return c.p2p[a]
    c.op[a] += len(unit.calls)
    if kind is UnitKind.BATCH:
        c.p2p[a] += 1
        return c.p2p[a]
    c.coll[a] += 1
    return c.coll[a]


def _active(entry: dict[str, Any]) -> bool:
    """Kept by onlyActive=True: torch skips entries whose completion was discovered."""
    if "time_discovered_completed_ns" in entry:
        return entry["time_discovered_completed_ns"] is None
    return bool(entry["state"] != "completed")  # torch 2.2: no discovery times


class RankDump:
    """Builds the dump of one rank for one layout."""

    def __init__(self, job: Job, rank: int, layout: Layout, *, share_frames: bool = True) -> None:
        self.job, self.rank, self.layout = job, rank, layout
        self.share_frames = share_frames
        self.stacks_on = job.spec.capture.stacks
        self.only_active = job.spec.capture.only_active
        spec, mesh = job.spec, job.mesh
        self.stage = mesh.stage(rank)
        self.axes = mesh.axes
        self.axis_index = {axis: i for i, axis in enumerate(self.axes)}
        self.groups = mesh.member_groups(rank)
        self.pp_rank = mesh.local_rank(rank, "pp") if "pp" in self.axes else 0
        self.tp_rank, self.tp = mesh.local_rank(rank, "tp"), spec.tp
        self.timing = spec.timing
        self.depth = spec.stack_depth
        self.dump_us = float(job.dump_us[rank])
        self.base_ns = job.epoch_ns + int(job.clock_offset_ns[rank])
        self.dump_ns = self.base_ns + int(self.dump_us * 1000)
        self.phase_us = float((rank * 7919) % 100) * 1000.0
        main, autograd = (str(int(t)) for t in job.thread_ids[rank])
        self.threads = {
            False: (MAIN_THREAD, main),
            True: (AUTOGRAD_THREAD.format(rank % spec.gpus_per_host), autograd),
        }
        self.frame_dicts: dict[Frame, dict[str, Any]] = {}
        self.stacks: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {}
        self.names: dict[tuple[str, int], str] = {}
        self.entries: list[dict[str, Any]] = []
        self.counters = _Counters.zero(len(self.axes))
        self.window = 0

    # --- helpers -----------------------------------------------------------------------
    def _frame_list(self, api: str, context: str) -> list[dict[str, Any]]:
        frames = self._frames(api, context)
        if self.share_frames:
            return list(frames)
        return [dict(f) for f in frames]

    def _frames(self, api: str, context: str) -> tuple[dict[str, Any], ...]:
        key = (api, context)
        found = self.stacks.get(key)
        if found is None:
            dicts = []
            for frame in _stack(api, context, self.depth):
                d = self.frame_dicts.get(frame)
                if d is None:
                    d = {"name": frame[0], "filename": frame[1], "line": frame[2]}
                    self.frame_dicts[frame] = d
                dicts.append(d)
            found = self.stacks[key] = tuple(dicts)
        return found

    def _name(self, op: str, peer: int = 0) -> str:
        key = (op, peer)
        found = self.names.get(key)
        if found is None:
            if op in ("send", "recv") and self.layout.p2p_ranks_in_name:
                me, other = self.pp_rank, self.pp_rank + peer
                arrow = f"{me}->{other}" if op == "send" else f"{me}<-{other}"
                found = f"nccl:{op} {arrow}"
            else:
                found = f"nccl:{op}"
            self.names[key] = found
        return found

    def _a2a_sizes(self, call: Call, step: int) -> tuple[list[list[int]], list[list[int]]]:
        n, i = self.tp, self.tp_rank
        base = max(64, TOKENS // n - 448)

        def split(src: int, dst: int) -> int:
            return base + ((src * 31 + dst * 17 + step * 7 + call.mb * 3) % 8) * 128

        rows_in = sum(split(i, j) for j in range(n))
        rows_out = sum(split(j, i) for j in range(n))
        hidden = call.in_sizes[0][1]
        return [[rows_in, hidden]], [[rows_out, hidden]]

    def _discovered(self, done_us: float) -> float:
        """When the watchdog (a tick every 100 ms) noticed a completion."""
        ticks = math.ceil((done_us - self.phase_us) / WATCHDOG_TICK_US)
        return self.phase_us + ticks * WATCHDOG_TICK_US + 30.0

    # --- walking -------------------------------------------------------------------------
    def _units(self) -> tuple[list[_Walk], int, int]:
        """Units to walk (unit, step, post, start, done, timed out), the record_id of the first
        one and the number of whole steps skipped before it. Only units posted by the dump
        are recorded (a snapshot cuts the run short)."""
        job, layout, rank = self.job, self.layout, self.rank
        prefix, tail = job.prefix, job.tail
        width = job.mesh.dp * job.mesh.tp
        column = rank - self.stage * width
        template = job.programs.templates[self.stage]
        per_step = sum(entries_of(u, layout) for u in template)
        pro = sum(entries_of(u, layout) for u in PROLOGUE)
        post = prefix.post[self.stage][:, column]
        cut = int(np.searchsorted(post, self.dump_us, side="right"))
        n_pro, n_step = len(PROLOGUE), len(template)
        full, part = divmod(max(0, cut - n_pro), n_step) if n_step else (0, 0)
        if full > prefix.steps or (full == prefix.steps and part):
            full, part = prefix.steps, 0
        recorded = sum(entries_of(u, layout) for u in PROLOGUE[:cut])
        recorded += full * per_step + sum(entries_of(u, layout) for u in template[:part])
        if prefix.has_epilogue:
            n_epi = max(0, cut - n_pro - prefix.steps * n_step)
            recorded += sum(entries_of(u, layout) for u in EPILOGUE[:n_epi])
        tail_units: list[Unit] = []
        if tail is not None:
            prog = tail.programs[rank]
            tail_units = [prog.unit(j) for j in range(tail.posted(rank))]
        recorded += sum(entries_of(u, layout) for u in tail_units)
        self.window = max(0, recorded - self.job.spec.buffer_of(rank))
        skip = 0
        if self.window >= pro and per_step:
            skip = min(prefix.steps, (self.window - pro) // per_step)
        # walk one step before the window so pg_status of quiet groups is right
        walk_from = max(0, skip - 1)
        posts = post.tolist()
        start = prefix.start[self.stage][:, column].tolist()
        done = prefix.done[self.stage][:, column].tolist()
        ks: list[tuple[Unit, int, int]] = []
        if walk_from == 0:
            ks += [(u, -1, k) for k, u in enumerate(PROLOGUE)]
        for t in range(walk_from, prefix.steps):
            k0 = n_pro + t * n_step
            ks += [(u, t, k0 + j) for j, u in enumerate(template)]
        if prefix.has_epilogue:
            k0 = n_pro + prefix.steps * n_step
            ks += [(u, prefix.steps, k0 + j) for j, u in enumerate(EPILOGUE)]
        out = [(u, t, posts[k], start[k], done[k], False, False) for u, t, k in ks if k < cut]
        if tail is not None:
            prog = tail.programs[rank]
            aborted = bool(job.retired_head[rank])
            plan = job.programs.plan
            # (the tail starts at the fault step: its j-th unit is the step's j-th)
            unmarked = (
                plan.unmarked.get(rank, len(tail_units))
                if plan.step == prog.first_step
                else len(tail_units)
            )
            out += [
                (
                    u,
                    prog.step_of(j),
                    tail.post[rank][j],
                    tail.start[rank][j],
                    tail.done[rank][j],
                    aborted and j == tail.head[rank],
                    j >= unmarked,
                )
                for j, u in enumerate(tail_units)
            ]
        return out, (pro + walk_from * per_step if walk_from else 0), walk_from

    def _skip_steps(self, steps: int) -> None:
        """Advance counters over `steps` whole healthy steps (after the prologue)."""
        c = self.counters
        for unit in PROLOGUE:
            work = _bump(c, unit, self.axis_index[unit.axis])
            self._status(self.axis_index[unit.axis], work, 0.0, 0.0)
            c.record += entries_of(unit, self.layout)
        template = self.job.programs.templates[self.stage]
        for unit in template:
            a = self.axis_index[unit.axis]
            for _ in range(steps):
                _bump(c, unit, a)
            c.record += steps * entries_of(unit, self.layout)

    def _status(self, a: int, work: int, start: float, done: float) -> None:
        c = self.counters
        c.enqueued[a] = work
        if self.timing and start <= self.dump_us and c.started[a] < work:
            c.started[a] = work
        if done <= self.dump_us and self._discovered(done) <= self.dump_us:
            c.completed[a] = work

    def build(self) -> None:
        """Walk the rank's program and fill `entries` with its ring buffer."""
        units, first_record, skipped = self._units()
        if skipped:
            self._skip_steps(skipped)
            assert self.counters.record == first_record
        for unit, step, post, start, done, aborted, unmarked in units:
            if unmarked:  # its stream ran it; its GPU never marked it started or completed
                start = done = INF
            self._unit(unit, step, post, start, done, aborted)
        if self.only_active:
            self.entries = [e for e in self.entries if _active(e)]

    def _unit(
        self, unit: Unit, step: int, post: float, start: float, done: float, aborted: bool
    ) -> None:
        c, layout = self.counters, self.layout
        a = self.axis_index[unit.axis]
        op_before = c.op[a]
        work = _bump(c, unit, a)
        self._status(a, work, start, done)
        first = c.record
        n = entries_of(unit, layout)
        c.record += n
        if c.record <= self.window:
            return
        kind = unit.kind
        created = self.base_ns + int(post * 1000)
        completed = done <= self.dump_us
        discovered = self._discovered(done) if completed else INF
        # a timed-out work the watchdog retired before dumping: retired, never completed
        retired = discovered <= self.dump_us or aborted
        if completed:
            t_done = self.base_ns + int(discovered * 1000) if retired else self.dump_ns
            state = "completed"
            t_start: int | None = (t_done - 300) if self.timing else None
            t_completed: int | None = t_done
            duration = (done - start) / 1000.0 if (self.timing and retired) else None
        elif start <= self.dump_us and self.timing:
            # discovered by the dump's update_state, or by retire_id when the watchdog retired
            # the timed-out work first
            seen = self.dump_ns - (RETIRE_BEFORE_DUMP_NS if aborted else 0)
            state, t_start, t_completed, duration = "started", seen, None, None
        else:
            state, t_start, t_completed, duration = "scheduled", None, None, None
        work_state: Status = (state, t_start, t_completed, retired, duration)
        if kind is UnitKind.COLL or kind is UnitKind.P2P:
            call = unit.calls[0]
            self._emit(
                first, unit, call, step, a,
                op_id=op_before + 1,
                created=created,
                name=self._name(call.op, call.peer),
                api=call.api,
                is_p2p=kind is UnitKind.P2P,
                status=work_state,
            )  # fmt: skip
            return
        rid = first
        parts = layout.batch_parts if kind is UnitKind.BATCH else layout.slow_parts
        if parts:
            pending: Status = ("scheduled", None, None, False, None)
            for i, call in enumerate(unit.calls):
                if rid >= self.window:
                    self._emit(
                        rid, unit, call, step, a,
                        op_id=op_before + i + 1,
                        created=created + i * PART_GAP_NS,
                        name=self._name(call.op, call.peer),
                        api=call.api,
                        is_p2p=kind is UnitKind.BATCH,
                        status=pending,
                    )  # fmt: skip
                rid += 1
        end = unit.end_op if (kind is UnitKind.BATCH or layout.named_slow_end) else "coalesced"
        self._emit(
            rid, unit, None, step, a,
            op_id=op_before + len(unit.calls),
            created=created + len(unit.calls) * PART_GAP_NS,
            name=self._name(end),
            api=unit.end_api,
            is_p2p=False,
            status=work_state,
        )  # fmt: skip

    def _emit(
        self,
        rid: int,
        unit: Unit,
        call: Call | None,
        step: int,
        a: int,
        *,
        op_id: int,
        created: int,
        name: str,
        api: str,
        is_p2p: bool,
        status: Status,
    ) -> None:
        """Append one entry in `layout`'s shape; `call` is None for a coalesced end entry."""
        layout, c = self.layout, self.counters
        state, t_start, t_completed, retired, duration = status
        if call is None:
            in_sizes: list[list[int]] = []
            out_sizes: list[list[int]] = []
            in_dtypes: list[str] = []
            out_dtypes: list[str] = []
        else:
            if call.a2a:
                in_sizes, out_sizes = self._a2a_sizes(call, step)
            else:
                in_sizes = [list(s) for s in call.in_sizes]
                out_sizes = [list(s) for s in call.out_sizes]
            in_dtypes, out_dtypes = list(call.in_dtypes), list(call.out_dtypes)
        e: dict[str, Any] = {}
        if layout.bare_list:
            e["pg_id"] = a
            e["seq_id"] = c.seq[a]
            e["profiling_name"] = name
            e["time_created_us"] = created // 1000
            e["input_sizes"] = in_sizes
            e["output_sizes"] = out_sizes
            e["state"] = state
            e["retired"] = retired
            if self.stacks_on:
                e["frames"] = self._frame_list(api, unit.context)
            self.entries.append(e)
            return
        if not layout.two_x:
            e["record_id"] = rid
            e["pg_id"] = a
            e["seq_id"] = c.seq[a]
            e["op_id"] = op_id
            e["profiling_name"] = name
            e["time_created_ns"] = created
            if duration is not None:
                e["duration_ms"] = float(np.float32(duration))
            e["input_sizes"] = in_sizes
            e["output_sizes"] = out_sizes
            e["state"] = state
            e["time_discovered_started_ns"] = t_start
            e["time_discovered_completed_ns"] = t_completed
            e["retired"] = retired
            if self.stacks_on:
                e["frames"] = self._frame_list(api, unit.context)
            self.entries.append(e)
            return
        if self.stacks_on:
            e["frames"] = self._frame_list(api, unit.context)
        e["record_id"] = rid
        e["pg_id"] = a
        group = self.groups[a]
        e["process_group"] = (group.name, group.desc)
        if layout.threads:
            thread_name, thread_id = self.threads[unit.context in AUTOGRAD_CONTEXTS]
            e["thread_name"] = thread_name
            e["thread_id"] = thread_id
        e["collective_seq_id"] = c.coll[a]
        e["p2p_seq_id"] = c.p2p[a]
        e["op_id"] = op_id
        e["profiling_name"] = name
        e["time_created_ns"] = created
        if duration is not None:
            e["duration_ms"] = float(np.float32(duration))
        e["input_sizes"] = in_sizes
        e["input_dtypes"] = in_dtypes
        e["output_sizes"] = out_sizes
        e["output_dtypes"] = out_dtypes
        e["state"] = state
        e["time_discovered_started_ns"] = t_start
        e["time_discovered_completed_ns"] = t_completed
        e["retired"] = retired
        if layout.timeout:
            e["timeout_ms"] = self.job.spec.timeout_ms
        e["is_p2p"] = is_p2p
        self.entries.append(e)


def shows_dump_instant(dump: RankDump) -> bool:
    """Whether the dump shows when it was taken: an entry its own dump discovered (started, or
    completed but not yet retired) carries the dump time. With it, a reader can see that the
    calls still pending were created moments before, far less than a timeout."""
    return any(
        not e["retired"]
        and (e.get("time_discovered_started_ns") or e.get("time_discovered_completed_ns"))
        for e in dump.entries
    )


def snapshot_truth(job: Job, layout: Layout | None = None) -> Truth:
    """The truth of a SNAPSHOT: healthy, no culprit; `detectable` only when some dump shows
    the instant it was taken (format 2.10 unless `layout`). Without that instant, a rank that
    finished its last call and has not posted the next looks exactly like a rank stuck in host
    code in dumps taken while blocked: the entries and pg_status are the same."""
    truth = job.truth
    missing = set(truth.missing_ranks)
    shown = []
    for rank in range(job.spec.world_size):
        if rank in missing or job.spec.buffer_of(rank) == 0:
            continue
        dump = RankDump(job, rank, layout or layout_of("2.10"))
        dump.build()
        if shows_dump_instant(dump):
            shown.append(rank)
    if shown:
        return truth
    return replace(
        truth,
        detectable=False,
        reason="no dump shows the instant it was taken (no started or unretired completed "
        "entry): a rank between two calls looks stuck in host code",
    )
