"""Collective algorithms decomposed into steps of GPU -> GPU flows (and GPU <-> switch flows).

Owns ``Step`` and one builder per algorithm; every builder works on all concurrent groups at
once with numpy (a (groups, ranks) array), so 16,384 GPUs cost a handful of array operations.
It does not price anything (``clustersim.simulator.network.collectives``) nor route (``clustersim.simulator.network.flows``).

Weights are bytes per byte of collective size S (nccl-tests convention for S). Ranks of a group
are taken in device order, which is node-major; a "node" here is an NVLink domain (the GPUs that
share one local switch). Closed forms for one group on a non-blocking fabric with per-rank link
bandwidth B and per-step latency a (Thakur, Rabenseifner & Gropp 2005, IJHPCA 19(1); NCCL docs):
- ring all-reduce 2(n-1)/n S/B + 2(n-1)a; ring reduce-scatter / all-gather (n-1)/n S/B + (n-1)a.
  Across k nodes of m GPUs NCCL runs m rings (channels), each leaving a node through a different
  GPU's NIC; we do the same (channel c rotates the order inside every node by c).
- double binary tree all-reduce (NCCL 2.4): two heap-ordered trees, the second on reversed ranks,
  each carrying S/2 up (reduce) and down (broadcast), pipelined: 2S/B + 2 floor(log2 n) a.
- recursive halving-doubling (n a power of two; nearest partner first): 2(n-1)/n S/B + 2 log2(n) a.
- hierarchical all-reduce: ring reduce-scatter inside each node, ring all-reduce of S/m across
  nodes between GPUs of the same local index, ring all-gather inside; pipelined (NCCL chunks
  the buffer), so all three phases share the links at once.
- in-switch (NVLink SHARP / NVLS): each GPU sends S up and receives S down (all-reduce), or S up
  and S/n down (reduce-scatter), or S/n up and S down (all-gather); switch reduction throughput
  is ``profile.link_eff("in_network_reduction")``. Across nodes: NVLS reduce-scatter, ring
  all-reduce of S/m across nodes, NVLS all-gather, pipelined (NCCL's NVLS-tree idea).
- pairwise all-to-all: every rank sends S/n to each other rank, all pairs at once (NCCL posts
  grouped send/recv together): (n-1)/n S/B + a.
- broadcast: pipelined chain from the root: S/B + (n-1)a. send/recv: one flow, S/B + a.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, get_args

import numpy as np

from clustersim.simulator.network.routing import Fabric

CollectiveKind = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv"]
"""The collective kinds (nccl-tests names); ``send_recv`` is one point-to-point transfer."""
Algorithm = Literal["ring", "tree", "halving_doubling", "hierarchical", "in_switch", "pairwise", "direct"]
"""The algorithms a collective can be priced with."""
ALGORITHMS: Mapping[CollectiveKind, tuple[Algorithm, ...]] = {
    "all_reduce": ("ring", "tree", "halving_doubling", "hierarchical", "in_switch"),
    "reduce_scatter": ("ring", "halving_doubling", "in_switch"),
    "all_gather": ("ring", "halving_doubling", "in_switch"),
    "all_to_all": ("pairwise",),
    "broadcast": ("ring",),
    "send_recv": ("direct",),
}
"""Algorithms each collective kind implements (the ``algorithm=`` values)."""
SELECTABLE: frozenset[Algorithm] = frozenset({"ring", "tree", "hierarchical", "in_switch", "pairwise", "direct"})
"""Algorithms the selector weighs (NCCL's: ring, tree, NVLS/CollNet, NVLS-tree); recursive
halving-doubling (MPI's choice, not NCCL's) runs only when asked for by ``algorithm=``."""
KINDS: frozenset[CollectiveKind] = frozenset(get_args(CollectiveKind))
"""Collective kinds ``price_collective`` accepts."""
_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0)
_EMPTY_B = np.zeros(0, dtype=bool)


@dataclass(frozen=True, kw_only=True)
class Step:
    """Flows that run at the same time, for every concurrent group; repeated ``repeat`` times."""

    src: np.ndarray
    """Source device index per flow."""
    dst: np.ndarray
    """Destination device index per flow."""
    weight: np.ndarray
    """Bytes per flow per byte of collective size."""
    rep: np.ndarray
    """True for flows of the representative (first) group."""
    latency_phases: tuple[tuple[np.ndarray, int], ...]
    """(flow mask, hops): the step pays ``hops`` times the longest latency of those flows."""
    repeat: int = 1
    """Identical back-to-back runs of this step (ring steps)."""
    sent_per_rank: float = 0.0
    """Mean bytes one rank sends in one run, per byte of size."""
    up_gpu: np.ndarray = field(default_factory=lambda: _EMPTY_I)
    """GPUs sending to their local (reducing) switch."""
    up_weight: np.ndarray = field(default_factory=lambda: _EMPTY_F)
    """Bytes per byte of size each ``up_gpu`` sends to the switch."""
    down_gpu: np.ndarray = field(default_factory=lambda: _EMPTY_I)
    """GPUs receiving from their local switch."""
    down_weight: np.ndarray = field(default_factory=lambda: _EMPTY_F)
    """Bytes per byte of size each ``down_gpu`` receives."""
    switch_rep: np.ndarray = field(default_factory=lambda: _EMPTY_B)
    """Representative mask of ``up_gpu``."""
    switch_rep_down: np.ndarray = field(default_factory=lambda: _EMPTY_B)
    """Representative mask of ``down_gpu``."""
    switch_hops: int = 0
    """Sequential GPU -> switch -> GPU latencies paid."""
    dense: np.ndarray | None = None
    """(groups, ranks): every rank sends ``dense_weight`` to every other rank of its group at once
    (all-to-all), priced from per-switch sums instead of n^2 flows; ``src``/``dst`` are then empty
    and ``pairwise_flows`` gives the explicit flows (the fallback for irregular graphs)."""
    dense_weight: float = 0.0
    """Bytes per pair per byte of size in a ``dense`` step."""


def _flows(src: np.ndarray, dst: np.ndarray, weight: float | np.ndarray, **kw: object) -> Step:
    """A step from (groups, flows) arrays; row 0 is the representative group."""
    rep = np.zeros(src.shape, dtype=bool)
    rep[0] = True
    w = np.broadcast_to(np.asarray(weight, dtype=float), src.shape)
    n = src.size
    hops = kw.get("hops", 1)
    assert isinstance(hops, int), "hops is a count of sequential latencies"
    phases = kw.pop("latency_phases", None) or ((np.ones(n, dtype=bool), hops),)
    kw.pop("hops", None)
    return Step(src=src.ravel(), dst=dst.ravel(), weight=w.ravel().copy(), rep=rep.ravel(),
                latency_phases=phases, **kw)  # type: ignore[arg-type]  # kw: the builder's remaining Step fields, forwarded as given


def node_layout(groups: np.ndarray, fabric: Fabric) -> tuple[np.ndarray, int, int]:
    """Groups sorted by device, and (nodes k, GPUs per node m) when every group spans k whole
    blocks of m GPUs that share a local switch; (1, 0) when the layout is irregular."""
    sg = np.sort(groups, axis=1)
    keys = fabric.local_switch[sg]
    keys = np.where(keys >= 0, keys, -1 - sg)  # no local switch: each GPU is its own node
    first = np.sort(keys[0])
    k = 1 + int(np.count_nonzero(first[1:] != first[:-1]))  # distinct nodes; not np.unique: it imports numpy.ma
    n = sg.shape[1]
    if n % k:
        return sg, 1, 0
    blocks = keys.reshape(len(sg), k, n // k)
    if not (blocks == blocks[:, :, :1]).all():
        return sg, 1, 0
    return sg, k, n // k


def _reducing_switch(groups: np.ndarray, fabric: Fabric) -> bool:
    sw = fabric.local_switch[groups]
    if (sw < 0).any():
        return False
    return bool(fabric.reduces[sw].all())


def applicable(kind: CollectiveKind, groups: np.ndarray, fabric: Fabric) -> tuple[Algorithm, ...]:
    """Algorithms of ``kind`` that can run on ``groups`` on this fabric."""
    n = groups.shape[1]
    _, k, m = node_layout(groups, fabric)
    ok: list[Algorithm] = []
    for a in ALGORITHMS[kind]:
        if a == "halving_doubling" and n & (n - 1):
            continue
        if a == "tree" and n < 3:
            continue
        if a == "hierarchical" and not (k >= 2 and m >= 2):
            continue
        if a == "in_switch" and not (_reducing_switch(groups, fabric) and (k == 1 or (m >= 2 and kind == "all_reduce"))):
            continue
        ok.append(a)
    return tuple(ok)


def _ring(kind: CollectiveKind, sg: np.ndarray, k: int, m: int) -> list[Step]:
    g, n = sg.shape
    if k >= 2 and m >= 2:
        blocks = sg.reshape(g, k, m)
        orders = [np.roll(blocks, -c, axis=2).reshape(g, n) for c in range(m)]
    else:
        orders = [sg]
    src = np.concatenate(orders, axis=1)
    dst = np.concatenate([np.roll(o, -1, axis=1) for o in orders], axis=1)
    repeat = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return [_flows(src, dst, 1.0 / (n * len(orders)), repeat=repeat, sent_per_rank=1.0 / n)]


def _broadcast(sg: np.ndarray, root: np.ndarray) -> list[Step]:
    g, n = sg.shape
    shift = np.argmax(sg == root[:, None], axis=1)
    order = np.take_along_axis(sg, (np.arange(n)[None, :] + shift[:, None]) % n, axis=1)
    return [_flows(order[:, :-1], order[:, 1:], 1.0, hops=n - 1, sent_per_rank=(n - 1) / n)]


def _tree(sg: np.ndarray) -> list[Step]:
    g, n = sg.shape
    child = np.arange(1, n)
    parent = (child - 1) // 2
    rev = n - 1 - np.arange(n)  # tree 2: the same heap on reversed positions
    kids = np.concatenate([child, rev[child]])
    pars = np.concatenate([parent, rev[parent]])
    src = np.concatenate([sg[:, kids], sg[:, pars]], axis=1)
    dst = np.concatenate([sg[:, pars], sg[:, kids]], axis=1)
    depth = int(np.floor(np.log2(n)))
    return [_flows(src, dst, 0.5, hops=2 * depth, sent_per_rank=2 * (n - 1) / n)]


def _halving_doubling(kind: CollectiveKind, sg: np.ndarray) -> list[Step]:
    n = sg.shape[1]
    pos = np.arange(n)
    repeat = 2 if kind == "all_reduce" else 1
    steps = []
    for j in range(int(np.log2(n))):
        w = 1.0 / 2 ** (j + 1)
        steps.append(_flows(sg, sg[:, pos ^ (1 << j)], w, repeat=repeat, sent_per_rank=w))
    return steps


def _hierarchical(sg: np.ndarray, k: int, m: int) -> list[Step]:
    g = len(sg)
    blocks = sg.reshape(g, k, m)
    intra_src, intra_dst = blocks.reshape(g, -1), np.roll(blocks, -1, axis=2).reshape(g, -1)
    inter_src, inter_dst = blocks.reshape(g, -1), np.roll(blocks, -1, axis=1).reshape(g, -1)
    src = np.concatenate([intra_src, inter_src], axis=1)
    dst = np.concatenate([intra_dst, inter_dst], axis=1)
    w_intra, w_inter = 2 * (m - 1) / m, 2 * (k - 1) / (k * m)
    w = np.concatenate([np.full(k * m, w_intra), np.full(k * m, w_inter)])[None, :]
    intra = np.zeros((g, 2 * k * m), dtype=bool)
    intra[:, : k * m] = True
    phases = ((intra.ravel(), 2 * (m - 1)), (~intra.ravel(), 2 * (k - 1)))
    return [_flows(src, dst, w, latency_phases=phases, sent_per_rank=w_intra + w_inter)]


def _in_switch(kind: CollectiveKind, sg: np.ndarray, k: int, m: int, eff: float) -> list[Step]:
    g, n = sg.shape
    if k == 1:
        up, down = {"all_reduce": (1.0, 1.0), "reduce_scatter": (1.0, 1.0 / n), "all_gather": (1.0 / n, 1.0)}[kind]
        src = dst = np.zeros((g, 0), dtype=np.int64)
        phases: tuple[tuple[np.ndarray, int], ...] = ((np.zeros(0, dtype=bool), 0),)
        hops, w_inter = 1, 0.0
    else:  # NVLS reduce-scatter + ring all-reduce of S/m across nodes + NVLS all-gather
        up = down = 1.0 + 1.0 / m
        blocks = sg.reshape(g, k, m)
        src, dst = blocks.reshape(g, -1), np.roll(blocks, -1, axis=1).reshape(g, -1)
        w_inter = 2 * (k - 1) / (k * m)
        phases, hops = ((np.ones(src.size, dtype=bool), 2 * (k - 1)),), 2
    rep = np.zeros((g, n), dtype=bool)
    rep[0] = True
    step = _flows(src, dst, w_inter, latency_phases=phases, sent_per_rank=up + w_inter)
    return [Step(src=step.src, dst=step.dst, weight=step.weight, rep=step.rep, latency_phases=phases,
                 sent_per_rank=up + w_inter, up_gpu=sg.ravel(), up_weight=np.full(sg.size, up / eff),
                 down_gpu=sg.ravel(), down_weight=np.full(sg.size, down / eff), switch_rep=rep.ravel(),
                 switch_rep_down=rep.ravel(), switch_hops=hops)]


def pairwise_flows(sg: np.ndarray) -> Step:
    """The pairwise all-to-all as explicit flows: n (n - 1) per group."""
    n = sg.shape[1]
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return _flows(sg[:, i], sg[:, j], 1.0 / n, sent_per_rank=(n - 1) / n)


def _pairwise(sg: np.ndarray) -> list[Step]:
    n = sg.shape[1]
    return [Step(src=_EMPTY_I, dst=_EMPTY_I, weight=_EMPTY_F, rep=_EMPTY_B, latency_phases=((_EMPTY_B, 1),),
                 sent_per_rank=(n - 1) / n, dense=sg, dense_weight=1.0 / n)]


def build_steps(kind: CollectiveKind, algorithm: str, groups: np.ndarray, fabric: Fabric, eff_switch: float) -> list[Step]:
    """The steps of ``algorithm`` running ``kind`` on every group at once."""
    sg, k, m = node_layout(groups, fabric)
    match algorithm:
        case "ring" if kind == "broadcast":
            return _broadcast(sg, groups[:, 0])
        case "ring":
            return _ring(kind, sg, k, m)
        case "tree":
            return _tree(sg)
        case "halving_doubling":
            return _halving_doubling(kind, sg)
        case "hierarchical":
            return _hierarchical(sg, k, m)
        case "in_switch":
            return _in_switch(kind, sg, k, m, eff_switch)
        case "pairwise":
            return _pairwise(sg)
        case "direct":
            return [_flows(groups[:, :1], groups[:, 1:], 1.0, sent_per_rank=1.0)]
    raise ValueError(f"algorithm = '{algorithm}' is unknown; use one of {sorted({a for v in ALGORITHMS.values() for a in v})}")
