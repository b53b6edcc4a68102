"""Prices the collectives of one plan on one cluster, once each.

Owns the bridge between the plan's axes and the fabric model: for an axis (tp, cp+dp, ep, ...)
it takes every group of that axis from the placement (all of them run the collective at the same
time under a uniform plan) and asks the flow-level model (``clustersim.simulator.network.collectives``) or the closed
forms (``clustersim.simulator.network.analytic``) for the time, caching by (kind, size, axis); the
table of what it priced (``summary``) is the value lowering hands on to the Result. For the flows
over time (``clustersim.simulator.network.sharing``) it also builds each engine-stream call as a
``Transfer`` over the groups of one pipeline stage (``transfer``, ``p2p_transfer``). It owns no algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from clustersim.simulator.network import analytic
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.algorithms import CollectiveKind
from clustersim.simulator.network.collectives import CollectiveCost, CollectiveError, collective_steps, price_collective
from clustersim.simulator.network.routing import fabric_of
from clustersim.simulator.network.sharing import Phase, TrafficClass, Transfer
from clustersim.simulator.plan import Axis, Placement
from clustersim.topologies import Cluster

Fidelity = Literal["flow", "analytic"]
DEFAULT_FIDELITY: Fidelity = "flow"
"""The one prediction path: ``simulate``, ``validate``, the profile fit and the cross-validation
all price collectives with the flow-level model unless told otherwise, so a printed prediction,
its interval and the fitted profiles come from the same model (``analytic`` stays the search's
screening tier and an explicit option)."""
Direction = Literal["fwd", "bwd"]
"""A pipeline link's direction: ``fwd`` carries stage s -> s+1, ``bwd`` s+1 -> s."""
CollectiveRow = dict[str, object]
"""One row of the collectives table: kind, axis, size_bytes, time_s, algorithm, bus_bandwidth_gbs,
busiest_link, busiest_link_utilisation."""


@dataclass
class CommPricer:
    """Cached collective times for one (cluster, placement, profile); built per simulation."""

    cluster: Cluster
    placement: Placement
    profile: CalibrationProfile
    fidelity: Fidelity = DEFAULT_FIDELITY
    _cache: dict[tuple[str, float, str], float] = field(default_factory=dict)
    _details: dict[tuple[str, float, str], CollectiveCost] = field(default_factory=dict)
    _transfers: dict[tuple[str, float, str, int], Transfer] = field(default_factory=dict)

    def time(self, kind: CollectiveKind, size: float, axis: Axis) -> float:
        """Seconds for ``kind`` of ``size`` bytes on every group of ``axis`` at once."""
        if size <= 0:
            return 0.0
        key = (kind, float(size), axis)
        if key not in self._cache:
            self._cache[key] = self._price(kind, size, axis)
        return self._cache[key]

    def _price(self, kind: CollectiveKind, size: float, axis: Axis) -> float:
        groups = self.placement.groups(axis)
        if groups.shape[1] <= 1:
            return 0.0
        wait = self.profile.blocking_call_wait  # the rank blocks on the call after compute (0 unless measured)
        if self.fidelity == "analytic":
            return analytic.collective_time(kind, size, self._shape(groups[0]), self.cluster, self.profile) + wait
        cost = price_collective(kind, size, groups, self.cluster, self.profile)
        self._details[(kind, float(size), axis)] = cost
        return float(cost.time) + wait

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
            return analytic.collective_time("send_recv", size, shape, self.cluster, self.profile) + \
                self.profile.blocking_call_wait
        cost = price_collective("send_recv", size, pairs, self.cluster, self.profile)
        self._details[("send_recv", float(size), f"pp{stage}")] = cost
        return float(cost.time) + self.profile.blocking_call_wait

    def transfer(self, kind: CollectiveKind, size: float, axis: Axis, stage: int, traffic: TrafficClass) -> Transfer | None:
        """``kind`` of ``size`` bytes on the groups of ``axis`` inside pipeline stage ``stage`` (they
        run it at once), as a ``Transfer``; None when nothing moves (a group of one, size 0)."""
        key = (kind, float(size), axis, stage)
        if key not in self._transfers:
            groups = self.placement.groups(axis)
            if size <= 0 or groups.shape[1] <= 1:
                return None
            first_stage = self._stage_of()[groups[:, 0]]
            self.time(kind, size, axis)  # the selector's choice on the whole axis: the same algorithm runs
            chosen = self._details.get((kind, float(size), axis))
            algorithm = chosen.algorithm if chosen is not None else None
            self._transfers[key] = self._build(kind, size, groups[first_stage == stage], traffic, algorithm)
        return self._transfers[key]

    def p2p_transfer(self, size: float, stage: int, direction: Direction) -> Transfer | None:
        """The activation (``fwd``: stage -> stage+1) or gradient (``bwd``: stage+1 -> stage) send of
        every pipeline at once, as a ``Transfer``; None without pipeline parallelism."""
        if size <= 0 or self.placement.plan.pp <= 1:
            return None
        key = ("send_recv", float(size), f"pp-{direction}", stage)
        if key not in self._transfers:
            pp = self.placement.groups("pp")
            pairs = np.stack([pp[:, stage], pp[:, (stage + 1) % pp.shape[1]]], axis=1)
            fwd = self._build("send_recv", size, pairs, "pp", "direct")
            # the gradient goes back over the same links reversed: the send's loads on the reverse
            # edges (the static pricing gives both directions the forward time)
            self._transfers[key] = fwd if direction == "fwd" else _reversed(fwd, reverse_edges(self.cluster, self.profile))
        return self._transfers[key]

    def _build(self, kind: CollectiveKind, size: float, groups: np.ndarray, traffic: TrafficClass,
               algorithm: str | None) -> Transfer:
        time, delay, work, steps = collective_steps(kind, size, groups, self.cluster, self.profile, algorithm)
        phases = [Phase(delay=delay if i == 0 else 0.0, edges=st.edges, load=st.load, work=st.repeat * work)
                  for i, st in enumerate(steps)]
        return Transfer(traffic=traffic, phases=tuple(phases) or (Phase(delay=delay, edges=np.zeros(0, dtype=np.int64),
                                                                       load=np.zeros(0), work=0.0),),
                        static_time=float(time))

    def _stage_of(self) -> np.ndarray:
        """Pipeline stage of every rank."""
        pp = self.placement.groups("pp")
        out = np.empty(pp.size, dtype=np.int64)
        out[pp] = np.arange(pp.shape[1])[None, :]
        return out

    def summary(self) -> tuple[CollectiveRow, ...]:
        """Every distinct collective priced by the flow model: time, algorithm, bus bandwidth and
        its busiest link with that link's utilisation (all concurrent groups counted)."""
        rows: list[CollectiveRow] = []
        for (kind, size, axis), cost in sorted(self._details.items()):
            link, util = cost.link_utilisation.peak() if cost.link_utilisation is not None else ("", 0.0)
            rows.append({"kind": kind, "axis": axis, "size_bytes": size, "time_s": cost.time,
                         "algorithm": cost.algorithm, "bus_bandwidth_gbs": cost.bus_bandwidth / 1e9,
                         "busiest_link": link, "busiest_link_utilisation": util})
        return tuple(rows)

    def _shape(self, group: np.ndarray) -> analytic.GroupShape:
        domains = group // self.cluster.nvlink_domain_size
        per = int(np.max(np.unique(domains, return_counts=True)[1]))
        return analytic.GroupShape(size=len(group), per_domain=per)


def _reversed(transfer: Transfer, reverse: np.ndarray) -> Transfer:
    """``transfer`` with every flow on the reverse edges (the opposite direction of each link)."""
    phases = tuple(Phase(delay=p.delay, edges=reverse[p.edges], load=p.load, work=p.work) for p in transfer.phases)
    return Transfer(traffic=transfer.traffic, phases=phases, static_time=transfer.static_time)


def reverse_edges(cluster: Cluster, profile: CalibrationProfile) -> np.ndarray:
    """Per directed edge u->v, the id of v->u (the graph contract: every link is two directed edges)."""
    fabric = fabric_of(cluster, profile)
    if ("reverse_edges",) not in fabric.memo:
        n = len(fabric.nodes)
        fwd = np.asarray(fabric.src_of, dtype=np.int64) * n + np.asarray(fabric.dst_of, dtype=np.int64)
        back = np.asarray(fabric.dst_of, dtype=np.int64) * n + np.asarray(fabric.src_of, dtype=np.int64)
        order = np.argsort(fwd)
        pos = np.searchsorted(fwd[order], back)
        if not (fwd[order][np.minimum(pos, len(fwd) - 1)] == back).all():
            raise CollectiveError("a link of the fabric has no reverse edge; the graph contract wants two directed edges per link")
        fabric.memo[("reverse_edges",)] = order[pos]
    out = fabric.memo[("reverse_edges",)]
    assert isinstance(out, np.ndarray)
    return out
