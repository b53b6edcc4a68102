"""Rank placement: which device runs which rank, and the process groups of every axis.

Owns the mapping of the plan's degrees onto device indices in the plan's ``order`` (tp fastest by
default, as in Megatron) and the groups of each axis as numpy arrays, so a 16,384-GPU cluster costs
a reshape, not a loop. The dense part uses axes tp, cp, dp, pp; the expert part uses etp, ep, edp,
pp over the same ranks (EP carved out of tp*cp*dp as in Megatron-Core). The expert mesh follows
the same ``order`` with tp read as etp, dp as edp and cp left out, as Megatron-Core's expert rank
generator does (megatron/core/parallel_state.py, ``initialize_model_parallel``:
``RankGenerator(tp=expert_tensor_parallel_size, ep=..., dp=expert_data_parallel_size, cp=1,
order=order)``): ``tp-cp-ep-dp-pp`` keeps an EP group on consecutive ranks (inside a node when it
fits), ``tp-cp-dp-ep-pp`` strides it over the expert data-parallel ranks (across nodes); an order
without ep places it before dp. Device ``i`` is ``gpu{i}`` of the cluster; servers are blocks of
``gpus_per_node`` consecutive devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan.plan import ParallelPlan

Axis = Literal["tp", "cp", "dp", "pp", "ep", "etp", "edp", "dp+cp", "tp+cp", "dp_shard", "dp_rep", "dp_hpz",
               "dp_local", "dp_across"]
"""The process-group axes collectives run on: a mesh axis, a joint axis (``dp+cp``: the DP
reduction with context parallelism; ``tp+cp``: one engine unit), the FSDP split of dp(*cp)
into shard groups (``dp_shard``) and replica groups (``dp_rep``, HSDP), or ZeRO++'s splits of a
shard group: hpZ's secondary groups (``dp_hpz``) and qgZ's two hops, the group's ranks inside one
node (``dp_local``) and those at the same place in every node (``dp_across``)."""
DENSE_AXES: tuple[str, ...] = ("tp", "cp", "dp", "pp")
EXPERT_AXES: tuple[str, ...] = ("etp", "ep", "edp", "pp")


@dataclass(frozen=True)
class Placement:
    """The rank -> device map of one plan, with groups by axis."""

    plan: ParallelPlan
    """The plan whose degrees are placed."""
    gpus_per_node: int
    """Devices per server, to say which groups stay inside a node."""

    @cached_property
    def dense_order(self) -> tuple[str, ...]:
        """Dense axes, fastest first, from ``plan.order`` (ep dropped)."""
        names = [a for a in self.plan.order.split("-") if a != "ep"]
        if sorted(names) != sorted(DENSE_AXES):
            raise PlanError(
                f"plan.order = {self.plan.order!r} must list each of tp, cp, dp, pp once (ep optional)"
            )
        return tuple(names)

    @cached_property
    def expert_order(self) -> tuple[str, ...]:
        """Expert axes, fastest first: ``plan.order`` with tp -> etp, dp -> edp, cp dropped (module
        docstring); ep before dp when the order does not name it."""
        names = list(self.plan.order.split("-"))
        if "ep" not in names:
            names.insert(names.index("dp"), "ep")
        rename = {"tp": "etp", "dp": "edp", "ep": "ep", "pp": "pp"}
        return tuple(rename[a] for a in names if a != "cp")

    def sizes(self) -> dict[str, int]:
        """Degree of every axis, dense and expert."""
        p = self.plan
        return {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp, "etp": p.etp, "ep": p.ep, "edp": p.expert_dp}

    def _mesh(self, order: tuple[str, ...]) -> np.ndarray:
        sizes = self.sizes()
        shape = tuple(sizes[a] for a in reversed(order))
        return np.arange(self.plan.world_size).reshape(shape)

    def groups(self, axis: Axis) -> np.ndarray:
        """All groups of ``axis`` (or a joint axis like ``"cp+dp"``): shape (num_groups, size).

        ``dp_shard`` and ``dp_rep`` split dp*cp for ZeRO-3/FSDP: consecutive ranks form a shard group
        of ``plan.shard_degree``; ranks at the same shard index form a replica group (HSDP).
        """
        if axis in ("dp_hpz", "dp_local", "dp_across"):
            return self._shard_split(axis)
        if axis in ("dp_shard", "dp_rep"):
            shard = self.plan.shard_degree
            joint = self.groups("dp+cp" if self.plan.cp > 1 else "dp")
            dp = joint.reshape(-1, joint.shape[1] // shard, shard)
            return dp.reshape(-1, shard) if axis == "dp_shard" else dp.transpose(0, 2, 1).reshape(-1, dp.shape[1])
        names = axis.split("+")
        order = self.expert_order if any(a in ("etp", "ep", "edp") for a in names) else self.dense_order
        if any(a not in order for a in names):
            raise PlanError(f"unknown axis {axis!r}; use one of {sorted(set(DENSE_AXES + EXPERT_AXES))}")
        mesh = self._mesh(order)
        rev = list(reversed(order))
        dims = [rev.index(a) for a in reversed(names)]
        moved = np.moveaxis(mesh, dims, list(range(mesh.ndim - len(dims), mesh.ndim)))
        size = int(np.prod([self.sizes()[a] for a in names]))
        return moved.reshape(-1, size)

    def node_local_shard(self) -> int:
        """Ranks of a shard group (``dp_shard``) that share a server and are consecutive in it: the
        size of ZeRO++ qgZ's intra-node hop; 1 when the group's consecutive ranks sit on different
        servers (then every hop crosses nodes)."""
        return self._node_local_shard

    @cached_property
    def _node_local_shard(self) -> int:
        group = self.groups("dp_shard")[0]
        node = group // self.gpus_per_node
        local = int(np.sum(node == node[0]))
        rows = group.reshape(-1, local) // self.gpus_per_node if group.size % local == 0 else None
        return local if rows is not None and bool(np.all(rows == rows[:, :1])) else 1

    def _shard_split(self, axis: Axis) -> np.ndarray:
        """ZeRO++'s groups inside each shard group: consecutive ``plan.zero_hpz_partition_size`` ranks
        (``dp_hpz``), the node-local ranks (``dp_local``), or one per node-local slot across (``dp_across``)."""
        shard = self.groups("dp_shard")
        if axis == "dp_hpz":
            return shard.reshape(-1, self.plan.zero_hpz_partition_size)
        local = self.node_local_shard()
        split = shard.reshape(shard.shape[0], shard.shape[1] // local, local)
        return split.reshape(-1, local) if axis == "dp_local" else split.transpose(0, 2, 1).reshape(-1, split.shape[1])

    def coords(self, rank: int) -> dict[str, int]:
        """Dense coordinates (tp, cp, dp, pp) of ``rank``."""
        sizes = self.sizes()
        out: dict[str, int] = {}
        rest = rank
        for a in self.dense_order:
            out[a] = rest % sizes[a]
            rest //= sizes[a]
        return out

    def stage_ranks(self, stage: int) -> np.ndarray:
        """Every rank of pipeline stage ``stage``."""
        return self.groups("pp")[:, stage]

    def nodes_spanned(self, axis: Axis) -> int:
        """Servers touched by one group of ``axis`` (1 = stays on NVLink)."""
        g = self.groups(axis)[0]
        return len(set((g // self.gpus_per_node).tolist()))  # not np.unique: it imports numpy.ma

    def table(self, limit: int = 64) -> list[dict[str, int]]:
        """Rank -> device, server and coordinates, for printing the mapping."""
        rows = []
        for r in range(min(limit, self.plan.world_size)):
            rows.append({"rank": r, "device": r, "server": r // self.gpus_per_node, **self.coords(r)})
        return rows
