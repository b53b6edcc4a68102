"""The fast analytical tier: a closed-form step time and memory for one plan in ~1 ms.

Owns the estimator that plan search uses to price every candidate: per-layer op times and
activation bytes are cached by shape (so thousands of plans share them), communication comes from
the closed forms of ``clustersim.simulator.network.analytic``, and the pipeline from the textbook bubble formulas
(1F1B/GPipe (p-1)(F+B), interleaved /v, ZB-H1 (p-1)(F+B-W)). The SimPy engine is the reference; search
reports how far this tier is from it on the shortlist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from clustersim.simulator.network import GroupShape, collective_time
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.step import (
    RESERVED_BYTES,
    EpShape,
    Pass,
    dispatch_time,
    expert_load,
    flow_shop,
    overlapped_duration,
    full_recompute_time,
    hidden_bound,
    is_routed_expert,
    ops_time,
    optimizer_time,
    peak_for,
    saved_forward,
)
from clustersim.simulator.plan import ParallelPlan, Recompute
from clustersim.topologies import Cluster
from clustersim.workloads import (
    ModelSpec,
    Op,
    TrainingSpec,
    head_activation_bytes,
    moe_dispatch_buffer_bytes,
    head_ops,
    layer_activation_bytes,
    layer_ops,
    model_flops_per_step,
)
from clustersim.workloads.mamba import mamba_cp_alltoall_bytes


@dataclass(frozen=True)
class Estimate:
    """The analytical tier's view of one plan."""

    plan: ParallelPlan
    step_time: float
    peak_memory: float
    fits: bool
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass
class Estimator:
    """Prices plans of one (model, training, cluster, profile); caches per-layer work by shape."""

    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    profile: CalibrationProfile

    def __post_init__(self) -> None:
        self._ops = lru_cache(maxsize=None)(self._layer_ops)
        self._times = lru_cache(maxsize=None)(self._layer_times)
        self._saved = lru_cache(maxsize=None)(self._layer_saved)
        self._acts = lru_cache(maxsize=None)(self._layer_act)
        self._comm = lru_cache(maxsize=None)(self._collective)
        self.model_flops = model_flops_per_step(self.model, self.training)
        self.peak = peak_for(self.cluster.accelerator, self.training.precision, True)

    # -- cached pieces -------------------------------------------------------------------------
    def _layer_ops(self, i: int, mb: int, tp: int, cp: int, ep: int, etp: int, sp: bool) -> tuple[Op, ...]:
        return tuple(layer_ops(self.model, i, micro_batch=mb, seq_len=self.training.seq_len, tp=tp, cp=cp,
                               ep=ep, etp=etp, dtype_bytes=self.training.activation_bytes, sp=sp,
                               attention_kernel=self.training.attention_kernel))

    def _layer_times(self, i: int, mb: int, tp: int, cp: int, ep: int, etp: int, sp: bool, imbalance: float) -> dict[str, float]:
        """Pass times of representative layer ``i`` (see ``layer_groups``)."""
        ops = list(self._ops(i, mb, tp, cp, ep, etp, sp))

        def t(sel: list[Op], which: Pass) -> float:
            return ops_time(sel, self.cluster.accelerator, self.profile, self.training.precision, which, imbalance)

        attn = [o for o in ops if o.recompute_selective]  # the attention core, fused or not
        ring = 1.0 if any(o.role == "attention_core" for o in ops) else 0.0  # CP ring only around attention
        expert = sum(o.params for o in ops if is_routed_expert(o))
        return {"fwd": t(ops, "fwd"), "bi": t(ops, "bwd_input"), "bw": t(ops, "bwd_weight"),
                "sel": t([o for o in ops if o.recompute_selective], "fwd"), "attn_f": t(attn, "fwd"),
                "attn_b": t(attn, "bwd"), "ring": ring, "params": float(sum(o.params for o in ops)), "expert": float(expert)}

    def _layer_saved(self, i: int, mb: int, tp: int, cp: int, ep: int, etp: int, sp: bool, imbalance: float) -> dict[str, float]:
        """Forward seconds of the ops whose outputs a full recompute may keep (``step.saved_forward``)."""
        acc, prof, prec = self.cluster.accelerator, self.profile, self.training.precision
        return saved_forward(self._ops(i, mb, tp, cp, ep, etp, sp),
                             lambda sel: ops_time(sel, acc, prof, prec, "fwd", imbalance))

    def _layer_act(self, i: int, mb: int, tp: int, cp: int, sp: bool, rc: Recompute, ep: int, etp: int,
                   saved: tuple[str, ...] = ()) -> float:
        return layer_activation_bytes(self.model, i, micro_batch=mb, seq_len=self.training.seq_len, tp=tp, cp=cp,
                                      sp=sp, recompute=rc, dtype_bytes=self.training.activation_bytes, ep=ep, etp=etp,
                                      flash_attention=self.training.flash_attention,
                                      gemm_input_bytes=self.training.gemm_input_bytes, recompute_saved=saved)

    def _collective(self, kind: str, size: float, n: int, per_domain: int) -> float:
        shape = GroupShape(size=n, per_domain=max(1, min(per_domain, n)))
        return collective_time(kind, size, shape, self.cluster, self.profile)

    def comm(self, kind: str, size: float, n: int, stride: int) -> float:
        """A collective on a group of ``n`` ranks spaced ``stride`` apart in rank order."""
        if n <= 1 or size <= 0:
            return 0.0
        domain = self.cluster.nvlink_domain_size
        return self._comm(kind, float(size), n, max(1, domain // stride) if stride < domain else 1)

    # -- the estimate --------------------------------------------------------------------------
    def layer_counts(self, plan: ParallelPlan) -> tuple[int, int]:
        """(MoE layers, dense layers) on the busiest stage."""
        per = math.ceil(self.model.num_layers / plan.pp)
        moe = sum(1 for i in range(self.model.num_layers) if self.model.is_moe_layer(i))
        share = moe / self.model.num_layers
        n_moe = min(per, round(per * share)) if moe else 0
        return n_moe, per - n_moe

    def layer_groups(self, plan: ParallelPlan) -> tuple[tuple[int, int], ...]:
        """(representative layer index, count) per layer kind on the busiest stage: the first MoE
        and the first dense layer of a transformer (``layer_counts``), or for a hybrid
        ``layer_pattern`` the first layer of each kind with its share of the stage's layers."""
        model = self.model
        if model.layer_pattern is None:
            n_moe, n_dense = self.layer_counts(plan)
            reps = {True: n_moe, False: n_dense}
            return tuple((next(j for j in range(model.num_layers) if model.is_moe_layer(j) == moe), n)
                         for moe, n in reps.items() if n)
        per = math.ceil(model.num_layers / plan.pp)
        groups = []
        for ch in dict.fromkeys(model.layer_pattern):
            share = model.layer_pattern.count(ch) / model.num_layers
            groups.append((model.layer_pattern.index(ch), max(1, round(per * share))))
        return tuple(groups)

    def estimate(self, plan: ParallelPlan) -> Estimate:
        """Step time and peak memory of ``plan`` (assumed already valid for the cluster)."""
        m = self.training.global_batch_size // (plan.dp * plan.micro_batch)
        groups = self.layer_groups(plan)
        f, b, w, extra = self._per_microbatch(plan, groups)
        bubble = self._bubble(plan, f, b, w)
        dp, opt, params = self._dp_and_optimizer(plan, groups, f, b)
        pp_comm = 2 * (plan.pp - 1) * self._p2p(plan) if plan.pp > 1 else 0.0
        compute = m * (f + b + w)
        step = compute + bubble + pp_comm + dp + opt + self.profile.step_overhead
        memory = self._memory(plan, m, groups, params)
        return Estimate(plan=plan, step_time=step, peak_memory=memory,
                        fits=memory <= self.cluster.accelerator.hbm_capacity,
                        breakdown={"compute": m * (f + b + w) - m * extra, "exposed_comm": m * extra,
                                   "bubble": bubble, "exposed_pp": pp_comm, "exposed_dp": dp, "optimizer": opt})

    def _per_microbatch(self, plan: ParallelPlan, groups: tuple[tuple[int, int], ...]) -> tuple[float, float, float, float]:
        """Forward, backward-input(+recompute), weight-grad seconds of the busiest stage, and comm in them."""
        f = b = w = comm = 0.0
        for i, n in groups:
            shard = (i, plan.micro_batch, plan.tp, plan.cp, plan.ep, plan.etp, plan.sp,
                     expert_load(plan.expert_imbalance, self.model.capacity_factor))
            lt = self._times(*shard)
            cf, cb = self._layer_comm(plan, i, lt)
            rec = (full_recompute_time(lt["fwd"], self._saved(*shard), plan.recompute_saved) if plan.recompute == "full"
                   else lt["sel"] if plan.recompute == "selective" else 0.0)
            f += n * (lt["fwd"] + cf)
            b += n * (lt["bi"] + rec + cb)
            w += n * lt["bw"]
            comm += n * (cf + cb)
        f2, b2 = self._fsdp(plan, sum(n for _, n in groups), f, b + w)
        head = list(head_ops(self.model, micro_batch=plan.micro_batch, seq_len=self.training.seq_len, tp=plan.tp, cp=plan.cp, sp=plan.sp))
        acc, prof, prec = self.cluster.accelerator, self.profile, self.training.precision
        f += f2 + ops_time(head, acc, prof, prec, "fwd")
        b += b2 + ops_time(head, acc, prof, prec, "bwd")
        if plan.schedule != "zb-h1":
            b, w = b + w, 0.0
        return f, b, w, comm + f2 + b2

    def _layer_comm(self, plan: ParallelPlan, i: int, lt: dict[str, float]) -> tuple[float, float]:
        """Exposed TP, CP and EP seconds of layer ``i`` (hybrid layers: one TP block, not two)."""
        t, moe = self.training, self.model.is_moe_layer(i)
        blocks = 2 if self.model.layer_kind(i) == "transformer" else 1
        tokens = plan.micro_batch * t.seq_len / plan.cp
        size = tokens * self.model.hidden_size * t.activation_bytes
        if plan.sp:
            one = self.comm("reduce_scatter", size, plan.tp, 1) + self.comm("all_gather", size, plan.tp, 1)
        else:
            one = self.comm("all_reduce", size, plan.tp, 1)
        tp = blocks * one * (1 - hidden_bound(plan.tp_comm_overlap, plan.tp_overlap))
        kv = 2 * tokens * max(self.model.num_kv_heads // plan.tp, 1) * self.model.attn_head_dim * t.activation_bytes * plan.cp
        ring = self.comm("all_gather", kv, plan.cp, plan.tp) * lt["ring"]
        cp_f, cp_b = max(0.0, ring - lt["attn_f"]), max(0.0, 2 * ring - lt["attn_b"])
        if plan.cp > 1 and self.model.layer_kind(i) == "mamba":  # scan all-to-alls (see lower.py)
            payload = mamba_cp_alltoall_bytes(self.model, micro_batch=plan.micro_batch, seq_len=t.seq_len,
                                              tp=plan.tp, cp=plan.cp, dtype_bytes=t.activation_bytes)
            a2a = self.comm("all_to_all", payload, plan.cp, plan.tp)
            cp_f, cp_b = cp_f + a2a, cp_b + a2a * (2 if plan.recompute == "full" else 1)
        ep = 0.0
        if moe and plan.ep > 1 and plan.moe_dispatcher == "alltoall":
            per_rank = tokens / plan.tp * self.model.top_k * self.model.expert_width * t.activation_bytes
            ep = 2 * self.comm("all_to_all", per_rank, plan.ep, plan.etp)
        elif moe and plan.ep > 1:
            domain = self.cluster.nvlink_domain_size
            shape = EpShape(ranks=plan.ep, per_domain=min(plan.ep, max(1, domain // plan.etp) if plan.etp < domain else 1))
            ep = 2 * dispatch_time(plan.moe_dispatcher, self.model, tokens / plan.tp,
                                   self.model.expert_width * t.activation_bytes, shape, self.cluster, self.profile)
        full = 2 if plan.recompute == "full" else 1
        if plan.pairs_passes:
            # paired chunks (engine): a layer's all-to-alls of F and B hide behind its F and B compute,
            # which they slow by the profile's all-to-all overlap slowdown while they run
            work, comm = lt["fwd"] + lt["bi"] + lt["bw"], ep * (1 + full)
            slow = self.profile.overlap_slowdown.get("all_to_all", 0.0)
            left = max(overlapped_duration(work, comm, slow), comm) - work
            return tp + cp_f, tp * full + cp_b + left
        ep *= 1 - (plan.ep_comm_overlap or 0.0)
        return tp + cp_f + ep, tp * full + cp_b + ep * full

    def _fsdp(self, plan: ParallelPlan, layers: int, f: float, b: float) -> tuple[float, float]:
        """Exposed FSDP gather/scatter per micro-batch (prefetched one layer ahead)."""
        if plan.param_shard <= 1 or layers == 0:
            return 0.0, 0.0
        lt = self._times(self._rep(self.model.num_layers - 1), plan.micro_batch, plan.tp, plan.cp, plan.ep, plan.etp, plan.sp, 1.0)
        stride = plan.tp
        g = self.comm("all_gather", lt["params"] * self.training.param_bytes, plan.shard_degree, stride)
        rs = self.comm("reduce_scatter", lt["params"] * plan.grad_dtype_bytes, plan.shard_degree, stride)
        return flow_shop([f / layers] * layers, [g] * layers), flow_shop([b / layers] * layers, [g + rs] * layers) + rs

    def _bubble(self, plan: ParallelPlan, f: float, b: float, w: float) -> float:
        p = plan.pp
        match plan.schedule:
            case "interleaved":
                return (p - 1) * (f + b) / plan.vpp
            case "zb-h1":
                return (p - 1) * max(f + b - w, (f + b + w) / 3)
            case "dualpipe":
                # DeepSeek-V3 report Table 2: (PP/2 - 1)(F&B + B - 3W), F&B = f + b + w unoverlapped
                return (p / 2 - 1) * (f + 2 * b - 2 * w)
        return (p - 1) * (f + b + w)

    def _p2p(self, plan: ParallelPlan) -> float:
        size = plan.micro_batch * self.training.seq_len / plan.cp * self.model.hidden_size * self.training.activation_bytes
        size /= plan.tp if plan.sp else 1
        return self.comm("send_recv", size, 2, plan.tp * plan.cp * plan.dp)

    def _rep(self, i: int) -> int:
        """The representative layer of layer ``i``'s kind (the first layer of the same kind)."""
        m = self.model
        return next(j for j in range(m.num_layers)
                    if (m.layer_kind(j), m.is_moe_layer(j)) == (m.layer_kind(i), m.is_moe_layer(i)))

    def _stage_params(self, plan: ParallelPlan, groups: tuple[tuple[int, int], ...]) -> tuple[float, float]:
        """(dense, expert) parameters on one device of the busiest stage, embedding or head included."""
        dense = expert = 0.0
        for i, n in groups:
            if n:
                lt = self._times(i, 1, plan.tp, plan.cp, plan.ep, plan.etp, plan.sp, 1.0)
                dense += n * (lt["params"] - lt["expert"])
                expert += n * lt["expert"]
        ends = max(self.model.embedding_params(), self.model.head_params()) / plan.tp
        copies = 2 if plan.schedule == "dualpipe" else 1  # DualPipe holds two stages per device
        return copies * (dense + (ends if plan.pp > 1 else 2 * ends)), copies * expert

    def _dp_and_optimizer(self, plan: ParallelPlan, groups: tuple[tuple[int, int], ...], f: float, b: float) -> tuple[float, float, tuple[float, float]]:
        dense, expert = self._stage_params(plan, groups)
        edp = plan.expert_dp
        opt = optimizer_time(plan.sharded_state(dense, expert), self.cluster.accelerator, self.profile)
        if plan.param_shard > 1:
            return 0.0, opt, (dense, expert)
        kind = "reduce_scatter" if plan.zero in (1, 2) else "all_reduce"
        grads = self.comm(kind, dense * plan.grad_dtype_bytes, plan.dp * plan.cp, plan.tp)
        grads += self.comm(kind, expert * plan.grad_dtype_bytes, edp, plan.ep * plan.etp)
        hidden = b * (1 - 1 / max(1, math.ceil(dense * plan.grad_dtype_bytes / plan.bucket_size))) if plan.overlap_grad_reduce else 0.0
        gather = self._param_gather(plan, dense, expert)
        if plan.overlap_param_gather:  # layer by layer ahead of the first forward f: its lead
            layers = max(1, sum(n for _, n in groups))
            gather = max(gather / layers, gather - f) if gather else 0.0
        return max(0.0, grads - hidden) + gather, opt, (dense, expert)

    def _param_gather(self, plan: ParallelPlan, dense: float, expert: float) -> float:
        """ZeRO-1/2 weight all-gathers: the dense part over dp*cp, the routed experts' over the
        expert-DP group (``step.lower_dp.param_gathers``, which cites Megatron-LM's expert buffers)."""
        if plan.zero not in (1, 2):
            return 0.0
        wbytes = self.training.param_bytes
        return (self.comm("all_gather", dense * wbytes, plan.dp * plan.cp, plan.tp)
                + self.comm("all_gather", expert * wbytes, plan.expert_dp, plan.ep * plan.etp))

    def _memory(self, plan: ParallelPlan, m: int, groups: tuple[tuple[int, int], ...], params: tuple[float, float]) -> float:
        t = self.training
        dense, expert = params
        opt = plan.sharded_state(dense, expert, t.master_param_bytes + t.optimizer_state_bytes)
        states = (dense + expert) * (t.param_bytes / plan.param_shard + plan.grad_dtype_bytes / plan.grad_shard) + opt
        acts = 0.0
        for i, n in groups:
            if n:
                acts += n * self._acts(i, plan.micro_batch, plan.tp, plan.cp, plan.sp, plan.recompute, plan.ep, plan.etp,
                                       plan.recompute_saved)
        inflight = _in_flight(plan, m)
        head = head_activation_bytes(self.model, micro_batch=plan.micro_batch, seq_len=t.seq_len, tp=plan.tp, cp=plan.cp, sp=plan.sp)
        head *= 1 if plan.pp > 1 else inflight
        return states + acts * inflight + head + self._dispatch_buffers(plan, groups) + RESERVED_BYTES

    def _dispatch_buffers(self, plan: ParallelPlan, groups: tuple[tuple[int, int], ...]) -> float:
        """One MoE layer's dispatch copies when the stage has an MoE layer, once per stage (what
        ``step.partition`` counts under ``buffers``: ``workloads.moe_dispatch_buffer_bytes``)."""
        if not any(n and self.model.is_moe_layer(i) for i, n in groups):
            return 0.0
        t = self.training
        return moe_dispatch_buffer_bytes(self.model, micro_batch=plan.micro_batch, seq_len=t.seq_len, tp=plan.tp,
                                         cp=plan.cp, etp=plan.etp, dtype_bytes=t.activation_bytes,
                                         gemm_input_bytes=t.gemm_input_bytes)


def _in_flight(plan: ParallelPlan, m: int) -> float:
    """Micro-batches of a full stage's activations held at once on the first stage."""
    match plan.schedule:
        case "gpipe":
            return float(m)
        case "interleaved":
            chunks = min((plan.pp - 1) * 2 + (plan.vpp - 1) * plan.pp + 1, m * plan.vpp)
            return chunks / plan.vpp
        case "dualpipe":
            return float(min(plan.pp + 1, m))
    return float(min(plan.pp, m))
