"""Collective algorithms as steps of flows, priced on the fabric with every concurrent group.

Owns ``price_collective`` (the engine's entry point), ``CollectiveCost``, the algorithms (ring
with one channel per GPU of a node, double binary tree, recursive halving-doubling, hierarchical,
in-switch reduction (NVLS/SHARP), pairwise all-to-all, direct send/recv) and the NCCL-like
selector (of NCCL's algorithms, the one with the least modelled time wins, as NCCL's tuner
picks by its own cost model). It does not route (``clustersim.simulator.network.routing``), simulate flows over
time (``clustersim.simulator.network.flows``) nor decide which groups exist (``clustersim.simulator.plan.placement``).

Cost model: an algorithm is a list of steps; in a step every flow of every group runs at once.
With equal start times, the fluid (max-min) makespan of a step is exactly
``S * max_l(load_l / capacity_l)`` where ``load_l`` is bytes per byte of collective size; a
pipelined composite step (hierarchical, in-switch across nodes) uses the same link bound.
time = overhead + sum_steps repeat * (alpha_step + (S + min(S, F)) * beta_step), where alpha is
the path latency paid once per sequential hop and F = the profile's pipeline_fill_bytes (the first F bytes move
at half rate while the pipeline fills). beta uses the links of the representative (first) group;
for groups that are translates of each other this equals the global makespan (tested).
The per-step (alpha, beta) pattern does not depend on the size and is memoised per fabric, so a
sweep over sizes, or the engine's repeated calls, cost one arithmetic line each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.algorithms import ALGORITHMS, KINDS, SELECTABLE, CollectiveKind, Step, applicable, build_steps
from clustersim.simulator.network.algorithms import pairwise_flows
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.network.ecmp import hashed_loads
from clustersim.simulator.network.nccl_tuning import best_protocol
from clustersim.simulator.network.routing import Fabric, add_at, fabric_of

MEMO_LIMIT: int = 256
"""Patterns kept per fabric before the memo is emptied."""


class CollectiveError(ClusterSimError):
    """A collective request that cannot be priced (bad kind, groups or algorithm)."""

    stage = "collective"


@dataclass(frozen=True, kw_only=True)
class CollectiveCost:
    """Time and bandwidth of one collective call of the representative group."""

    time: float
    """Seconds from call to completion, software overhead included."""
    algorithm: str
    """Algorithm that was priced (chosen by the selector unless forced)."""
    bus_bandwidth: float
    """nccl-tests bus bandwidth (bytes/s): alg_bandwidth times the kind's bus factor."""
    alg_bandwidth: float
    """size / time (bytes/s)."""
    bytes_per_rank_sent: float
    """Mean bytes one rank of the representative group sends over links."""
    link_utilisation: LinkUtilisation | None = None
    """Per directed link ``"u->v"``: busy fraction over ``time`` with all groups' flows."""


@dataclass(frozen=True, kw_only=True)
class _Pattern:
    """Size-independent cost of one algorithm on one set of groups."""

    alpha: float
    """Sum over steps of repeat * latency (s)."""
    beta: float
    """Sum over steps of repeat * max link load / capacity (s per byte of size), representative."""
    beta_full: float
    """As ``beta`` but over every link (the global makespan)."""
    sent: float
    """Mean bytes sent per rank per byte of size."""
    loads: np.ndarray
    """Bytes per link per byte of size, summed over steps and repeats (all groups)."""
    steps: tuple[StepLoad, ...] = ()
    """Per step: the links its representative flows cross and their loads (for flows over time)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class StepLoad:
    """One step of an algorithm as the flow-over-time model sees it: one aggregate flow."""

    edges: np.ndarray
    """Directed links the representative group's flows cross."""
    load: np.ndarray
    """Bytes on each of ``edges`` per byte of collective size, every concurrent group counted."""
    repeat: int
    """Back-to-back runs of the step."""


class LinkUtilisation(Mapping[str, float]):
    """Lazy mapping from link name to utilisation (built only when read: most costs priced are
    options the selector drops, and a 16,384-GPU fabric has 106,496 links)."""

    def __init__(self, fabric: Fabric, loads: np.ndarray, size: float, time: float) -> None:
        self._fabric, self._loads, self._size, self._time = fabric, loads, size, time
        self._cols: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def _used(self) -> np.ndarray:
        return self._columns()[0]

    @property
    def _util(self) -> np.ndarray:
        return self._columns()[1]

    def _columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(links with load, utilisation of every link), computed on first read."""
        if self._cols is None:
            util = self._loads * self._size / (self._fabric.capacity * max(self._time, 1e-30))
            self._cols = (np.flatnonzero(self._loads > 0), util)
        return self._cols

    def __getitem__(self, name: str) -> float:
        u, _, v = name.partition("->")
        e = self._fabric.edge_id.get((u, v))
        if e is None:
            raise KeyError(name)
        return float(self._util[e])

    def __iter__(self) -> Iterator[str]:
        return (self._fabric.edge_name(int(e)) for e in self._used)

    def __len__(self) -> int:
        return len(self._used)

    def peak(self) -> tuple[str, float]:
        """The busiest link and its utilisation (numpy argmax, no per-link Python loop)."""
        if len(self._used) == 0:
            return "", 0.0
        e = int(self._used[np.argmax(self._util[self._used])])
        return self._fabric.edge_name(e), float(self._util[e])


def collective_kind(name: str) -> CollectiveKind:
    """``name`` as a collective kind; a ``CollectiveError`` listing the kinds when it is not one."""
    for kind in KINDS:
        if kind == name:
            return kind
    raise CollectiveError(f"kind = '{name}' is unknown; use one of {sorted(KINDS)}")


def bus_factor(kind: CollectiveKind, n: int) -> float:
    """busbw / algbw for ``kind`` on ``n`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _check(kind: CollectiveKind, size: float, groups: Sequence[Sequence[int]] | np.ndarray, num_gpus: int) -> np.ndarray:
    if kind not in KINDS:
        raise CollectiveError(f"kind = '{kind}' is unknown; use one of {sorted(KINDS)}")
    if not size >= 0:
        raise CollectiveError(f"size = {size} bytes must be >= 0")
    if isinstance(groups, np.ndarray):  # one row per group (a placement's groups: no list of lists built)
        if groups.ndim != 2 or groups.size == 0:
            raise CollectiveError(f"groups must be a non-empty list of equal-size groups, got an array of shape {groups.shape}")
        arr = np.array(groups, dtype=np.int64)  # a copy: the caller's array is never touched
    elif not groups or len({len(g) for g in groups}) != 1:
        raise CollectiveError(f"groups must be a non-empty list of equal-size groups, got sizes {sorted({len(g) for g in groups})}")
    else:
        arr = np.asarray(groups, dtype=np.int64)
    if arr.min() < 0 or arr.max() >= num_gpus:
        raise CollectiveError(f"groups name devices {arr.min()}..{arr.max()}; the cluster has 0..{num_gpus - 1}")
    if (np.diff(np.sort(arr, axis=1), axis=1) == 0).any():
        raise CollectiveError("a group lists the same device twice; list each device once per group")
    if kind == "send_recv" and arr.shape[1] != 2:
        raise CollectiveError(f"send_recv groups must be [src, dst] pairs, got groups of {arr.shape[1]}")
    return arr


def _step_cost(fabric: Fabric, step: Step) -> tuple[float, float, float, np.ndarray, np.ndarray, np.ndarray]:
    """(alpha, beta_rep, beta_full, loads, loads as priced, links of the representative group) of one
    run of ``step``; the priced loads raise the edge-tier fabric links to the busiest ECMP-hashed
    port's (``network.ecmp``), the plain ones split flows ideally (bytes per link, for reports)."""
    if step.dense is not None:
        dense = fabric.all_to_all(step.dense, step.dense_weight)
        if dense is not None:
            all_loads, rep_used, longest = dense
            util = all_loads / fabric.capacity
            return (longest, float(util[rep_used > 0].max(initial=0.0)), float(util.max(initial=0.0)), all_loads,
                    all_loads, np.flatnonzero(rep_used > 0))
        step = pairwise_flows(step.dense)
    loads, lat = fabric.loads(step.src, step.dst, step.weight)
    rep_loads, _ = fabric.loads(step.src[step.rep], step.dst[step.rep], step.weight[step.rep])
    for gpus, w, up in ((step.up_gpu, step.up_weight, True), (step.down_gpu, step.down_weight, False)):
        edges = (fabric.local_up if up else fabric.local_down)[gpus]
        add_at(loads, edges, w)
        rep = step.switch_rep if up else step.switch_rep_down
        add_at(rep_loads, edges[rep], w[rep])
    priced = hashed_loads(fabric, step.src, step.dst, loads)  # fabric edges only; the local ones as they are
    ratio = priced / fabric.capacity
    beta_rep = float(ratio[rep_loads > 0].max(initial=0.0))
    alpha = 0.0
    for mask, hops in step.latency_phases:
        sel = mask & step.rep
        alpha += hops * float(lat[sel].max(initial=0.0))
    if step.switch_hops:
        g = step.up_gpu[step.switch_rep]
        alpha += step.switch_hops * float((fabric.latency[fabric.local_up[g]] + fabric.latency[fabric.local_down[g]]).max(initial=0.0))
    return alpha, beta_rep, float(ratio.max(initial=0.0)), loads, priced, np.flatnonzero(rep_loads > 0)


def _pattern(fabric: Fabric, kind: CollectiveKind, algorithm: str, groups: np.ndarray, eff_switch: float) -> _Pattern:
    key = ("collective", kind, algorithm, groups.shape, groups.tobytes(), eff_switch)
    memo = fabric.memo
    if len(memo) > MEMO_LIMIT:
        memo.clear()  # a cache: bound its memory (each pattern holds one float per link)
    if key not in memo:
        alpha = beta = beta_full = sent = 0.0
        total = np.zeros(fabric.num_edges)
        steps = []
        for step in build_steps(kind, algorithm, groups, fabric, eff_switch):
            a, b, bf, loads, priced, rep = _step_cost(fabric, step)
            alpha, beta, beta_full = alpha + step.repeat * a, beta + step.repeat * b, beta_full + step.repeat * bf
            total += step.repeat * loads
            sent += step.repeat * step.sent_per_rank
            steps.append(StepLoad(edges=rep, load=priced[rep], repeat=step.repeat))
        memo[key] = _Pattern(alpha=alpha, beta=beta, beta_full=beta_full, sent=sent, loads=total, steps=tuple(steps))
    pattern = memo[key]
    assert isinstance(pattern, _Pattern)
    return pattern


NCCL_MODELLED: frozenset[str] = frozenset({"ring", "tree", "in_switch"})
"""Algorithms NCCL's tuner has a latency model for (``network.nccl_tuning``); the others (the
composite hierarchical, pairwise all-to-all, direct send/recv) keep the path latency."""


def _nodes(fabric: Fabric, groups: np.ndarray) -> tuple[int, str]:
    """(nodes the first group spans (NVLink domains or PCIe servers), the link inside a node)."""
    memo_key = ("nodes", groups.shape, groups[0].tobytes())
    if memo_key not in fabric.memo:
        g = groups[0]
        sw = fabric.local_switch[g]
        nodes = len(np.unique(np.where(sw >= 0, sw, -1 - g)))
        up = fabric.local_up[g]
        classes = {str(c) for c in fabric.link_class[up[up >= 0]]}
        fabric.memo[memo_key] = (nodes, "pci" if classes == {"pcie"} else "nvlink")
    out: tuple[int, str] = fabric.memo[memo_key]  # type: ignore[assignment]  # this key holds (nodes, intra)
    return out


def _timing(pattern: _Pattern, kind: CollectiveKind, algorithm: str, size: float, n: int, fill: float,
            latency_model: str, fabric: Fabric, groups: np.ndarray) -> tuple[float, float]:
    """(latency s before the bytes move, bytes of work) so that time = overhead + latency + work * beta.

    ``path``: the latency is the pattern's path latency per step and the work size plus the
    pipeline fill. ``nccl``: for the algorithms NCCL models, the latency of the protocol NCCL's tuner
    picks (``nccl_tuning.best_protocol``) replaces the path latency, and the work is scaled by
    1 / that protocol's bandwidth factor (Simple: 1). The groups' node layout (``_nodes``) is read
    only under ``nccl``."""
    work = size + min(size, fill)
    if latency_model != "nccl" or algorithm not in NCCL_MODELLED or size <= 0:
        return pattern.alpha, work
    nodes, intra = _nodes(fabric, groups)
    simple = work * pattern.beta
    _, lat, bw_time = best_protocol(kind, algorithm, n, nodes, simple, size * bus_factor(kind, n), intra)
    return lat, (work * bw_time / simple if simple > 0 else work)


def _cost(pattern: _Pattern, kind: CollectiveKind, algorithm: str, size: float, n: int, overhead: float,
          fabric: Fabric, fill: float, latency_model: str, groups: np.ndarray) -> CollectiveCost:
    alpha, work = _timing(pattern, kind, algorithm, size, n, fill, latency_model, fabric, groups)
    time = overhead + alpha + work * pattern.beta
    alg_bw = size / time if time > 0 else float("inf")
    return CollectiveCost(
        time=time, algorithm=algorithm, alg_bandwidth=alg_bw, bus_bandwidth=alg_bw * bus_factor(kind, n),
        bytes_per_rank_sent=pattern.sent * size,
        link_utilisation=LinkUtilisation(fabric, pattern.loads, size, time),
    )


def price_collective(
    kind: CollectiveKind,
    size: float,
    groups: Sequence[Sequence[int]] | np.ndarray,
    cluster: object,
    profile: CalibrationProfile,
    algorithm: str | None = None,
) -> CollectiveCost:
    """Time of one collective of ``size`` bytes (nccl-tests convention) for the first group of
    ``groups`` (lists of ranks, or an array with one row per group) while every group in
    ``groups`` runs the same collective on the same fabric."""
    fabric = fabric_of(cluster, profile)
    arr = _check(kind, size, groups, fabric.num_gpus)
    n = arr.shape[1]
    overhead = profile.p2p_overhead if kind == "send_recv" else profile.collective_overhead
    if n == 1:
        return CollectiveCost(time=0.0, algorithm="none", bus_bandwidth=0.0, alg_bandwidth=float("inf"),
                              bytes_per_rank_sent=0.0, link_utilisation=None)
    eff_switch = profile.link_eff("in_network_reduction")
    options_key = ("applicable", kind, arr.shape, arr.tobytes())
    if options_key not in fabric.memo:
        fabric.memo[options_key] = applicable(kind, arr, fabric)
    options: tuple[str, ...] = fabric.memo[options_key]  # type: ignore[assignment]  # memo holds several kinds of value; this key holds applicable()'s tuple
    if algorithm is not None:
        if algorithm not in ALGORITHMS.get(kind, ()):
            raise CollectiveError(f"algorithm = '{algorithm}' does not implement {kind}; use one of {ALGORITHMS[kind]}")
        if algorithm not in options:
            raise CollectiveError(f"algorithm = '{algorithm}' cannot run {kind} on these groups; use one of {options}")
        options = (algorithm,)
    else:
        options = tuple(a for a in options if a in SELECTABLE)
    fill = 0.0 if kind == "send_recv" else profile.pipeline_fill_bytes
    costs = [_cost(_pattern(fabric, kind, a, arr, eff_switch), kind, a, size, n, overhead, fabric, fill,
                   profile.collective_latency, arr) for a in options]
    return min(costs, key=lambda c: c.time)


def full_mode_time(kind: CollectiveKind, size: float, groups: Sequence[Sequence[int]], cluster: object,
                   profile: CalibrationProfile, algorithm: str) -> float:
    """Time of the slowest group (global makespan over every link) with ``algorithm``: what a
    full simulation of every group gets; equals ``price_collective`` for translate groups."""
    fabric = fabric_of(cluster, profile)
    arr = _check(kind, size, groups, fabric.num_gpus)
    p = _pattern(fabric, kind, algorithm, arr, profile.link_eff("in_network_reduction"))
    overhead = profile.p2p_overhead if kind == "send_recv" else profile.collective_overhead
    fill = 0.0 if kind == "send_recv" else profile.pipeline_fill_bytes
    alpha, work = _timing(p, kind, algorithm, size, arr.shape[1], fill, profile.collective_latency, fabric, arr)
    return overhead + alpha + work * p.beta_full


def collective_steps(kind: CollectiveKind, size: float, groups: Sequence[Sequence[int]] | np.ndarray, cluster: object,
                     profile: CalibrationProfile, algorithm: str | None = None) -> tuple[float, float, float, tuple[StepLoad, ...]]:
    """A collective as the flow-over-time model runs it: (its time alone, the latency paid before
    the bytes move (overhead + alpha), the bytes that move per step run (size plus the pipeline
    fill), its steps). Alone on the fabric, latency + sum over steps of repeat * bytes *
    max(load / capacity) is that time exactly. ``algorithm`` forces one that runs on ``groups``
    (default: the one ``price_collective`` selects)."""
    fabric = fabric_of(cluster, profile)
    arr = _check(kind, size, groups, fabric.num_gpus)
    if algorithm is None or arr.shape[1] == 1:
        algorithm = price_collective(kind, size, groups, cluster, profile).algorithm
    if algorithm == "none":
        return 0.0, 0.0, 0.0, ()
    p = _pattern(fabric, kind, algorithm, arr, profile.link_eff("in_network_reduction"))
    overhead = profile.p2p_overhead if kind == "send_recv" else profile.collective_overhead
    fill = 0.0 if kind == "send_recv" else profile.pipeline_fill_bytes
    alpha, work = _timing(p, kind, algorithm, size, arr.shape[1], fill, profile.collective_latency, fabric, arr)
    return overhead + alpha + work * p.beta, overhead + alpha, work, p.steps
