"""Process groups of a pp x dp x tp device mesh, named and numbered the way torch does.

- The default group is named "0" with desc "default_pg" (pg_id 0 on every rank).
- Mesh groups are created dim by dim in mesh order ("pp", "dp", "tp"), skipping dims of size
  1, like `DeviceMesh._init_process_groups` (desc "mesh_<dim>").
- "counter" naming (`new_group`): every process calls new_group for every subgroup, so names
  are a global counter "1", "2", ...; "hashed" naming (`split_group`): sha1 of the member
  ranks plus the number of groups the process already has (`_hash_ranks_to_str`).
- pg_id is a per-process creation index (`ProcessGroupNCCL::local_id_`), counting only the
  groups the process is a member of.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from frsim.spec import JobSpec

MESH_DIMS = ("pp", "dp", "tp")


@dataclass(frozen=True, slots=True)
class Group:
    """One process group."""

    gid: int
    """Index in `Mesh.groups` (simulator-internal, not a torch id)."""
    axis: str
    name: str
    desc: str
    ranks: tuple[int, ...]
    """Global ranks in group-rank order."""


class Mesh:
    """Groups of a job and each rank's view of them."""

    def __init__(self, spec: JobSpec) -> None:
        self.world = spec.world_size
        self.tp, self.pp, self.dp = spec.tp, spec.pp, spec.dp_size
        self.axes: tuple[str, ...] = (
            "world",
            *tuple(d for d in MESH_DIMS if spec.axis_size(d) > 1),
        )
        grid = np.arange(self.world).reshape(self.pp, self.dp, self.tp)
        groups = [Group(0, "world", "0", "default_pg", tuple(range(self.world)))]
        counter = 1
        for created, dim in enumerate(self.axes[1:], start=1):
            index = MESH_DIMS.index(dim)
            for row in np.swapaxes(grid, -1, index).reshape(-1, spec.axis_size(dim)):
                ranks = tuple(int(r) for r in row)
                if spec.group_naming == "hashed":
                    key = "_".join(map(str, ranks)) + f"_{created}"
                    name = hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()
                else:
                    name = str(counter)
                counter += 1
                groups.append(Group(len(groups), dim, name, f"mesh_{dim}", ranks))
        self.groups: tuple[Group, ...] = tuple(groups)
        self._by_axis = {
            axis: {r: g for g in self.groups if g.axis == axis for r in g.ranks}
            for axis in self.axes
        }

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_index, dp_index, tp_index) of a global rank."""
        return rank // (self.dp * self.tp), (rank // self.tp) % self.dp, rank % self.tp

    def stage(self, rank: int) -> int:
        """Pipeline stage of a global rank."""
        return rank // (self.dp * self.tp)

    def stage_ranks(self, stage: int) -> range:
        """Global ranks of a stage, in (dp, tp) order."""
        width = self.dp * self.tp
        return range(stage * width, (stage + 1) * width)

    def group(self, rank: int, axis: str) -> Group:
        """The group of `axis` that `rank` belongs to."""
        return self._by_axis[axis][rank]

    def pg_id(self, axis: str) -> int:
        """Per-process pg_id of the `axis` group (the same on every rank)."""
        return self.axes.index(axis)

    def local_rank(self, rank: int, axis: str) -> int:
        """Group rank of `rank` in its `axis` group."""
        if axis == "world":
            return rank
        pp_i, dp_i, tp_i = self.coords(rank)
        return {"pp": pp_i, "dp": dp_i, "tp": tp_i}[axis]

    def member_groups(self, rank: int) -> list[Group]:
        """Groups `rank` belongs to, in pg_id order."""
        return [self.group(rank, axis) for axis in self.axes]
