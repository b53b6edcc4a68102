"""Transfers that share the fabric over time: max-min fair rates, recomputed at every start and end.

Owns ``Transfer`` (one collective or p2p call as the flow-over-time model runs it: a latency, then
one aggregate flow per algorithm step), ``FabricLoad`` (other tenants' background load per link
class and degraded links, as capacity taken away) and ``FluidShare``, the fluid state of the
transfers in flight: start one, advance the clock, read each one's rate and the next completion.
It knows no SimPy (the engine turns completions into events, ``clustersim.simulator.step.engine``)
and prices nothing alone (``clustersim.simulator.network.collectives`` gives each step's links).

Model. A step of a collective is one aggregate flow ``i``: moving ``w`` bytes of work (the
collective's size, repeated, plus the pipeline fill) puts ``load[i, l] * w`` bytes on link ``l``
for every link its representative group crosses, the loads of every concurrent group that runs the
same call counted (symmetry: the representative pipeline's transfer stands for all its translates,
as the static pricing does). Concurrent flows share links max-min fairly
(``clustersim.simulator.network.flows.max_min_rates``) in units of each flow's speed alone: all
flows crossing a saturated link slow by the same factor, so two flows whose bottleneck is one
NIC each get half of it, as two flows of a fair NIC do. Alone, a flow's rate is
``min_l capacity_l / load_l``, so its time is ``w * beta`` of the static pricing: with nothing
overlapping the two agree exactly (a test). Bytes per link are conserved (each flow's
bytes on a link are its load times its work, however the rate varied) and no link carries more
than its capacity at any time (tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

import numpy as np

from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.network.flows import max_min_rates

TrafficClass = Literal["pp", "dp", "param_gather", "ep"]
"""What a transfer carries: pipeline activations/gradients, DP gradient buckets, ZeRO gathers, the
EP all-to-alls inside a pass."""
class FabricLoadError(ClusterSimError):
    """A background load or a degraded link that does not fit the fabric."""

    stage = "fabric load"


_DONE: float = 1e-9
"""Relative remaining work below which a flow counts as finished (float rounding)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Phase:
    """Latency, then one aggregate flow over fixed links."""

    delay: float
    """Seconds before the bytes move (software overhead and path latency)."""
    edges: np.ndarray
    """Directed link ids the flow crosses."""
    load: np.ndarray
    """Bytes on each of ``edges`` per byte of work."""
    work: float
    """Bytes of work to move (0: latency only)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Transfer:
    """One communication call as flows over time: its phases run one after another."""

    traffic: TrafficClass
    """The traffic class it is accounted under."""
    phases: tuple[Phase, ...]
    """Latency and flow of each algorithm step (and of each back-to-back copy)."""
    static_time: float
    """Seconds the static pricing gives it (alone on the fabric)."""

    def repeated(self, n: int) -> Transfer:
        """``n`` copies of this call back to back (buckets of one gather)."""
        return Transfer(traffic=self.traffic, phases=self.phases * n, static_time=self.static_time * n)


@dataclass(frozen=True, kw_only=True)
class FabricLoad:
    """Capacity other traffic takes away: background load per link class, degraded links."""

    background: Mapping[str, float] = field(default_factory=dict)
    """Link class (``nvlink``, ``nic``, ``leaf_spine``, ...: the graph's ``link_class``) -> fraction of
    its capacity used by other tenants, in [0, 1)."""
    degraded: Mapping[str, float] = field(default_factory=dict)
    """Directed link ``"u->v"`` -> fraction of its capacity left, in (0, 1] (a slow or flapping link;
    a failed NIC is its links at a tiny fraction)."""
    taken: np.ndarray | None = field(default=None, compare=False)
    """Per directed link id: the fraction of its capacity other jobs on the same cluster take, time
    averaged, in [0, 1) (``clustersim.simulator.step.colocate`` sets it)."""

    def capacity(self, capacity: np.ndarray, link_class: np.ndarray, edge_id: Mapping[tuple[str, str], int]) -> np.ndarray:
        """``capacity`` with the background load and the degradations applied (a new array)."""
        out = capacity.astype(float).copy()
        known = set(str(c) for c in link_class.tolist())  # not np.unique: it imports numpy.ma
        for cls, frac in self.background.items():
            if cls not in known:
                raise FabricLoadError(f"background load: link class {cls!r} is not in this fabric; use one of {sorted(known)}")
            if not 0.0 <= frac < 1.0:
                raise FabricLoadError(f"background load: {cls} = {frac}; use a fraction of capacity in [0, 1)")
            out[link_class == cls] *= 1.0 - frac
        for name, left in self.degraded.items():
            u, _, v = name.partition("->")
            if (u, v) not in edge_id:
                raise FabricLoadError(f"degraded link {name!r} is not a directed link of this fabric; name it 'u->v', e.g. 'gpu0->nic0'")
            if not 0.0 < left <= 1.0:
                raise FabricLoadError(f"degraded link {name}: {left}; use the fraction of capacity left, in (0, 1]")
            out[edge_id[(u, v)]] *= left
        if self.taken is not None:
            taken = np.asarray(self.taken, dtype=float)
            if taken.shape != out.shape or not np.all((taken >= 0) & (taken < 1)):
                raise FabricLoadError(f"taken: {taken.shape[0] if taken.ndim else 0} fractions in [0, 1) for a "
                                      f"fabric of {len(out)} links; give one per link id")
            out *= 1.0 - taken
        return out


@dataclass
class _Flow:
    """One flow in flight (mutable: its remaining work shrinks as the clock advances)."""

    edges: np.ndarray
    load: np.ndarray
    work: float
    remaining: float
    traffic: TrafficClass
    rate: float = 0.0
    alone: float = 0.0


class FluidShare:
    """Flows in flight on one fabric and their max-min fair rates (bytes of work per second)."""

    def __init__(self, capacity: np.ndarray) -> None:
        self.capacity = capacity
        self._flows: dict[int, _Flow] = {}
        self._users = np.zeros(len(capacity), dtype=np.int64)
        self._now = 0.0
        self._next_id = 0
        self.link_bytes = np.zeros(len(capacity))
        """Bytes carried per link so far (conservation: each flow adds load * work)."""
        self.lost: dict[str, float] = {}
        """Per traffic class: seconds its flows took beyond their time alone on the fabric."""
        self._alone: dict[int, float] = {}
        """Speed alone of each phase met (by identity: transfers are built once and reused)."""

    def start(self, now: float, phase: Phase, traffic: TrafficClass) -> int:
        """Add a flow at ``now``; returns its id. Rates of the flows it shares links with are recomputed."""
        self.advance(now)
        fid, self._next_id = self._next_id, self._next_id + 1
        f = _Flow(edges=phase.edges, load=phase.load, work=phase.work, remaining=phase.work, traffic=traffic)
        alone = self._alone.get(id(phase))
        if alone is None:
            alone = self._alone[id(phase)] = float(np.min(self.capacity[f.edges] / f.load)) if len(f.edges) else np.inf
        f.alone = alone
        shared = bool(self._users[f.edges].any())
        self._flows[fid] = f
        self._users[f.edges] += 1
        if shared:
            self._recompute()
        else:  # touches no busy link: the others keep their rates
            f.rate = f.alone
        return fid

    def finish(self, fid: int) -> None:
        """Remove a finished flow; the flows it shared links with get their rates recomputed."""
        f = self._flows.pop(fid)
        self._users[f.edges] -= 1
        self.link_bytes[f.edges] += f.load * f.work
        if self._users[f.edges].any():
            self._recompute()

    def advance(self, now: float) -> None:
        """Move the clock to ``now``: every flow moves rate * elapsed bytes."""
        dt = now - self._now
        if dt > 0:
            for f in self._flows.values():
                f.remaining = max(0.0, f.remaining - f.rate * dt)
                if f.alone < np.inf and f.rate < f.alone:
                    self.lost[f.traffic] = self.lost.get(f.traffic, 0.0) + dt * (1.0 - f.rate / f.alone)
        self._now = max(self._now, now)

    def next_end(self) -> tuple[float, int] | None:
        """(time, id) of the next flow to finish at the current rates; None when none is in flight."""
        best: tuple[float, int] | None = None
        for fid, f in self._flows.items():
            t = self._now + (0.0 if f.remaining <= _DONE * max(f.work, 1.0) else f.remaining / f.rate)
            if best is None or t < best[0]:
                best = (t, fid)
        return best

    def rate(self, fid: int) -> float:
        """Current rate of flow ``fid`` (bytes of work per second)."""
        return self._flows[fid].rate

    def rates(self) -> dict[int, float]:
        """Current rate of every flow in flight (bytes of work per second)."""
        return {fid: f.rate for fid, f in self._flows.items()}

    def link_rates(self) -> np.ndarray:
        """Bytes per second on every link now (never above its capacity)."""
        out = np.zeros(len(self.capacity))
        for f in self._flows.values():
            np.add.at(out, f.edges, f.load * f.rate)
        return out

    def _recompute(self) -> None:
        """Max-min fair rates of every flow in flight, over the links they use."""
        ids = list(self._flows)
        flows = [self._flows[i] for i in ids]
        edges = np.concatenate([f.edges for f in flows])
        used, link = np.unique(edges, return_inverse=True)
        owner = np.repeat(np.arange(len(flows)), [len(f.edges) for f in flows])
        speed = np.array([f.alone for f in flows])
        frac = np.concatenate([f.load * f.alone for f in flows])  # bytes/s on each link at full speed
        shares = max_min_rates(owner, link.ravel(), frac, self.capacity[used], np.ones(len(flows), dtype=bool))
        for f, x, v in zip(flows, shares, speed):
            f.rate = float(min(x, 1.0) * v)
