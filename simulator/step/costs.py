"""The lowered costs: what the engine schedules, as plain frozen data.

Owns ``Bucket``, ``ChunkCost`` and ``StageCost`` (one model chunk / one stage, one micro-batch,
one device: seconds by pass and by cause), ``Call`` (what a stream's communication moves, for
the flows over time) and ``Lowered`` (the stages with the collectives table pricing produced).
Produced by ``clustersim.simulator.step.lower``, consumed by ``clustersim.simulator.step.engine``;
it computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.simulator.network import CollectiveKind, CollectiveRow
from clustersim.simulator.plan import Axis
from clustersim.simulator.step.pairing import PassSplit


@dataclass(frozen=True)
class Call:
    """One collective call a communication stream makes (``count`` of them back to back)."""

    kind: CollectiveKind
    size: float
    """Bytes (nccl-tests convention)."""
    axis: Axis
    count: int = 1


@dataclass(frozen=True)
class Bucket:
    """One DP gradient bucket released during a chunk's last backward."""

    at: float
    """Fraction of the chunk's backward elapsed when the bucket is ready (0..1)."""
    time: float
    """Seconds of its reduction on the DP communication stream."""
    call: Call | None = None
    """The reduction it runs (None: no fabric traffic)."""


@dataclass(frozen=True)
class ChunkCost:
    """One model chunk, one micro-batch, one device: seconds by pass and by cause."""

    chunk: int
    fwd: float
    bwd_input: float
    bwd_weight: float
    recompute: float
    tp_fwd: float
    tp_bwd: float
    cp_fwd: float
    cp_bwd: float
    ep_fwd: float
    ep_bwd: float
    dp_fwd: float
    dp_bwd: float
    flops: float
    """Forward + backward FLOP of this device (no recompute)."""
    recompute_flops: float
    """FLOP recomputed in the backward pass."""
    buckets: tuple[Bucket, ...]
    param_gather: float
    """Seconds to all-gather this chunk's parameters after a sharded optimizer step (ZeRO-1/2)."""
    param_gather_lead: float = -1.0
    """Seconds the chunk's first forward waits when its gathers start with it and run layer by
    layer ahead of it (Megatron-Core ``--overlap-param-gather``); -1: the whole ``param_gather``."""
    param_gather_calls: tuple[Call, ...] = ()
    """The all-gathers behind ``param_gather``, run one after another on the DP stream: the dense
    parameters' over dp (dp+cp), the routed experts' over edp (``step.lower_dp.param_gathers``)."""
    ep_a2a_fwd: float = 0.0
    """Seconds of the EP all-to-alls (dispatch + combine) of one forward that the schedule may hide
    (DualPipe's paired chunks): on the engine's communication stream when the pass is paired,
    exposed in full when it runs alone. 0 when ``ep_fwd`` already holds them (override, no pairing)."""
    ep_a2a_bwd: float = 0.0
    """The same for one backward (input gradient, with the recompute's all-to-alls)."""
    ep_call_fwd: Call | None = None
    """The all-to-alls behind one forward's ``exposed_ep`` when it is whole calls (``count`` of
    them back to back), for the flows over time; None: not whole calls, or none."""
    ep_call_bwd: Call | None = None
    """The same for one backward (``exposed_ep`` of B; W has none)."""
    offload_fwd: float = 0.0
    """Seconds one forward waits for its activation copies to the host (``step.offload``; 0 without
    ``plan.cpu_offloading_num_layers``)."""
    offload_bwd: float = 0.0
    """Seconds one backward waits for the activations coming back from the host (``step.offload``)."""
    moe_layers: int = 0
    """MoE layers in the chunk (for a paired pass's layer-by-layer schedule, ``split``)."""
    expert_fwd: float = 0.0
    """Seconds of the routed experts' ops in one forward (GEMMs and activation; part of ``fwd``)."""
    expert_bwd_input: float = 0.0
    """The same in one backward's input gradient (part of ``bwd_input``)."""
    expert_bwd_weight: float = 0.0
    """The same in one backward's weight gradient (part of ``bwd_weight``)."""

    def split(self, kind: str) -> PassSplit | None:
        """Pass ``kind`` (F or B) per MoE layer, as Megatron-Core's combined 1F1B runs it
        (``step.pairing``): the hideable all-to-alls halved into dispatch and combine, the compute
        split into routed experts and the rest (a backward's recompute with the rest). None without
        MoE layers or all-to-alls to hide."""
        n = self.moe_layers
        if n <= 0 or self.hideable_ep(kind) <= 0:
            return None
        a2a = self.hideable_ep(kind) / (2 * n)
        if kind == "F":
            return PassSplit(layers=n, attn=(self.fwd - self.expert_fwd) / n, mlp=self.expert_fwd / n,
                             dispatch=a2a, combine=a2a)
        return PassSplit(layers=n, attn=(self.bwd_input - self.expert_bwd_input + self.recompute) / n,
                         mlp=self.expert_bwd_input / n, dispatch=a2a, combine=a2a,
                         attn_w=(self.bwd_weight - self.expert_bwd_weight) / n, mlp_w=self.expert_bwd_weight / n)

    def duration(self, kind: str, split_w: bool) -> float:
        """Seconds of pass ``kind`` (F, B or W) run alone; without ``split_w`` B includes W."""
        return sum(self.parts(kind, split_w).values())

    def parts(self, kind: str, split_w: bool, paired: bool = False) -> dict[str, float]:
        """The duration of ``kind`` split by cause (sums to ``duration``); ``paired``: without the
        all-to-alls a paired pass hides (``hideable_ep``), which the engine runs on its EP stream."""
        if kind == "F":
            return {"compute": self.fwd, "exposed_tp": self.tp_fwd, "exposed_cp": self.cp_fwd,
                    "exposed_ep": self.ep_fwd + (0.0 if paired else self.ep_a2a_fwd), "exposed_dp": self.dp_fwd,
                    "exposed_offload": self.offload_fwd}
        if kind == "W":
            return {"compute": self.bwd_weight}
        comp = self.bwd_input + self.recompute + (0.0 if split_w else self.bwd_weight)
        return {"compute": comp, "exposed_tp": self.tp_bwd, "exposed_cp": self.cp_bwd,
                "exposed_ep": self.ep_bwd + (0.0 if paired else self.ep_a2a_bwd), "exposed_dp": self.dp_bwd,
                "exposed_offload": self.offload_bwd}

    def hideable_ep(self, kind: str) -> float:
        """Seconds of pass ``kind``'s all-to-alls that a paired pass can hide (``ep_a2a_*``)."""
        return self.ep_a2a_fwd if kind == "F" else self.ep_a2a_bwd if kind == "B" else 0.0


@dataclass(frozen=True)
class StageCost:
    """Everything the engine needs about one pipeline stage."""

    stage: int
    chunks: tuple[ChunkCost, ...]
    p2p: float
    """Seconds to send one micro-batch's activations to the next stage."""
    optimizer: float
    """Seconds of the optimizer step on this device."""
    p2p_size: float = 0.0
    """Bytes of one micro-batch's activations (or their gradients) sent to the next stage."""
    grad_sync: float = 0.0
    """Seconds of the tp all-reduce of the sequence-parallel norms' gradients after the backward,
    before the optimizer (0 without SP)."""


@dataclass(frozen=True)
class Lowered:
    """What lowering hands on: the per-stage costs and the table of the collectives it priced."""

    stages: tuple[StageCost, ...]
    collectives: tuple[CollectiveRow, ...]
    """One row per distinct collective (``CommPricer.summary``): what the Result reports."""
