"""State a scenario in a few lines, get the real ``Facts`` the rules read (for the rule tests).

    job = Job(world=4)                           # one NCCL default group, ranks 0-3
    job.done("all_reduce", range(1, 7))          # every rank finished all_reduce #1-#6
    job.enter("all_reduce", 7, ranks=(0, 1, 3))  # ranks 0, 1, 3 entered #7; rank 2 did not
    facts = job.facts(stacks={2: host("load_batch")}, dumped_at_s={0: 0.3})

Each rank's entries become a dump dict as torch writes it (FR format 2.10), which the loader's
own ``parse_payload`` reads and ``build_dump_set`` assembles, in memory (no file is written);
``frtrace.analysis.facts.gather_facts`` then computes every fact from that ``DumpSet``, so
nothing in the ``Facts`` is set by hand. Times are seconds after the job's start (``T0_NS``):
each op added takes the next ``STEP_S`` unless given ``at_s``. Stacks become stack samples
(``host``, ``in_call``) and the job's failures ``Failure`` records (``cause``, ``symptom``,
``naming``), as the stack and evidence readers make them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from frtrace.analysis.facts import Facts, gather_facts
from frtrace.errors import DumpFormatError
from frtrace.evidence.model import Failure, FailureKind, JobEvidence, Role
from frtrace.incident.discover import Candidate
from frtrace.load.dumpset import DumpSet
from frtrace.load.read.parse import ParsedDump, parse_payload
from frtrace.load.tables import build_dump_set
from frtrace.pystack.discover import StackSet
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack

__all__ = ["STEP_S", "T0_NS", "Job", "cause", "host", "in_call", "naming", "symptom"]

T0_NS = 1_700_000_000_000_000_000  # the job's start: every time is seconds after it
STEP_S = 0.01  # how far apart the ops of a scenario are, unless placed with ``at_s``
_C10D = "torch/distributed/distributed_c10d.py"

Frames = tuple[Frame, ...]


def host(function: str = "load_batch", file: str = "data.py") -> Frames:
    """A main thread in the user's host code (no torch.distributed call under it)."""
    return (
        Frame(function="wait", filename="threading.py", line=629),
        Frame(function=function, filename=file, line=88),
        Frame(function="main", filename="train.py", line=10),
    )


def in_call(call: str = "all_reduce") -> Frames:
    """A main thread inside the torch.distributed call ``call`` (all_reduce, send, barrier...)."""
    return (
        Frame(function=call, filename=_C10D, line=2800),
        Frame(function="train_step", filename="train.py", line=42),
        Frame(function="main", filename="train.py", line=10),
    )


def cause(
    rank: int, at_s: float | None = None, kind: FailureKind = FailureKind.EXCEPTION
) -> Failure:
    """The rank's own fault (an exception by default), at ``at_s`` where its log says when."""
    return Failure(
        rank=rank,
        kind=kind,
        role=Role.CAUSE,
        message=f"RuntimeError: rank {rank} failed",
        source=f"rank_{rank}.log:1",
        at_ns=_ns(at_s),
        exc_type="RuntimeError",
    )


def symptom(rank: int, at_s: float | None = None) -> Failure:
    """What another rank's fault did to this one: a timeout."""
    return Failure(
        rank=rank,
        kind=FailureKind.TIMEOUT,
        role=Role.SYMPTOM,
        message="Watchdog caught collective operation timeout",
        source=f"rank_{rank}.log:2",
        at_ns=_ns(at_s),
    )


def naming(rank: int, named: Sequence[int]) -> Failure:
    """A message on ``rank`` that names the ranks which failed (monitored_barrier's)."""
    return Failure(
        rank=rank,
        kind=FailureKind.BARRIER_FAILED,
        role=Role.SYMPTOM,
        message=f"Ranks {', '.join(map(str, named))} failed to pass monitoredBarrier in 5000 ms",
        source=f"rank_{rank}.log:3",
        named_ranks=tuple(named),
    )


class Job:
    """One job's dumps, op by op: ``group``, ``done``, ``enter``; then ``dumps`` or ``facts``.

    ``backend``: "nccl" (entries change state: scheduled, started, completed) or "gloo" (every
    entry stays "scheduled", ``retired`` once finished; groups are not in ``pg_config``, so
    their members are read from the entries). ``missing``: ranks that left no dump;
    ``unreadable``: ranks whose dump file is there but could not be read.
    """

    def __init__(
        self,
        world: int = 4,
        *,
        backend: Literal["nccl", "gloo"] = "nccl",
        missing: Iterable[int] = (),
        unreadable: Iterable[int] = (),
    ) -> None:
        self.world = world
        self.backend = backend
        self.missing = frozenset(missing)
        self.unreadable = frozenset(unreadable)
        self._groups: dict[str, tuple[int, ...]] = {"0": tuple(range(world))}
        self._descs: dict[str, str] = {"0": "default_pg"}
        self._entries: dict[int, list[dict[str, Any]]] = {r: [] for r in range(world)}
        self._clock_s = 0.0

    @property
    def newest_s(self) -> float:
        """When the newest op so far was created (seconds after ``T0_NS``)."""
        return self._clock_s

    def group(self, name: str, ranks: Sequence[int], desc: str | None = None) -> str:
        """Declare a subgroup (its members list it in their ``pg_config``); returns its name.
        ``desc``: its description (groups of one kind, as every tp group, share one)."""
        self._groups[name] = tuple(ranks)
        self._descs[name] = desc or f"group {name}"
        return name

    def done(
        self,
        op: str,
        seqs: Iterable[int],
        *,
        ranks: Iterable[int] | None = None,
        group: str = "0",
        at_s: float | None = None,
    ) -> Job:
        """Every rank of ``ranks`` (default: the group's members) finished ``op`` #seq, for
        each seq in order; ``at_s``: when the first was created."""
        for i, seq in enumerate(seqs):
            when = None if at_s is None else at_s + i * STEP_S
            self.enter(op, seq, ranks=ranks, group=group, at_s=when, state="completed")
        return self

    def enter(
        self,
        op: str,
        seq: int,
        *,
        ranks: Iterable[int] | None = None,
        group: str = "0",
        at_s: float | None = None,
        state: Literal["scheduled", "started", "completed"] = "scheduled",
        sizes: Sequence[int] = (4,),
        dtype: str = "Float",
        unrecorded: int = 0,
        **fields: Any,
    ) -> Job:
        """Ranks of ``ranks`` (default: the group's members) entered ``op`` #seq and are still
        in it (``state`` "scheduled" or "started"; "completed": finished it). ``unrecorded``:
        Gloo send/recv ops on the group before it that the recorder counted (``op_id``) but
        did not write. ``fields``: any other entry field as torch writes it."""
        members = self._groups[group]
        if at_s is None:
            self._clock_s += STEP_S
            at_s = self._clock_s
        else:
            self._clock_s = max(self._clock_s, at_s)
        created = _ns(at_s)
        assert created is not None
        finished = state == "completed"
        for rank in members if ranks is None else ranks:
            entry: dict[str, Any] = {
                "record_id": len(self._entries[rank]),
                "pg_id": list(self._groups).index(group),
                "process_group": (group, self._descs[group]),
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq + unrecorded,
                "profiling_name": f"{self.backend}:{op}",
                "time_created_ns": created,
                "input_sizes": [list(sizes)],
                "input_dtypes": [dtype],
                "output_sizes": [list(sizes)],
                "output_dtypes": [dtype],
                "state": state,
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": finished,
                "timeout_ms": 600_000,
                "is_p2p": False,
                "thread_id": "1",
                "thread_name": "python",
                "frames": [
                    {"name": op, "filename": _C10D, "line": 2800},
                    {"name": "train_step", "filename": "train.py", "line": 42},
                ],
            }
            if self.backend == "gloo":
                entry["state"] = "scheduled"  # Gloo's entries never change state
            elif state == "started":
                entry["time_discovered_started_ns"] = created + 1_000_000
            elif finished:
                entry["time_discovered_completed_ns"] = created + 1_000_000
            self._entries[rank].append(entry | fields)
        return self

    def dump(self, rank: int) -> dict[str, Any]:
        """The rank's dump as torch writes it (FR format 2.10)."""
        entries = self._entries[rank]
        if self.backend == "gloo":  # every group under '', with the last one's ranks
            config = {"": {"name": "", "desc": "", "ranks": str(list(range(self.world)))}}
        else:
            config = {
                name: {"name": name, "desc": self._descs[name], "ranks": str(list(members))}
                for name, members in self._groups.items()
                if rank in members
            }
        status = {}
        for pg_id, name in enumerate(self._groups):
            mine = [e for e in entries if e["process_group"][0] == name]
            if mine:
                status[str(pg_id)] = {
                    "last_enqueued_collective": max(e["collective_seq_id"] for e in mine),
                    "last_started_collective": -1,
                    "last_completed_collective": max(
                        (e["collective_seq_id"] for e in mine if e["retired"]), default=0
                    ),
                }
        return {
            "version": "2.10",
            "pg_config": config,
            "comm_lib_version": "" if self.backend == "gloo" else "2.21.5",
            "pg_status": status,
            "entries": entries,
        }

    def dumps(self) -> DumpSet:
        """The dump set, read by the loader from the dumps (the missing ranks have none)."""
        results: list[ParsedDump | DumpFormatError]
        ranks = [r for r in range(self.world) if r not in self.missing]
        candidates = [
            Candidate(
                path=Path(f"rank_{r}"),
                rank=r,
                prefix="rank_",
                encoding="pickle",
                size_bytes=1_000,
                relative=f"rank_{r}",
            )
            for r in ranks
        ]
        results = [
            DumpFormatError(f"{c.path}: truncated")
            if c.rank in self.unreadable
            else parse_payload(self.dump(c.rank), "pickle", c)
            for c in candidates
        ]
        return build_dump_set(Path("built"), candidates, results)

    def facts(
        self,
        *,
        dumped_at_s: Mapping[int, float] | None = None,
        failed: Iterable[int] = (),
        failures: Sequence[Failure] = (),
        stacks: Mapping[int, Frames] | None = None,
    ) -> Facts:
        """The facts ``gather_facts`` computes from these dumps and: ``dumped_at_s`` (when
        each rank's dump was written, where known), ``failed`` (ranks that dumped because
        something failed there), the job's ``failures``, and each rank's main-thread
        ``stacks`` (innermost frame first: ``host()``, ``in_call()``)."""
        at_ns = {r: _ns(s) or 0 for r, s in (dumped_at_s or {}).items()}
        samples = {
            r: ProcessStacks(
                rank=r,
                pid=1000 + r,
                host="node0",
                source="py-spy-text",
                path=f"stacks/rank_{r}.txt",
                threads=(
                    ThreadStack(thread_id="1", name="MainThread", frames=frames, is_main=True),
                ),
            )
            for r, frames in sorted((stacks or {}).items())
        }
        stack_set = None
        if samples:
            stack_set = StackSet(
                directory="built", samples=tuple(samples.values()), by_rank=samples
            )
        return gather_facts(
            self.dumps(),
            dumped_at_ns=at_ns,
            failed_ranks=frozenset(failed),
            evidence=JobEvidence(failures=tuple(failures)),
            stacks=stack_set,
        )


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else T0_NS + round(seconds * 1e9)
