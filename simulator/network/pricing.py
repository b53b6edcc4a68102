"""Prices the collectives of one plan on one cluster, once each.

Owns the bridge between the plan's axes and the fabric model: for an axis (tp, cp+dp, ep, ...)
it takes every group of that axis from the placement (all of them run the collective at the same
time under a uniform plan) and asks the flow-level model (``clustersim.simulator.network.collectives``) or the closed
forms (``clustersim.simulator.network.analytic``) for the time, caching by (kind, size, axis). It owns no algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from clustersim.simulator.network import analytic
from clustersim.simulator.calibration.profile import CalibrationProfile
from clustersim.simulator.network.collectives import CollectiveCost, price_collective
from clustersim.simulator.plan.placement import Placement
from clustersim.topologies import Cluster

Fidelity = Literal["flow", "analytic"]


@dataclass
class CommPricer:
    """Cached collective times for one (cluster, placement, profile); built per simulation."""

    cluster: Cluster
    placement: Placement
    profile: CalibrationProfile
    fidelity: Fidelity = "flow"
    _cache: dict[tuple[str, float, str], float] = field(default_factory=dict)
    _details: dict[tuple[str, float, str], CollectiveCost] = field(default_factory=dict)

    def time(self, kind: str, size: float, axis: str) -> float:
        """Seconds for ``kind`` of ``size`` bytes on every group of ``axis`` at once."""
        if size <= 0:
            return 0.0
        key = (kind, float(size), axis)
        if key not in self._cache:
            self._cache[key] = self._price(kind, size, axis)
        return self._cache[key]

    def _price(self, kind: str, size: float, axis: str) -> float:
        groups = self.placement.groups(axis)
        if groups.shape[1] <= 1:
            return 0.0
        if self.fidelity == "analytic":
            return analytic.collective_time(kind, size, self._shape(groups[0]), self.cluster, self.profile)
        cost = price_collective(kind, size, groups.tolist(), self.cluster, self.profile)
        self._details[(kind, float(size), axis)] = cost
        return float(cost.time)

    def p2p_time(self, size: float, stage: int) -> float:
        """Seconds to send ``size`` bytes from stage ``stage`` to the next (all pipelines at once)."""
        if size <= 0 or self.placement.plan.pp <= 1:
            return 0.0
        key = ("send_recv", float(size), f"pp{stage}")
        if key not in self._cache:
            self._cache[key] = self._price_p2p(size, stage)
        return self._cache[key]

    def _price_p2p(self, size: float, stage: int) -> float:
        pp = self.placement.groups("pp")
        nxt = (stage + 1) % pp.shape[1]
        pairs = np.stack([pp[:, stage], pp[:, nxt]], axis=1)
        if self.fidelity == "analytic":
            same = pairs[0, 0] // self.cluster.nvlink_domain_size == pairs[0, 1] // self.cluster.nvlink_domain_size
            shape = analytic.GroupShape(size=2, per_domain=2 if same else 1)
            return analytic.collective_time("send_recv", size, shape, self.cluster, self.profile)
        cost = price_collective("send_recv", size, pairs.tolist(), self.cluster, self.profile)
        self._details[("send_recv", float(size), f"pp{stage}")] = cost
        return float(cost.time)

    def summary(self) -> list[dict[str, object]]:
        """Every distinct collective priced by the flow model: time, algorithm, bus bandwidth and
        its busiest link with that link's utilisation (all concurrent groups counted)."""
        rows = []
        for (kind, size, axis), cost in sorted(self._details.items()):
            link, util = cost.link_utilisation.peak() if cost.link_utilisation is not None else ("", 0.0)
            rows.append({"kind": kind, "axis": axis, "size_bytes": size, "time_s": cost.time,
                         "algorithm": cost.algorithm, "bus_bandwidth_gbs": cost.bus_bandwidth / 1e9,
                         "busiest_link": link, "busiest_link_utilisation": util})
        return rows

    def _shape(self, group: np.ndarray) -> analytic.GroupShape:
        domains = group // self.cluster.nvlink_domain_size
        per = int(np.max(np.unique(domains, return_counts=True)[1]))
        return analytic.GroupShape(size=len(group), per_domain=per)
