"""Who is who in a job's logs: a rank is read from a file's name or folder, or from a line's
prefix, only where a launcher's convention says it is one, and only inside the job.

A number in a log's name is often not a rank: ``slurm-12994.out`` is SLURM's job id, Ray's
``worker-<id>-<job>-<pid>.out`` ends in a pid, a pod's index is a rank only where the
training operator made it one. So a file (``file_ranks``) names a rank only by one of these:

* **torchrun ``--log-dir``**: ``<run>/attempt_<n>/<local rank>/stdout.log|stderr.log|
  error.json``. The folder is the *local* rank; it is the job's rank only where that attempt
  folder holds the whole job (as many local ranks as the job has: one node).
* **A name that says rank**: ``rank_3.log``, ``train-rank3.err``, ``log.rank-3.txt``, Open
  MPI ``--output-filename``'s ``<dir>/1/rank.3/stdout``.
* **SLURM ``%t`` (and any per-task file pattern)**: files named alike but for one number,
  whose numbers are exactly ``0..n-1`` for the job's ``n`` ranks (``out_0.log`` ...
  ``out_3.log``); a lone ``slurm-12994.out`` names nobody.
* **Kubernetes**: PyTorchJob pods ``<job>-master-0`` (rank 0) and ``<job>-worker-<i>`` (rank
  ``i + 1`` where there is a master, else ``i``: the training operator sets ``RANK`` so);
  Indexed Job pods ``<job>-<index>-<suffix>`` (the completion index); ``kubectl logs`` saved
  as ``<pod>.log``. Only where the job ran one rank per pod: as many pods as ranks.
* **Ray Train**: ``session_*/logs/worker-<id>[-<job>]-<pid>.out|.err`` carry a pid, never a
  rank: the rank is the one Ray's own table gives that pid (``- (ip=..., pid=7410)
  world_rank=0, local_rank=0, node_rank=0``, or ``rank=0`` before Ray 2.43), else nobody.

And a line (``LineRanks``) only by these prefixes: torchrun ``--tee``'s ``[default3]:`` (a
local rank: the job's only where the file shows the whole job), c10d's ``[rank3]:`` (global),
``srun -l``'s ``3: `` (the task id), Open MPI ``--tag-output``'s ``[1,3]<stdout>:`` (job,
rank), and Ray's ``(RayTrainWorker pid=7410[, ip=...])`` (the rank from Ray's table). A
rank outside ``[0, world)`` is nobody, from any of them. A file or line that names nobody is
still read: its failures are of "a rank" (``Failure.rank`` None).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

__all__ = ["LineRanks", "file_ranks", "inside", "ray_ranks", "ray_worker_pid"]

_STD_FILE = frozenset({"stdout.log", "stderr.log", "error.json"})
_ATTEMPT = re.compile(r"^attempt_\d{1,6}$")
_SAYS_RANK = re.compile(r"(?i)(?:^|[-_.])rank[-_]?(\d{1,7})(?=$|[-_.])")
_NUMBER = re.compile(r"\d+")
_LOCAL_RANK = re.compile(r"[0-9]{1,7}")  # torchrun --log-dir: attempt_<N>/<local rank>/
_POD = re.compile(r"^(?P<job>.+)-(?P<role>master|worker)-(?P<i>\d{1,6})(?:\.log|\.txt)?$")
_INDEXED_POD = re.compile(r"^(?P<job>.+)-(?P<i>\d{1,6})-[a-z0-9]{5}(?:\.log|\.txt)?$")
_RAY_WORKER = re.compile(r"^worker-[0-9a-f]{8,}(?:-[0-9a-f]{8})?-(?P<pid>\d{1,9})\.(?:out|err)$")
_RAY_SESSION = re.compile(r"^session_\d{4}-\d\d-\d\d_")
# Ray's table of its workers (Ray Train: "Started (distributed worker processes|training
# worker group...)"), one line a worker: "- (ip=10.0.59.242, pid=7410) rank=0, ..." or
# "- (node_id=..., ip=127.0.0.1, pid=55616) world_rank=0, local_rank=0, node_rank=0"
_RAY_TABLE = re.compile(
    r"- \((?:node_id=[0-9a-f]+, )?ip=(?P<ip>[^,()\s]+), pid=(?P<pid>\d{1,9})\) "
    r"(?:world_)?rank=(?P<rank>\d{1,7}), local_rank="
)
_RAY_PREFIX = re.compile(
    r"^\((?:RayTrainWorker|TrainTrainable|BaseWorkerMixin)(?: pid=(?P<pid>\d{1,9}))"
    r"(?:, ip=(?P<ip>[^)\s]+))?\)\s?"
)
# Open MPI (PRRTE) --output tag: "[job,rank]<stdout>:", tag-detailed adds "[host:pid]"
_MPI_TAG = re.compile(
    r"^\[[^,\]\s]{1,100},(?P<n>\d{1,7})\](?:\[[^\]\s]{1,200}\])?<std(?:out|err|diag)>:\s?"
)
_RANK_FOLDER = re.compile(r"(?i)^rank[._-]?(\d{1,7})$")  # Open MPI --output-filename DIR/1/rank.3/


def inside(rank: int | None, world: int | None) -> int | None:
    """``rank`` where it is one of the job's (``0 <= rank < world``), else None."""
    if rank is None or rank < 0 or (world is not None and rank >= world):
        return None
    return rank


def ray_worker_pid(relative: str) -> int | None:
    """The pid in a Ray worker log's name (``worker-<id>-<job>-<pid>.out``), else None."""
    m = _RAY_WORKER.match(PurePosixPath(relative).name)
    return None if m is None else int(m["pid"])


def ray_ranks(texts: Iterable[str]) -> dict[int, int]:
    """pid -> rank from Ray's table of its workers in any of ``texts``; a pid given two ranks
    (two jobs, a reused pid) is left out."""
    seen: dict[int, set[int]] = defaultdict(set)
    for text in texts:
        if "pid=" not in text:
            continue
        for m in _RAY_TABLE.finditer(text):
            seen[int(m["pid"])].add(int(m["rank"]))
    return {pid: next(iter(r)) for pid, r in seen.items() if len(r) == 1}


def _family(name: str) -> tuple[str, int] | None:
    """(the name with its one number replaced by ``#``, that number), for a name with exactly
    one run of digits in it."""
    found = _NUMBER.findall(name)
    if len(found) != 1 or len(found[0]) > 7:
        return None
    return _NUMBER.sub("#", name), int(found[0])


def file_ranks(
    relatives: Sequence[str], world: int | None, ray: dict[int, int] | None = None
) -> dict[str, int | None]:
    """Each log's or error file's rank by the conventions above (None: it names nobody);
    ``world``: the job's ranks where known; ``ray``: pid -> rank from Ray's tables."""
    out: dict[str, int | None] = {}
    attempt_size: dict[str, set[str]] = defaultdict(set)
    families: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    pods: dict[tuple[str, str], list[tuple[str, str, int]]] = defaultdict(list)
    indexed: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for rel in relatives:
        path = PurePosixPath(rel)
        parts = path.parts
        out[rel] = None
        if any(_RAY_SESSION.match(p) for p in parts[:-1]) or ray_worker_pid(rel) is not None:
            pid = ray_worker_pid(rel)
            out[rel] = inside((ray or {}).get(pid) if pid is not None else None, world)
            continue
        if (
            len(parts) >= 3
            and path.name in _STD_FILE
            and _LOCAL_RANK.fullmatch(parts[-2]) is not None
            and _ATTEMPT.match(parts[-3])
        ):
            attempt_size["/".join(parts[:-2])].add(parts[-2])
            continue
        stem = path.name.split(".", 1)[0] if not path.name.startswith(".") else path.name
        m = _SAYS_RANK.search(stem) or (_RANK_FOLDER.match(parts[-2]) if len(parts) > 1 else None)
        if m is not None:
            out[rel] = inside(int(m[1]), world)
            continue
        folder = "/".join(parts[:-1])
        if (m := _POD.match(path.name)) is not None:
            pods[(folder, m["job"])].append((rel, m["role"], int(m["i"])))
            continue
        if (m := _INDEXED_POD.match(path.name)) is not None:
            indexed[(folder, m["job"])].append((rel, int(m["i"])))
            continue
        if (fam := _family(path.name)) is not None:
            families[(folder, fam[0])].append((rel, fam[1]))
    # torchrun: local ranks, the job's where the run's attempt folders (one per host where the
    # folder was gathered per host) hold each of the job's ranks once
    runs: dict[str, list[set[str]]] = defaultdict(list)
    for key, numbers in attempt_size.items():
        runs[key_of(key)].append(numbers)
    for rel in relatives:
        parts = PurePosixPath(rel).parts
        key = "/".join(parts[:-2])
        if key in attempt_size:
            out[rel] = inside(int(parts[-2]), world) if _whole(runs[key_of(key)], world) else None
    for members in families.values():  # SLURM %t and alike: exactly 0..n-1, the job's n
        task_ids = sorted({n for _, n in members})
        dense = len(members) == len(task_ids) >= 2 and task_ids == list(range(len(task_ids)))
        if dense and (world is None or len(task_ids) == world):
            out.update({rel: inside(n, world) for rel, n in members})
    for members3 in pods.values():  # PyTorchJob: master-0 is 0, worker-i is i + 1
        master = any(role == "master" for _, role, _ in members3)
        ranks = {rel: (i if role == "master" or not master else i + 1) for rel, role, i in members3}
        if _one_rank_each(list(ranks.values()), world):
            out.update({rel: inside(r, world) for rel, r in ranks.items()})
    for members2 in indexed.values():  # Indexed Job: the completion index
        ranks = dict(members2)
        if _one_rank_each(list(ranks.values()), world):
            out.update({rel: inside(r, world) for rel, r in ranks.items()})
    return out


def key_of(attempt_folder: str) -> str:
    """``<run>/attempt_<N>``: the same attempt of one run, whichever host's folder holds it."""
    return "/".join(attempt_folder.split("/")[-2:])


def _whole(folders: list[set[str]], world: int | None) -> bool:
    """Whether one run's attempt folders number the job's ranks: each rank once over them."""
    numbers = [int(n) for f in folders for n in f]
    return world is None or sorted(numbers) == list(range(world))


def _one_rank_each(ranks: list[int], world: int | None) -> bool:
    """Whether files numbered ``ranks`` are one per rank of the whole job: ``0..n-1``, with
    ``n`` the job's ranks where known."""
    return sorted(ranks) == list(range(len(ranks))) and (world is None or len(ranks) == world)


@dataclass(slots=True)
class LineRanks:
    """Reads a line's rank from its launcher's prefix (see the module docstring)."""

    world: int | None = None
    ray: dict[int, int] = field(default_factory=dict)
    local_is_global: bool = True  # torchrun --tee's local ranks are the job's (one node)

    @classmethod
    def of_file(
        cls, lines: Sequence[str], tee: re.Pattern[str], world: int | None, ray: dict[int, int]
    ) -> LineRanks:
        """The conventions for one file: its ``--tee`` prefixes name the job's ranks where
        the file shows as many local ranks as the job has (or the job's size is unknown)."""
        found = (tee.match(ln) for ln in lines[:20000])
        local = {m["n"] for m in found if m is not None and m["who"] != "rank"}
        whole = world is None or not local or len(local) == world
        return cls(world=world, ray=ray, local_is_global=whole)

    def tee(self, n: int) -> int | None:
        """A ``[default3]:`` prefix's rank."""
        return inside(n, self.world) if self.local_is_global else None

    def prefix(self, line: str) -> tuple[bool, int | None, str]:
        """(whether a Ray or MPI prefix was found, its rank or None, the rest of the line)."""
        if line.startswith("(") and (m := _RAY_PREFIX.match(line)) is not None:
            rank = self.ray.get(int(m["pid"])) if m["pid"] else None
            return True, inside(rank, self.world), line[m.end() :]
        if line.startswith("[") and (m := _MPI_TAG.match(line)) is not None:
            return True, inside(int(m["n"]), self.world), line[m.end() :]
        return False, None, line
