"""One forward-backward pair of Megatron-Core's combined 1F1B, layer by layer.

Owns ``combined_pair``: the seconds a paired forward and backward take when each MoE layer runs as
Megatron-Core schedules it (NVIDIA/Megatron-LM ``megatron/core/models/common/model_chunk_schedule_plan.py``,
``TransformerLayerSchedulePlan.run``: forward layer i with backward layer L - 1 - i on two streams,
"comm_stream: combine_bwd | dispatch_fwd->dispatch_bwd | combine_fwd; comp_stream: attn_fwd |
mlp_bwd->mlp_bwd_dw->mlp_fwd | attn_bwd", each node waiting for the ones whose output it reads):

- compute stream: the forward's attention side, the backward's expert input gradient, its expert
  weight gradient, the forward's experts, the backward's attention-side input gradient, its weight
  gradient;
- EP stream: the backward's combine, the forward's dispatch, the backward's dispatch, the forward's
  combine;
- each forward node reads the one before it (attention -> dispatch -> experts -> combine -> the next
  layer's attention), each backward node likewise (combine -> experts -> dispatch -> attention ->
  the next layer's combine); the weight gradients read only their own input gradient.

So a pair hides the all-to-alls only as far as the chains allow: a layer lasts at least its
backward's input-gradient chain (two all-to-alls and two computes) and its forward's chain. While
the EP stream runs, compute advances at 1 / (1 + ``slowdown``) (``lower_dp.overlapped_duration``'s
rule). A pair of chunks with different numbers of MoE layers runs the extra layers alone (Megatron
pairs a layer with nothing). It knows no engine, stage or schedule; it is a closed form in the
per-layer seconds (``PassSplit``), used by ``step.engine`` for ``EngineInput.paired`` plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class PassSplit:
    """One pass of a chunk, per MoE layer (the chunk's seconds over its MoE layers)."""

    layers: int
    attn: float
    """Compute outside the routed experts (attention, norms, router, permute; a backward's input
    gradient of them and its recompute)."""
    mlp: float
    """The routed experts' compute (a backward's input gradient)."""
    dispatch: float
    """Seconds of the dispatch all-to-all."""
    combine: float
    """Seconds of the combine all-to-all."""
    attn_w: float = 0.0
    """A backward's weight gradient outside the routed experts."""
    mlp_w: float = 0.0
    """A backward's weight gradient of the routed experts."""

    def scaled(self, k: float) -> PassSplit:
        """The same pass with its compute times ``k`` (a straggler's scale); all-to-alls unchanged."""
        return PassSplit(layers=self.layers, attn=self.attn * k, mlp=self.mlp * k, dispatch=self.dispatch,
                         combine=self.combine, attn_w=self.attn_w * k, mlp_w=self.mlp_w * k)


class _Streams:
    """The two streams' free times and the EP stream's busy intervals (for the slowdown)."""

    def __init__(self, slowdown: float) -> None:
        self.comp = 0.0
        self.comm = 0.0
        self.busy: list[tuple[float, float]] = []
        self.first = 0
        self.slowdown = slowdown

    def send(self, ready: float, secs: float) -> float:
        """An all-to-all of ``secs`` on the EP stream once its input is ``ready``; returns its end."""
        start = max(self.comm, ready)
        self.comm = start + secs
        if secs > 0:
            self.busy.append((start, self.comm))
        return self.comm

    def compute(self, ready: float, secs: float) -> float:
        """``secs`` of compute once its input is ``ready``, slowed while the EP stream is busy."""
        t = max(self.comp, ready)
        left = secs
        if self.slowdown > 0:
            while self.first < len(self.busy) and self.busy[self.first][1] <= t:
                self.first += 1  # the streams only move forward: an all-to-all over before t stays over
            for a, b in self.busy[self.first:]:
                if left <= 0 or b <= t:
                    continue
                if a > t:  # free time before this all-to-all starts
                    step = min(left, a - t)
                    t, left = t + step, left - step
                    if left <= 0:
                        break
                span = (b - t) / (1.0 + self.slowdown)  # work done while it runs
                if left <= span:
                    t, left = t + left * (1.0 + self.slowdown), 0.0
                    break
                t, left = b, left - span
        self.comp = t + max(left, 0.0)
        return self.comp


@lru_cache(maxsize=4096)
def combined_pair(f: PassSplit, b: PassSplit, slowdown: float = 0.0) -> tuple[float, float]:
    """(seconds the pair takes, seconds at which the forward's last node is done), from both
    streams free at 0 and both passes' inputs there (kept: a step runs the same few pairs many times)."""
    s = _Streams(slowdown)
    f_out = b_out = 0.0  # the forward's and the backward's running output (their chains)
    f_done = 0.0
    for i in range(max(f.layers, b.layers)):
        fwd, bwd = i < f.layers, i < b.layers
        if bwd:
            b_comb = s.send(b_out, b.combine)
        if fwd:
            a_f = s.compute(f_out, f.attn)
            d_f = s.send(a_f, f.dispatch)
        if bwd:
            m_b = s.compute(b_comb, b.mlp)
            d_b = s.send(m_b, b.dispatch)
            s.compute(m_b, b.mlp_w)
        if fwd:
            m_f = s.compute(d_f, f.mlp)
            f_out = f_done = s.send(m_f, f.combine)
        if bwd:
            b_out = s.compute(d_b, b.attn)
            s.compute(b_out, b.attn_w)
    return max(s.comp, s.comm), f_done
