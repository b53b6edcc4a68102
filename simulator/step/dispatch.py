"""The MoE token dispatch: the bytes one GPU moves on each tier, and their time.

Owns the dispatcher kinds (``plan.moe_dispatcher``) and their byte counts per GPU for one
dispatch (the combine moves the same bytes back):

- ``alltoall`` (Megatron-Core's default ``moe_token_dispatcher_type``): every token-expert pair
  goes to its expert's rank; a flat all-to-all over the EP group of T*k*b bytes per GPU, of which
  (g-1)/n stay on the NVLink domain and (n-g)/n cross the scale-out network.
- ``allgather``: every EP rank gathers the T tokens of every other rank (T*b each) and keeps the
  pairs of its own experts; (n-1)*T*b bytes received per GPU.
- ``deepep`` (DeepSeek-V3 report sec. 3.2.2, DeepEP): a token crosses the scale-out network once
  per destination node, to the GPU of the same local index, and NVLink forwards it to the GPUs of
  its experts there; with group-limited routing a token reaches at most M nodes
  (``ModelSpec.expert_groups_per_token``; DeepSeek-V3: M = 4). Scale-out bytes T*b*D*(N-1)/N, with
  D the expected distinct nodes a token reaches; NVLink bytes T*k*b*(g-1)/g (the pairs forwarded
  inside the destination node); the two tiers run pipelined, so the time is the larger of the two.

T: tokens entering the MoE block on the GPU, k: top_k, b: bytes per token (hidden x activation
bytes), n: EP ranks, g: EP ranks per NVLink domain, N = n/g nodes, e = experts per node. Routing is
balanced (the Megatron-Bridge benchmarks force it); D for k experts drawn uniformly among the M*e
experts of M nodes is M * (1 - C((M-1)e, k) / C(Me, k)). Prices each tier with the closed forms of
``network.analytic``; does not own the all-to-all of the network models.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Literal

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network import GroupShape, collective_time
from clustersim.simulator.plan import Placement
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec

Dispatcher = Literal["alltoall", "allgather", "deepep"]
DISPATCHERS: tuple[str, ...] = ("alltoall", "allgather", "deepep")


@dataclass(frozen=True)
class EpShape:
    """How the EP group lies on the cluster."""

    ranks: int
    """EP ranks n."""
    per_domain: int
    """EP ranks g inside one NVLink domain (the group spans n/g domains)."""

    @property
    def nodes(self) -> int:
        """NVLink domains N the EP group spans."""
        return max(1, self.ranks // max(1, self.per_domain))


@dataclass(frozen=True)
class TierBytes:
    """Bytes one GPU sends in one dispatch, by tier."""

    nvlink: float
    """Bytes over NVLink (inside the NVLink domain)."""
    network: float
    """Bytes over the scale-out network (InfiniBand / RoCE)."""


def expert_load(imbalance: float, capacity_factor: float | None) -> float:
    """Tokens the busiest expert rank processes over the mean: the routing's ``imbalance`` when
    dropless; with an expert capacity factor c at most c times the mean (the excess is dropped,
    Megatron-Core ``moe_expert_capacity_factor``)."""
    return imbalance if capacity_factor is None else min(imbalance, capacity_factor)


def draw_expert_imbalance(rng: np.random.Generator, pairs: int, experts: int, ep: int, *,
                          concentration: float | None = None, samples: int = 16) -> float:
    """A seeded draw of the busiest EP rank's load over the mean: ``pairs`` token-expert pairs
    routed multinomially over ``experts`` (uniform, or with expert popularity drawn from a
    Dirichlet of ``concentration`` per expert for a skewed router), ``experts / ep`` per rank; the
    mean of ``samples`` draws. Feed it to ``plan.expert_imbalance``."""
    if pairs < 1 or experts < 1 or ep < 1 or experts % ep:
        raise ValueError(f"pairs = {pairs}, experts = {experts}, ep = {ep}: need pairs, experts >= 1 and ep dividing experts")
    out = []
    for _ in range(samples):
        p = np.full(experts, 1.0 / experts) if concentration is None else rng.dirichlet(np.full(experts, concentration))
        per_rank = rng.multinomial(pairs, p).reshape(ep, -1).sum(axis=1)
        out.append(per_rank.max() / (pairs / ep))
    return float(np.mean(out))


def ep_shape(placement: Placement, cluster: Cluster) -> EpShape:
    """The EP group's size and its ranks per NVLink domain, from the rank placement."""
    group = placement.groups("ep")[0]
    domains = [int(r) // cluster.nvlink_domain_size for r in group]
    return EpShape(ranks=len(group), per_domain=max(domains.count(d) for d in set(domains)))


def node_limit(model: ModelSpec, nodes: int) -> int:
    """M, the most nodes a token reaches: ``expert_groups_per_token`` groups, each group spread over
    ceil(nodes / groups) nodes when there are fewer groups than nodes; all nodes without a limit."""
    if model.expert_groups <= 0 or model.expert_groups_per_token <= 0:
        return nodes
    per_group = -(-nodes // model.expert_groups)
    return min(nodes, model.expert_groups_per_token * per_group)


def expected_nodes(top_k: int, experts_per_node: int, limit: int) -> float:
    """D: expected distinct nodes among ``top_k`` experts drawn without replacement, uniformly,
    from the ``limit * experts_per_node`` experts of the ``limit`` nodes a token may use."""
    pool, other = limit * experts_per_node, (limit - 1) * experts_per_node
    if top_k > pool:
        raise ValueError(f"top_k = {top_k} exceeds the {pool} experts of the {limit} nodes a token may reach")
    return limit * (1.0 - comb(other, top_k) / comb(pool, top_k))


def dispatch_bytes(kind: str, model: ModelSpec, tokens: float, token_bytes: float, ep: EpShape) -> TierBytes:
    """Bytes per GPU and tier of one dispatch by dispatcher ``kind`` (module docstring)."""
    n, g, k = ep.ranks, min(ep.per_domain, ep.ranks), model.top_k
    if n <= 1:
        return TierBytes(0.0, 0.0)
    match kind:
        case "alltoall":
            pairs = tokens * k * token_bytes
            return TierBytes(nvlink=pairs * (g - 1) / n, network=pairs * (n - g) / n)
        case "allgather":
            return TierBytes(nvlink=tokens * token_bytes * (g - 1), network=tokens * token_bytes * (n - g))
        case "deepep":
            nodes = ep.nodes
            d = expected_nodes(k, model.num_experts // nodes, node_limit(model, nodes))
            return TierBytes(nvlink=tokens * k * token_bytes * (g - 1) / g,
                             network=tokens * token_bytes * d * (nodes - 1) / nodes)
    raise ValueError(f"plan.moe_dispatcher = {kind!r} is unknown; choose one of {list(DISPATCHERS)}")


def dispatch_time(kind: str, model: ModelSpec, tokens: float, token_bytes: float, ep: EpShape,
                  cluster: Cluster, profile: CalibrationProfile) -> float:
    """Seconds of one dispatch: each tier's bytes on the analytic closed forms, the two tiers
    concurrent (the slower one sets the time)."""
    tiers = dispatch_bytes(kind, model, tokens, token_bytes, ep)
    g, nodes = min(ep.per_domain, ep.ranks), ep.nodes
    nvl = net = 0.0
    if g > 1 and tiers.nvlink > 0:  # an all-to-all of g ranks inside a domain moves (g-1)/g of its size
        nvl = collective_time("all_to_all", tiers.nvlink * g / (g - 1),
                              GroupShape(size=g, per_domain=g), cluster, profile)
    if nodes > 1 and tiers.network > 0:  # one GPU per node: an all-to-all of N ranks, (N-1)/N across
        net = collective_time("all_to_all", tiers.network * nodes / (nodes - 1),
                              GroupShape(size=nodes, per_domain=1), cluster, profile)
    return max(nvl, net)
