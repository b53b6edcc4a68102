"""Phase 2: the time of each op on one accelerator.

Roofline per op: max(FLOP / (peak * efficiency(op)), bytes / (HBM bandwidth * memory efficiency))
plus a launch overhead per kernel the op launches (``Op.calls``), and the same time split by where it goes (``COMPUTE_PARTS``). The efficiency curve comes from the calibration profile (data, not code).
Owns nothing about communication or scheduling.
"""

from __future__ import annotations

from typing import Iterable, Literal

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.profile import CalibrationProfile
from clustersim.topologies import AcceleratorSpec
from clustersim.topologies.power import clock_fraction
from clustersim.workloads import ModelSpec, Op

Pass = Literal["fwd", "bwd", "bwd_input", "bwd_weight"]


ADAM_BYTES_PER_PARAM = 34.0
"""HBM traffic of one fused Adam step per parameter (bytes): reads fp32 grad, master weight, m
and v (16 B); writes master, m, v (12 B), the bf16 weight (2 B) and zeroes the grad (4 B)."""


def peak_for(accelerator: AcceleratorSpec, precision: str, fp8_op: bool) -> float:
    """Dense peak FLOP/s of the op's math precision (fp8 only for fp8-eligible GEMMs)."""
    peaks = accelerator.peak_flops
    key = {"fp8": "fp8" if fp8_op else "bf16", "fp32": "fp32"}.get(precision, precision)
    if key not in peaks:
        key = "bf16" if "bf16" in peaks else next(iter(peaks))
    return float(peaks[key])


def _flops_bytes(op: Op, which: Pass) -> tuple[float, float]:
    match which:
        case "fwd":
            return op.flops, op.bytes
        case "bwd":
            return op.bwd_flops, op.bwd_bytes
        case "bwd_input":
            # Input gradient: for a GEMM half the backward FLOP (dX = dY W^T); attention and
            # elementwise backward belong here entirely (they have no weight gradient).
            share = 0.5 if op.kind == "gemm" else 1.0
            return op.bwd_flops * share, op.bwd_bytes * share
        case "bwd_weight":
            share = 0.5 if op.kind == "gemm" else 0.0
            return op.bwd_flops * share, op.bwd_bytes * share
    raise ValueError(f"unknown pass {which!r}")


FP8_CAST_BYTES_PER_ELEMENT = 4.0
"""HBM bytes per element of one FP8 quantize kernel: the bf16 read (2 B) and the two FP8 copies
written, rowwise for this GEMM and columnwise (transposed) for the backward's other GEMM, 1 B each
(Transformer Engine's quantizers with rowwise and columnwise usage: transformer_engine/pytorch/
module/grouped_linear.py @ 0069563f606859d4fb5d663e1c92509a30e99f35 sets the input quantizers'
usage before ``tex.fused_multi_quantize``). MXFP8's one-byte scale per 32 values and current
scaling's amax pass are left out (a lower bound)."""


def fp8_cast_time(op: Op, accelerator: AcceleratorSpec, profile: CalibrationProfile, precision: str,
                  which: Pass, imbalance: float = 1.0) -> float:
    """Seconds of the separate FP8 quantize kernels ``op`` runs before its GEMMs in an FP8 run
    (``Op.quantize_elements``, ``FP8_CAST_BYTES_PER_ELEMENT`` each, memory bound at the profile's
    HBM efficiency; the busiest expert rank's ``imbalance``): the input's in the forward, the
    output gradient's in the backward, before the input-gradient GEMM (none in ``bwd_weight``)."""
    if precision != "fp8" or not op.fp8:
        return 0.0
    fwd, bwd = op.quantize_elements
    elements = {"fwd": fwd, "bwd": bwd, "bwd_input": bwd, "bwd_weight": 0.0}[which]
    if elements <= 0:
        return 0.0
    return FP8_CAST_BYTES_PER_ELEMENT * elements * imbalance / (accelerator.hbm_bandwidth * profile.memory_efficiency)


def gemm_curve_flops(flops: float, peak: float, reference: float | None) -> float:
    """Where on the GEMM curve a call of ``flops`` FLOP runs on a part whose peak is ``peak``: at the
    FLOP that takes as long at peak on the ``reference`` part (``CalibrationProfile.gemm_curve_peak``),
    or at ``flops`` itself without one."""
    return flops if reference is None else flops * reference / peak


def gemm_call_flops(op: Op, flops: float, imbalance: float = 1.0) -> float:
    """FLOP of one GEMM call of ``op`` for a pass of ``flops`` FLOP: the whole op, except a routed
    expert's grouped GEMM, whose calls are its experts' GEMMs, one per local expert (Transformer
    Engine's GroupedLinear issues one cuBLAS GEMM per expert), of the tokens each expert receives
    (the busiest rank's: ``imbalance`` times the mean). So the efficiency curve sees the expert's
    shape: small experts of a few hundred tokens run far below a dense GEMM's rate."""
    if op.role != "routed_expert" or op.gemm_shape is None or op.flops <= 0:
        return flops
    m, n, k = op.gemm_shape
    return flops * (2.0 * m * n * k) / op.flops * imbalance


def op_time(
    op: Op,
    accelerator: AcceleratorSpec,
    profile: CalibrationProfile,
    precision: str,
    which: Pass = "fwd",
    flops_scale: float = 1.0,
    imbalance: float = 1.0,
) -> float:
    """Seconds for one pass of ``op``; ``flops_scale`` stretches its math and memory (expert
    imbalance, expert efficiency), ``imbalance`` sizes a routed expert's GEMM calls."""
    if op.kind == "alltoall_marker":
        return 0.0  # its bytes are network payload (priced by the EP all-to-all), not HBM traffic
    flops, nbytes = _flops_bytes(op, which)
    flops *= op.causal_flops_fraction  # a causal kernel skips the masked half of s x s
    if flops <= 0 and nbytes <= 0:
        return 0.0
    peak = peak_for(accelerator, precision, op.fp8)
    if op.kind == "attention":
        eff = profile.attention_eff(flops) * profile.attention_kernel_efficiency.get(op.kernel, 1.0)
    elif op.kind in ("gemm", "bmm"):
        eff = profile.gemm_eff(gemm_curve_flops(gemm_call_flops(op, flops, imbalance), peak, profile.gemm_curve_peak)) * (
            profile.precision_efficiency.get("fp8", 1.0) if precision == "fp8" and op.fp8 else 1.0)
    else:
        eff = 1.0
    # a board power cap lowers the sustained clock, so the math peak (topologies.power.clock_fraction)
    math = flops * flops_scale / (peak * eff * clock_fraction(accelerator)) if flops > 0 else 0.0
    memory = nbytes * flops_scale / (accelerator.hbm_bandwidth * profile.memory_efficiency)
    cast = fp8_cast_time(op, accelerator, profile, precision, which, imbalance)
    return max(math, memory) + cast + profile.kernel_overhead * op.calls + expert_call_overhead(op, profile, which)


def expert_call_overhead(op: Op, profile: CalibrationProfile, which: Pass) -> float:
    """Seconds the routed-expert GEMM ``op`` pays per call on the unfused grouped path
    (``profile.expert_call_time`` x its calls, one per local expert, ``Op.calls``): the backward
    runs two GEMMs per expert (input and weight gradients), each pass alone one. 0 for other ops."""
    if profile.expert_call_time <= 0 or op.role != "routed_expert" or op.kind != "gemm":
        return 0.0
    return profile.expert_call_time * op.calls * (2 if which == "bwd" else 1)


COMPUTE_PARTS: tuple[str, ...] = (
    "gemm_ideal", "gemm_efficiency_loss", "attention_kernel", "elementwise", "recompute", "overhead",
)
"""Where compute time goes: GEMM FLOPs at peak; the rest of the GEMMs' time (efficiency curve,
memory-bound GEMMs, expert imbalance); attention kernels; memory-bound element-wise ops (norms,
activations, residuals, embedding, loss, router); the recomputed forward; per-kernel launch overhead."""


def op_time_parts(
    op: Op,
    accelerator: AcceleratorSpec,
    profile: CalibrationProfile,
    precision: str,
    which: Pass = "fwd",
    flops_scale: float = 1.0,
    imbalance: float = 1.0,
) -> dict[str, float]:
    """``op_time`` split into ``COMPUTE_PARTS`` (no recompute: the caller knows what is recomputed);
    the parts sum to ``op_time`` with the same arguments."""
    parts = dict.fromkeys(COMPUTE_PARTS, 0.0)
    total = op_time(op, accelerator, profile, precision, which, flops_scale, imbalance)
    if total <= 0:
        return parts
    cast = fp8_cast_time(op, accelerator, profile, precision, which, imbalance)
    fixed = profile.kernel_overhead * op.calls + expert_call_overhead(op, profile, which)
    busy = total - fixed - cast
    parts["overhead"] = fixed
    parts["elementwise"] = cast  # the quantize kernels are memory-bound element-wise work
    if op.kind in ("gemm", "bmm"):
        flops = _flops_bytes(op, which)[0] * op.causal_flops_fraction
        ideal = min(busy, flops / peak_for(accelerator, precision, op.fp8))
        parts["gemm_ideal"], parts["gemm_efficiency_loss"] = ideal, busy - ideal
    elif op.kind == "attention":
        parts["attention_kernel"] = busy
    else:
        parts["elementwise"] += busy
    return parts


def ops_time_parts(
    ops: Iterable[Op],
    accelerator: AcceleratorSpec,
    profile: CalibrationProfile,
    precision: str,
    which: Pass = "fwd",
    expert_scale: float = 1.0,
) -> dict[str, float]:
    """``ops_time`` split into ``COMPUTE_PARTS`` (sums to ``ops_time`` with the same arguments)."""
    out = dict.fromkeys(COMPUTE_PARTS, 0.0)
    seen: dict[int, tuple[Op, dict[str, float]]] = {}  # by identity (see ``ops_time``)
    for op in ops:
        hit = seen.get(id(op))
        if hit is None:
            scale, imbalance = expert_scales(op, profile, expert_scale)
            hit = seen[id(op)] = (op, op_time_parts(op, accelerator, profile, precision, which, scale, imbalance))
        for k, v in hit[1].items():
            out[k] += v
    return out


def ops_time(
    ops: Iterable[Op],
    accelerator: AcceleratorSpec,
    profile: CalibrationProfile,
    precision: str,
    which: Pass = "fwd",
    expert_scale: float = 1.0,
) -> float:
    """Summed seconds of ``ops`` for one pass; routed-expert ops stretched by ``expert_scale``. An op
    listed again (``step.partition.LayerMemo`` shares a layer's ops between layers of one signature)
    is priced once; the sum runs over every listing in order, as before."""
    seen: dict[int, tuple[Op, float]] = {}  # by identity; holding the op keeps its id unique for the call

    def one(op: Op) -> float:
        hit = seen.get(id(op))
        if hit is None:
            hit = seen[id(op)] = (op, op_time(op, accelerator, profile, precision, which, *expert_scales(op, profile, expert_scale)))
        return hit[1]
    return sum(one(op) for op in ops)


def expert_scales(op: Op, profile: CalibrationProfile, imbalance: float) -> tuple[float, float]:
    """(flops_scale, imbalance) of ``op``: the busiest expert rank's ``imbalance`` times the mean
    tokens stretches every routed-expert op (GEMMs and their activation) and the dispatcher's sort, the profile's
    ``expert_efficiency`` its GEMMs; other ops run at 1."""
    if op.role == "expert_sort":  # the busiest rank copies imbalance x the mean tokens
        return imbalance, imbalance
    if op.role != "routed_expert":
        return 1.0, 1.0
    return (imbalance / profile.expert_efficiency if op.kind == "gemm" else imbalance), imbalance


def expert_path(profile: CalibrationProfile, fused: bool, local_experts: int = 0) -> CalibrationProfile:
    """The profile a plan's compute runs at: with a fused grouped MLP (``plan.moe_fused_grouped_mlp``)
    the routed-expert GEMMs run on the dense GEMM curve at one expert's shape (``expert_efficiency``
    1: NVIDIA's fused kernels are 1.3-2x faster than the unfused path the efficiency describes,
    ``profile.GROUPED_GEMM_EFFICIENCY_PRIOR``); so do they where a rank holds one expert
    (``local_experts`` 1): the unfused path's grouped GEMM is then one GEMM over one split
    (Transformer Engine's ``GroupedLinear`` with ``num_gemms`` 1: one cuBLAS call on one stream, one
    quantisation of one input), which is a dense ``Linear``, and the efficiency describes the grouping
    of several. Otherwise (a dense model: 0) ``profile`` unchanged."""
    lifted = fused or local_experts == 1
    if not lifted or (profile.expert_efficiency == 1.0 and profile.expert_call_time == 0.0):
        return profile
    return profile.replace(expert_efficiency=1.0, expert_call_time=0.0)


def local_experts(model: ModelSpec, plan: ParallelPlan) -> int:
    """Routed experts one rank holds: ``num_experts / ep`` (0 for a dense model)."""
    return model.num_experts // max(1, plan.ep) if model.is_moe else 0


def is_routed_expert(op: Op) -> bool:
    """True for the routed-expert GEMMs of a MoE layer (not their activation, not shared experts,
    not the router)."""
    return op.role == "routed_expert" and op.kind == "gemm"


def optimizer_time(
    params_local: float, accelerator: AcceleratorSpec, profile: CalibrationProfile
) -> float:
    """Adam step on the local shard: memory bound, ~16 bytes read + 16 written per param.

    Reads fp32 grad, master weight, m and v (16 B); writes master, m, v (12 B) and the bf16
    weight (2 B), plus grad zeroing; ~34 B/param, the fused Apex/TE Adam traffic.
    """
    return params_local * ADAM_BYTES_PER_PARAM / (accelerator.hbm_bandwidth * profile.optimizer_efficiency)
