"""The mechanisms a HangBench job trains with: each builds its model and knows one training
step (where its collectives are), its groups and its checkpoint. Tiny models: the point is
the collectives, not the arithmetic.

``build(run)`` returns a ``Job``. ``groups["a"]`` and ``groups["b"]`` are the two groups the
rank belongs to that ``train.sync_groups`` uses (a subgroup and a larger one), every
mechanism's own collectives run inside ``train_step``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def mlp(out: int = 1, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, out))


def pair_groups(run: Any) -> Any:
    """The rank's pair ([0, 1], [2, 3], ...): every rank creates every pair, in one order."""
    mine = None
    for first in range(0, run.world, 2):
        group = dist.new_group([first, first + 1], timeout=run.timeout)
        if run.rank in (first, first + 1):
            mine = group
    return mine


def average_gradients(model: nn.Module, group: Any = None) -> None:
    """The hand-written data-parallel step: every gradient summed in one flat all_reduce."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


class Job:
    """A plain loop: an MLP, its gradients all_reduced by hand."""

    kind = "plain"
    out = 1

    def __init__(self, run: Any) -> None:
        self.run = run
        self.model = self.make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.groups = {"a": pair_groups(run), "b": None}

    def make_model(self) -> nn.Module:
        return mlp(self.out)

    def train_step(self, x: Any, y: Any) -> float:
        loss = F.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        average_gradients(self.model)
        self.opt.step()
        return loss.item()

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict()}

    @property
    def saves_on_every_rank(self) -> bool:
        return False


class Compiled(Job):
    kind = "compile"

    def make_model(self) -> nn.Module:
        return torch.compile(mlp(self.out), backend="aot_eager")  # type: ignore[return-value]


class DDP(Job):
    kind = "ddp"

    def make_model(self) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(mlp(self.out))

    def train_step(self, x: Any, y: Any) -> float:
        loss = F.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()  # DDP all_reduces the gradient buckets here
        self.opt.step()
        return loss.item()


class DCP(DDP):
    kind = "dcp"

    @property
    def saves_on_every_rank(self) -> bool:
        return True


class Loaded(DDP):
    """DDP fed by a DataLoader with a worker process (``train.Samples``)."""

    kind = "dataloader"


class FSDP2(DDP):
    kind = "fsdp2"

    def make_model(self) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (self.run.world,))
        model = mlp(self.out)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    @property
    def saves_on_every_rank(self) -> bool:
        return True


class TP(Job):
    """Tensor parallel over tp=2 (column then row parallel), data parallel over dp=2."""

    kind = "tp"
    out = 8

    def __init__(self, run: Any) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh("cpu", (run.world // 2, 2), mesh_dim_names=("dp", "tp"))
        super().__init__(run)
        self.dp = self.mesh["dp"].get_group()
        self.groups = {"a": self.mesh["tp"].get_group(), "b": None}

    def make_model(self) -> nn.Module:
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
        return parallelize_module(mlp(self.out), self.mesh["tp"], plan)

    def train_step(self, x: Any, y: Any) -> float:
        loss = F.mse_loss(self.model(x), y)  # the row-parallel layer all_reduces over tp
        self.opt.zero_grad()
        loss.backward()
        grads = [p.grad.to_local() for p in self.model.parameters() if p.grad is not None]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=self.dp)  # data parallel over dp
        self.opt.step()
        return loss.item()

    @property
    def saves_on_every_rank(self) -> bool:
        return True


class Stage(nn.Module):
    def __init__(self, run: Any, block: nn.Module) -> None:
        super().__init__()
        self.run, self.block = run, block

    def forward(self, x: Any) -> Any:
        import train

        train.check_microbatch(self.run, x)  # (the stage's own checks: where faults strike)
        return self.block(x)


class PP(Job):
    """4 pipeline stages (one Linear each), GPipe over 4 microbatches, then the grad norm."""

    kind = "pp"
    out = 8

    def __init__(self, run: Any) -> None:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        self.run = run
        torch.manual_seed(100 + run.rank)
        self.model = Stage(run, nn.Sequential(nn.Linear(8, 8), nn.ReLU()))
        stage = PipelineStage(self.model, run.rank, run.world, torch.device("cpu"))
        self.schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=F.mse_loss)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.groups = {"a": pair_groups(run), "b": None}

    def train_step(self, x: Any, y: Any) -> float:
        self.opt.zero_grad()
        losses: list[Any] = []
        if self.run.rank == 0:
            self.schedule.step(x)
        elif self.run.rank == self.run.world - 1:
            self.schedule.step(target=y, losses=losses)
        else:
            self.schedule.step()
        norm = torch.stack([p.grad.norm() for p in self.model.parameters()]).square().sum()
        dist.all_reduce(norm.reshape(1))  # the global grad norm, for clipping
        self.opt.step()
        return float(sum(float(v) for v in losses) / 4) if losses else 0.0


MECHANISM_JOBS: dict[str, type[Job]] = {
    "plain": Job,
    "compile": Compiled,
    "ddp": DDP,
    "dcp": DCP,
    "dataloader": Loaded,
    "fsdp2": FSDP2,
    "tp": TP,
    "pp": PP,
}


def build(run: Any) -> Job:
    return MECHANISM_JOBS[run.case.mechanism](run)
