"""HangBench's cases: a declarative list, each a real multi-process job and its truth.

A case is a fault (``FAULTS``: what goes wrong, and how: its variant) injected into a training
job of one mechanism (``MECHANISMS``), started by one launcher (``LAUNCHERS``), its evidence
captured one way (``CAPTURES``) and left in one kind of folder (``FOLDERS``). The truth of each
case follows from how it is built, never from an analyzer: the culprit ranks are the ranks that
run the faulty code, ``where`` is the function that code blocks in (``None`` where the culprit
is gone or blocked nowhere of its own), the waiting ranks are every other rank of a hung job.

``train.py`` (what every rank runs) and ``harness.py`` (what starts, captures and stops a job)
read this table; ``generate.py`` runs the cases and writes ``corpus/MANIFEST.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

# The fault kinds, with their variants: (what the faulty code does, where the culprit is as its
# stack shows it, whether that is host code of its own, whether the job hangs).
FAULTS: dict[str, dict[str, tuple[str, str | None, bool, bool]]] = {
    "host_code": {
        "poll": ("polls for a file nobody writes (time.sleep loop)", "wait_for_file", True, True),
        "lock": ("waits on a lock a thread never releases", "refresh_vocab", True, True),
        "subprocess": ("runs a sync command that never returns", "sync_to_bucket", True, True),
    },
    "data_loading": {
        "fifo": ("reads a shard whose file never delivers (a FIFO)", "read_shard", True, True),
        "socket": ("fetches a batch from a server that never answers", "fetch_remote", True, True),
        "worker": (
            "its DataLoader worker blocks reading a sample; the rank waits on it",
            "batches",  # (the generator iterating the DataLoader: the innermost frame of ours)
            True,
            True,
        ),
    },
    "checkpoint_io": {
        "torch_save": (
            "rank 0's torch.save blocks on the file system",
            "save_checkpoint",
            True,
            True,
        ),
        "shard": ("its shard write blocks on the file system", "write_shard", True, True),
        "dcp_upload": ("its DCP storage writer's upload blocks", "upload_shard", True, True),
    },
    "exception": {
        "uncaught": ("raises on a corrupt sample and exits", "decode_sample", False, True),
        "caught_skip": (
            "catches a corrupt sample and skips the step: its next checkpoint barrier meets "
            "the others' next step",
            "save_checkpoint",
            False,
            True,
        ),
    },
    "dead": {
        "sigkill": ("is killed (SIGKILL, as by the OOM killer)", None, False, True),
        "segv": ("segfaults in a native call", None, False, True),
        "exit": ("a library calls os._exit", None, False, True),
    },
    "op_kind": {
        "reduce": ("rank 0 calls reduce where the others all_reduce", "log_metrics", False, True),
        "uneven": ("its data shard is one batch short: it leaves the loop", "finish", False, True),
        "broadcast": ("broadcasts where the others all_reduce", "log_metrics", False, True),
    },
    "op_size": {
        "small": (  # (Gloo: the shorter side's all_reduce returns, it runs ahead to the next)
            "its metrics tensor is shorter (4 vs 8)",
            "sync_groups",
            False,
            True,
        ),
        "large": (  # (Gloo aborts the peers that receive more than they expect)
            "its metrics tensor is longer (256 vs 8)",
            None,
            False,
            True,
        ),
    },
    "op_dtype": {
        "f64": ("its metrics tensor is float64 (others float32)", "log_metrics", False, True),
    },
    "op_order": {
        "swap": ("enters two groups' collectives in the other order", "sync_groups", False, True),
    },
    "op_group": {
        "world": (
            "passes the world group where the others pass a subgroup",
            "sync_groups",
            False,
            True,
        ),
    },
    "group_creation": {
        "swap": ("creates its process groups in another order", "make_groups", False, True),
    },
    "stuck_inside": {
        "sigstop": ("is frozen (SIGSTOP) inside a collective", "log_metrics", False, True),
    },
    "frozen": {
        "sigstop": ("is frozen (SIGSTOP) in host code", "flush_logs", True, True),
    },
    "p2p": {
        "ring": ("never posts its recv of a ring exchange", None, False, True),
        "pp_exception": ("a pipeline stage's forward raises", "decode_sample", False, True),
        "pp_stall": ("a pipeline stage stalls in host code", "wait_for_file", True, True),
    },
    "two_threads": {
        "heartbeat": ("a thread of its own calls barrier on the group", "heartbeat", False, True),
        "metrics": (
            "a metrics thread all_reduces on the training group",
            "report_metrics",
            False,
            True,
        ),
    },
    "straggler": {
        "slow_io": ("reads every batch 150 ms late: slow, not hung", "read_shard", True, False),
    },
    "healthy": {
        "none": ("nothing is wrong", None, False, False),
    },
}

MECHANISMS: dict[str, str] = {
    "plain": "a hand-written loop: gradients all_reduced by hand",
    "ddp": "DistributedDataParallel",
    "fsdp2": "FSDP2 (fully_shard on a 1-D mesh)",
    "tp": "tensor parallel (parallelize_module, 2-D mesh dp x tp) with a dp gradient all_reduce",
    "pp": "pipeline parallel (torch.distributed.pipelining, GPipe) and a grad-norm all_reduce",
    "dcp": "DDP with torch.distributed.checkpoint save every 2 steps (and load on start)",
    "dataloader": "DDP fed by a DataLoader with worker processes",
    "compile": "torch.compile(backend='aot_eager') model, gradients all_reduced by hand",
    "lightning": "PyTorch Lightning Trainer (strategy='ddp')",
    "accelerate": "HF Accelerate (Accelerator.prepare)",
}

LAUNCHERS: dict[str, str] = {
    "torchrun": "torchrun --log-dir logs --redirects 3 --tee 3 (console in torchrun.log)",
    "torchrun_restart": "torchrun --max-restarts 1: attempt 0 hangs elsewhere and is restarted",
    "slurm": "srun -l (emulated: srun is not installed; SLURM_* env, slurm-<job>.out)",
    "k8s": "a PyTorchJob: one torchrun pod per rank, each its own host (kubectl logs saved)",
    "ray": "Ray Train (emulated: Ray is not installed; its worker env and session logs)",
    "mpirun": "mpirun --tag-output (emulated: Open MPI is not installed; OMPI_* env)",
}

CAPTURES: dict[str, str] = {
    "signal": "frtrace.recorder in the job; the operator sends SIGUSR1 to every live rank",
    "exception": "frtrace.recorder; nobody acts: ranks dump when their timed-out op raises",
    "collect": "frtrace.recorder in the job; `frtrace collect DIR` (py-spy + recorder) on it",
    "store": "torch's debug server in the job; `frtrace collect DIR --store HOST:PORT`",
    "periodic": "torch's debug server writing stacks every second; the recorder on timeouts",
    "watch_env": "FRTRACE_WATCH and torch's dump path in the environment (no code change)",
    "watch_api": "frtrace.recorder.enable(DIR, watch=4): the job watches itself",
    "watchdog": "torch's own watchdog dump on timeout (NCCL; Gloo from torch 2.15)",
}

FOLDERS: dict[str, str] = {
    "one_host": "the folder as the job left it, one host",
    "hosts": "two hosts, the second's clock 3 minutes ahead; one sub-folder per host",
    "copies": "the dumps gathered twice: the same bytes in two places",
    "compressed": "an upload to object storage: every file gzipped on its own under a prefix",
}

TORCH_VERSIONS = {
    "2.13": "installed: every generated case",
    "2.8": "not installed",
    "2.15": "not installed",
}


@dataclass(frozen=True)
class Case:
    fault: str
    variant: str
    mechanism: str
    launcher: str = "torchrun"
    capture: str = "signal"
    folder: str = "one_host"
    world: int = 4
    culprits: tuple[int, ...] = (2,)
    fault_step: int = 3
    steps: int = 6
    torch: str = "2.13"
    why_not: str = ""  # not empty: the spec only, not generated, and why

    @property
    def name(self) -> str:
        parts = [f"{self.fault}_{self.variant}", self.mechanism, self.launcher, self.capture]
        if self.folder != "one_host":
            parts.append(self.folder)
        if self.torch != "2.13":
            parts.append(f"torch{self.torch}")
        return "-".join(parts).replace("healthy_none", "healthy")

    @property
    def generated(self) -> bool:
        return not self.why_not

    @property
    def hangs(self) -> bool:
        return FAULTS[self.fault][self.variant][3]

    @property
    def long_timeout(self) -> bool:
        """Nothing may time out before the capture (the harness captures a live job)."""
        return self.capture not in ("exception", "periodic")

    def truth(self) -> dict[str, object]:
        what, where, host, hangs = FAULTS[self.fault][self.variant]
        others = [r for r in range(self.world) if r not in self.culprits]
        truth: dict[str, object] = {
            "verdict": "hang" if hangs else "healthy",
            "culprit_ranks": list(self.culprits) if hangs else [],
            "waiting_ranks": others if hangs else [],
            "straggler_ranks": list(self.culprits) if self.fault == "straggler" else [],
            "where": where,
            "culprit_in_host_code": host,
            "what": f"rank(s) {', '.join(map(str, self.culprits))} {what}" if hangs else what,
        }
        return truth


def _c(fault: str, variant: str, mechanism: str, *rest: str, **kw: object) -> Case:
    """A case: the launcher, capture and folder in that order where not the defaults."""
    keys = ("launcher", "capture", "folder")
    return Case(fault, variant, mechanism, **dict(zip(keys, rest, strict=False)), **kw)  # type: ignore[arg-type]


_NO_LIGHTNING = "PyTorch Lightning is not installed here"
_NO_ACCELERATE = "HF Accelerate is not installed here"
_NO_WATCHDOG = "Gloo has no dump on timeout before torch 2.15, and no GPU here runs NCCL"
_R0 = {"culprits": (0,)}
_NONE = {"culprits": ()}
_W8 = {"world": 8, "culprits": (5,)}

CASES: list[Case] = [
    # a rank never enters: host code
    _c("host_code", "poll", "plain"),
    _c("host_code", "lock", "ddp", "torchrun", "collect"),
    _c("host_code", "subprocess", "fsdp2", "torchrun", "exception"),
    _c("host_code", "poll", "tp", "torchrun", "watch_env"),
    _c("host_code", "poll", "compile", "slurm"),
    _c("host_code", "lock", "dcp", "k8s", "signal", "hosts", culprits=(1,)),
    _c("host_code", "poll", "ddp", "torchrun", "signal", "hosts", **_W8),
    _c("host_code", "poll", "plain", "torchrun_restart", culprits=(3,)),
    # data loading
    _c("data_loading", "fifo", "plain", culprits=(1,)),
    _c("data_loading", "socket", "ddp", "torchrun", "periodic"),
    _c("data_loading", "worker", "dataloader"),
    _c("data_loading", "worker", "dataloader", "torchrun", "collect", culprits=(3,)),
    _c("data_loading", "fifo", "fsdp2", "mpirun"),
    _c("data_loading", "socket", "tp", "torchrun", "store", culprits=(1,)),
    _c("data_loading", "fifo", "compile", "torchrun", "watch_api"),
    # checkpoint I/O
    _c("checkpoint_io", "torch_save", "ddp", **_R0),
    _c("checkpoint_io", "torch_save", "plain", "torchrun", "exception", **_R0),
    _c("checkpoint_io", "dcp_upload", "dcp"),
    _c("checkpoint_io", "dcp_upload", "dcp", "torchrun", "collect", "copies", culprits=(3,)),
    _c("checkpoint_io", "shard", "fsdp2", "slurm", culprits=(1,)),
    _c("checkpoint_io", "shard", "tp", "torchrun", "periodic"),
    _c("checkpoint_io", "dcp_upload", "dcp", "ray", culprits=(1,)),
    # an exception
    _c("exception", "uncaught", "plain"),
    _c("exception", "uncaught", "ddp", "torchrun", "exception", "compressed", culprits=(1,)),
    _c("exception", "uncaught", "fsdp2"),
    _c("exception", "uncaught", "dataloader", culprits=(1,)),
    _c("exception", "caught_skip", "plain", culprits=(3,)),
    _c("exception", "caught_skip", "ddp", "k8s"),
    _c("exception", "uncaught", "tp", "mpirun", culprits=(3,)),
    # a dead process
    _c("dead", "sigkill", "plain"),
    _c("dead", "segv", "ddp", "torchrun", "exception", culprits=(1,)),
    _c("dead", "sigkill", "fsdp2", "torchrun", "exception"),  # (Gloo: its peers error out)
    _c("dead", "exit", "tp", culprits=(3,)),
    _c("dead", "sigkill", "dcp", "torchrun_restart", culprits=(1,)),
    _c("dead", "segv", "compile", "ray"),
    _c("dead", "sigkill", "ddp", "slurm", "exception", culprits=(3,)),
    _c("dead", "sigkill", "plain", "torchrun", "signal", "hosts", culprits=(3,)),
    # ops that differ: kind
    _c("op_kind", "reduce", "plain", **_R0),
    _c("op_kind", "uneven", "ddp", culprits=(1,)),
    _c("op_kind", "uneven", "fsdp2", "torchrun", "exception"),
    _c("op_kind", "reduce", "tp", "torchrun", "collect", **_R0),
    _c("op_kind", "broadcast", "dataloader", "k8s", culprits=(3,)),
    _c("op_kind", "uneven", "dcp", "torchrun", "watch_env", culprits=(3,)),
    # size
    _c("op_size", "small", "plain", culprits=(3,)),
    _c("op_size", "large", "ddp"),
    _c("op_size", "small", "fsdp2", "slurm", culprits=(1,)),
    _c("op_size", "large", "tp", "torchrun", "exception", culprits=(3,)),
    _c("op_size", "small", "compile", "torchrun", "collect", "copies"),
    # dtype
    _c("op_dtype", "f64", "plain", culprits=(1,)),
    _c("op_dtype", "f64", "ddp", "torchrun", "exception"),  # (Gloo aborts a peer: no live job)
    _c("op_dtype", "f64", "fsdp2", "mpirun", "exception", culprits=(3,)),
    _c("op_dtype", "f64", "tp", "torchrun", "signal", "compressed"),
    # order
    _c("op_order", "swap", "tp", culprits=(1,)),
    _c("op_order", "swap", "plain", culprits=(3,)),
    _c("op_order", "swap", "ddp", "torchrun", "exception"),
    _c("op_order", "swap", "fsdp2", "torchrun", "collect", culprits=(1,)),
    # group
    _c("op_group", "world", "plain"),
    _c("op_group", "world", "tp", culprits=(3,)),
    _c("op_group", "world", "ddp", "torchrun", "watch_api", "copies", culprits=(1,)),
    _c("op_group", "world", "fsdp2", "k8s"),
    # group creation order
    _c("group_creation", "swap", "plain", culprits=(1,)),
    _c("group_creation", "swap", "ddp", "torchrun", "exception"),
    _c("group_creation", "swap", "tp", culprits=(3,)),
    # stuck inside a collective
    _c("stuck_inside", "sigstop", "plain"),
    _c("stuck_inside", "sigstop", "ddp", "torchrun", "collect", culprits=(1,)),
    _c("stuck_inside", "sigstop", "fsdp2", "torchrun", "watch_env", culprits=(3,)),
    # frozen
    _c("frozen", "sigstop", "plain", "torchrun", "collect", "compressed", culprits=(1,)),
    _c("frozen", "sigstop", "ddp"),
    _c("frozen", "sigstop", "tp", culprits=(3,)),
    _c("frozen", "sigstop", "dcp", "slurm", "exception"),
    # p2p and pipeline stages
    _c("p2p", "pp_exception", "pp"),
    _c("p2p", "pp_stall", "pp", "torchrun", "collect", culprits=(1,)),
    _c("p2p", "ring", "plain"),
    _c("p2p", "ring", "ddp", "torchrun", "exception", culprits=(1,)),
    _c("p2p", "pp_exception", "pp", "mpirun", culprits=(1,)),
    # two threads on one group
    _c("two_threads", "heartbeat", "plain", **_R0),
    _c("two_threads", "metrics", "ddp", culprits=(3,)),
    _c("two_threads", "heartbeat", "fsdp2", "torchrun", "collect", **_R0),
    _c("two_threads", "metrics", "dataloader", "ray", culprits=(1,)),
    # a straggler, not a hang
    _c("straggler", "slow_io", "plain", culprits=(3,)),
    _c("straggler", "slow_io", "ddp", "torchrun", "collect", culprits=(1,)),
    _c("straggler", "slow_io", "fsdp2", "torchrun", "store"),
    _c("straggler", "slow_io", "tp", "slurm", culprits=(3,)),
    # a healthy job
    _c("healthy", "none", "plain", **_NONE),
    _c("healthy", "none", "ddp", "torchrun", "collect", "hosts", **_NONE),
    _c("healthy", "none", "fsdp2", "k8s", **_NONE),
    _c("healthy", "none", "dcp", "torchrun", "store", **_NONE),
    _c("healthy", "none", "dataloader", "mpirun", **_NONE),
    _c("healthy", "none", "compile", **_NONE),
    _c("healthy", "none", "tp", "ray", **_NONE),
    # written down, not generated (why_not says why)
    _c("host_code", "poll", "lightning", why_not=_NO_LIGHTNING),
    _c("exception", "uncaught", "lightning", why_not=_NO_LIGHTNING),
    _c("data_loading", "fifo", "accelerate", why_not=_NO_ACCELERATE),
    _c("op_kind", "uneven", "accelerate", why_not=_NO_ACCELERATE),
    _c("host_code", "poll", "ddp", "torchrun", "watchdog", why_not=_NO_WATCHDOG),
    _c("dead", "sigkill", "ddp", "torchrun", "watchdog", why_not=_NO_WATCHDOG),
    _c("host_code", "poll", "ddp", torch="2.8", why_not="torch 2.8 is not installed"),
    _c("op_kind", "reduce", "plain", torch="2.15", why_not="torch 2.15 is not installed"),
]

BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "two cases with one name"
