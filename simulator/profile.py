"""Calibration profiles: the measured efficiencies that turn peak figures into real times.

Owns the ``CalibrationProfile`` model (validated, YAML round trip), the efficiency-curve lookups
and the bundled default profiles (``simulator/calibration/profiles/*.yaml``, data not code). It does not
measure anything (that is ``clustersim.simulator.calibration.torch_backend``) nor fit curves (``clustersim.simulator.calibration.fit``).

It sits beside ``errors.py``, outside the rooms, because every tier reads it: behind the
calibration face (which imports the fit, hence the step) the network's import of it would close a
cycle. The fit command still writes the YAML files into the calibration room's ``profiles/``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal, Mapping

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clustersim.files import write_atomic
from clustersim.simulator.errors import CalibrationError
from clustersim.topologies import Cluster, TopologyError, cpu_accelerator, cpu_loopback
from clustersim.topologies.accelerators import normalise_gpu

PROFILE_DIR = Path(__file__).parent / "calibration" / "profiles"


def _check_curve(points: list[tuple[float, float]], field: str) -> list[tuple[float, float]]:
    """A curve is >= 1 (x, efficiency) point, x > 0 increasing, 0 < efficiency <= 1."""
    if not points:
        raise ValueError(f"{field} needs at least one (x, efficiency) point")
    xs = [p[0] for p in points]
    if any(x <= 0 for x in xs) or xs != sorted(xs):
        raise ValueError(f"{field}: x values must be positive and increasing, got {xs}")
    if any(not 0 < p[1] <= 1 for p in points):
        raise ValueError(f"{field}: efficiencies must lie in (0, 1], got {[p[1] for p in points]}")
    return points


FACTOR_KEYS: dict[str, tuple[str, ...]] = {"precision_efficiency": ("fp8", "fp4"),
                                           "attention_kernel_efficiency": ("flash3", "flash2")}
"""The keys each multiplier table of a profile accepts."""


PIPELINE_FILL_BYTES = 32 * 2**20
"""Bytes of a collective that move at half rate while NCCL's pipeline fills (8 channels x 4 MiB
NCCL_BUFFSIZE default, NCCL environment-variable docs). One default for every fabric; it reproduces
the mid-size ramp of the bundled nccl-tests sweeps (workloads/data/collective_bandwidth.csv); a
profile's ``pipeline_fill_bytes`` sets it."""


OVERLAP_SLOWDOWN_KINDS: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_to_all")
"""The collective kinds ``CalibrationProfile.overlap_slowdown`` takes: the FSDP/ZeRO and TP gathers
and scatters, and the EP dispatch and combine of a paired schedule."""
OVERLAP_SLOWDOWN_MEASURED = 0.189
"""Mean computational slowdown of GPT and Llama layers when their compute overlaps collective
communication, against the same compute alone, on 4x A100, H100, MI250 and MI210: 18.9 % (at most
40.0 %). Source: "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
Learning: Performance and Power Implications", arXiv:2507.03114 (July 2025), abstract. One figure
for every collective kind (the abstract gives no split by kind)."""
GPU_VARIABILITY_VARIATION = 0.08
"""Average performance variation across the GPUs of one SKU inside one cluster: 8 % (22 % at most,
the worst application and cluster; outliers up to 1.5x slower than the median GPU), SGEMM, ResNet-50,
BERT, LAMMPS and PageRank (the artifact's experiments) on >90 % of the GPUs of five clusters (Summit,
Vortex, Frontera, Longhorn, Corona; NVIDIA and AMD GPUs), >18,800 hours of data. Source: Sinha et al., "Not All GPUs Are Created
Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems", SC'22,
arXiv:2208.11035v3, abstract."""
GPU_VARIABILITY_CV_MEASURED = round(GPU_VARIABILITY_VARIATION / (4.0 * 1.349), 4)
"""``gpu_variability_cv`` from ``GPU_VARIABILITY_VARIATION``: 0.0148. The variation is read as the
spread of the box plots' whiskers over the median, outliers excluded (the abstract quotes the
outliers apart): for a normal sample of thousands the whiskers sit at the 1.5 IQR fences, a spread
of 4 IQR = 4 x 1.349 sigma. The paper's body is not at hand; its artifact states the statistic: the
"Percent Variability" of its plot script is (Q3 + 1.5 IQR - (Q1 - 1.5 IQR)) / median = 4 IQR / median
of the per-GPU normalised performance, box plots drawn without fliers (hal-uw/gpu_variability_sc22_artifact,
plot_script/plot_aggregated.py @ bc84e72e77297d2e6750d1ec18951fe536744eac, the closing block), so
the interquartile reading (0.08 / 1.349 = 0.059) is not the paper's."""
GROUPED_GEMM_EFFICIENCY_PRIOR = 0.62
"""Prior of ``expert_efficiency`` (the routed-expert GEMMs' rate against the dense GEMM curve read at
one expert's shape) where no MoE row sets it: Megatron-Core's unfused MoE MLP path (Transformer
Engine GroupedLinear, a separate activation and quantisation pass, host-synced token counts) runs
1.3x-2x slower at kernel level than NVIDIA's fused grouped-GEMM kernels (R. Garg, M. Nicely,
"Boosting MoE Training Throughput with Advanced Fusion Kernels", NVIDIA Technical Blog,
2026-06-15: "1.3x-2x kernel-level speedup over unfused paths"; 93 % end to end on GPT-OSS, 8 % on
DeepSeek-V3). The prior is the geometric middle of that range, 1 / sqrt(1.3 x 2.0) = 0.62 (range
0.50-0.77). An independent figure agrees with its low end: TE GroupedLinear 1.87-2.11x slower than
a loop of per-expert ``F.linear`` calls, 8x B300 BF16, EP2, 4 experts per rank, seq 8192
(NVIDIA/TransformerEngine issue 2939), i.e. 0.47-0.53 of the dense GEMM at the expert's shape."""
HOST_LAUNCH_RANGE = (5e-6, 25e-6)
"""CPU seconds one eager PyTorch op costs before its kernel runs (Python, autograd and ATen
dispatch, ``cudaLaunchKernel``): ~5-25 us (J. Lin, "From PyTorch op to kernel launch",
https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html, table "What each
layer actually does"; the same source as ``fit_params.Bounds.max_kernel_overhead``). The range a
profile's ``host_launch_time`` is checked against when set from a measurement (``step.host``)."""
SYNC_JITTER_MAX = 0.15
"""Upper bound of ``sync_jitter_cv``: at 0.15 the slowest of 512 ranks already waits 42 % of its
compute (``step.jitter.sync_wait_fraction``), more than any weak-scaling loss the bundled table
publishes (MosaicML, +2-11 % from 128 to 512 GPUs)."""


SYNC_JITTER_CV_MEASURED = 0.0209
"""``sync_jitter_cv`` measured on one NVIDIA H200 (December 2026): one fixed chunk of 32 bf16 GEMMs
of 8192 x 8192 x 8192 (median 53.6 ms) run 400 times back to back, each pass timed with CUDA events;
the folded lognormal of ``step.jitter`` at cv 0.0209 reproduces the chunk's E[max of N passes] /
mean for N = 8 ... 1,024 (1.021 / 1.038 / 1.052 / 1.057 against 1.017 / 1.036 / 1.054 / 1.058 at
N = 8 / 64 / 512 / 1,024). Script ``benchmarks/gpu_step_jitter.py``, data
``benchmarks/results/h200_step_jitter.csv``, figures ``benchmarks/results/README.md`` (section
h200_step_jitter.csv). One GPU's pass-to-pass jitter: the floor of what ranks add (no network, no
other host, no GPU-to-GPU difference); a 6.43 ms chunk of the same run needs cv 0.090
(``SYNC_JITTER_CV_SHORT``): shorter passes jitter more."""
SYNC_JITTER_PASS_S = 53.6e-3
"""Median pass length (s) of the chunk ``SYNC_JITTER_CV_MEASURED`` was measured on."""
SYNC_JITTER_CV_SHORT = 0.090
"""``sync_jitter_cv`` of the 6.43 ms chunk of the same H200 run (8 bf16 GEMMs of 4096 x 8192 x
8192; E[max of N] / mean 1.078 / 1.202 / 1.250 / 1.252 at N = 8 / 64 / 512 / 1,024; same script,
data and README section as ``SYNC_JITTER_CV_MEASURED``)."""
SYNC_JITTER_SHORT_PASS_S = 6.43e-3
"""Median pass length (s) of the chunk ``SYNC_JITTER_CV_SHORT`` was measured on."""


EAGER_PASSES: tuple[str, ...] = ("fwd", "bwd", "optimizer")
"""Keys of ``CalibrationProfile.eager_layer_overhead``."""


class CalibrationProfile(BaseModel):
    """Efficiencies and overheads of one kind of system, measured or defaulted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    source: str = "clustersim defaults"
    fit_date: str = ""
    """ISO date the profile was fitted ("" when not recorded); reports print it next to the name."""
    gemm_efficiency: list[tuple[float, float]] = Field(
        default=[(1e6, 0.05), (1e9, 0.45), (1e11, 0.75), (1e13, 0.80)]
    )
    """(FLOP per GEMM call, fraction of peak achieved), interpolated in log10(FLOP)."""
    gemm_curve_peak: float | None = Field(default=None, gt=0)
    """The peak (FLOP/s) whose calls ``gemm_efficiency``'s x-axis counts: a call of F FLOP on a part of
    peak P is read at F x this / P, the size that takes as long at peak on that part
    (``step.compute.gemm_curve_flops``), so one curve shape serves parts of different peaks. The
    bundled profiles: H100 SXM's BF16 peak (``GEMM_CURVE_REFERENCE_PEAK``). None: the curve counts
    the part's own FLOP (a profile fitted on one machine, the torch backend's)."""
    attention_efficiency: list[tuple[float, float]] = Field(
        default=[(1e6, 0.05), (1e9, 0.35), (1e11, 0.60), (1e13, 0.65)]
    )
    """(FLOP per attention call, fraction of peak), as for GEMMs."""
    memory_efficiency: float = Field(default=0.80, gt=0, le=1)
    """Fraction of HBM bandwidth reached by memory-bound (elementwise, norm) kernels."""
    kernel_overhead: float = Field(default=3e-6, ge=0)
    """Seconds of launch and scheduling overhead per op."""
    host_launch_time: float = Field(default=0.0, ge=0, le=1e-3)
    """CPU seconds to issue one kernel (``step.host``): the host runs ahead of the GPU until a
    device-to-host sync (a dropless MoE dispatcher's token counts), so a stretch between syncs takes
    max(GPU time, kernels x this). 0 (the default): the host never binds. Measured size:
    ``HOST_LAUNCH_RANGE`` (5-25 us per eager op)."""
    link_efficiency: dict[str, float] = Field(
        default={"nvlink": 0.80, "nic": 0.85, "fabric": 0.95, "pcie": 0.80, "loopback": 1.0,
                 "in_network_reduction": 0.76}
    )
    """Fraction of a link class's nominal bandwidth that collectives reach; ``in_network_reduction``
    scales NVLS/SHARP reductions (fitted to 8x H100/H200 nccl-tests: 480 GB/s busbw, not 630)."""
    link_latency: dict[str, float] = Field(default={})
    """Per-hop latency by link class in seconds; overrides the graph's edge latency when set."""
    collective_overhead: float = Field(default=14e-6, ge=0)
    """Seconds of software overhead per collective call (launch, proxy, handshake)."""
    p2p_overhead: float = Field(default=10e-6, ge=0)
    """Seconds of software overhead per point-to-point message."""
    pipeline_fill_bytes: float = Field(default=PIPELINE_FILL_BYTES, ge=0)
    """Bytes of a collective that move at half rate while NCCL's pipeline fills (fitted to the
    mid-size part of the nccl-tests sweeps in workloads/data/collective_bandwidth.csv)."""
    optimizer_efficiency: float = Field(default=0.60, gt=0, le=1)
    """Fraction of HBM bandwidth reached by the fused optimizer step."""
    precision_efficiency: dict[str, float] = Field(default={})
    """Multiplier on the GEMM efficiency curve for GEMMs run at a low-precision peak, keyed by
    "fp8" (FP8 and MXFP8 recipes) and "fp4" (NVFP4): quantisation and scaling kernels keep them
    further from their doubled peak. 1.0 when a key is absent."""
    attention_kernel_efficiency: dict[str, float] = Field(default={})
    """Multiplier on the attention curve for an older fused kernel, keyed by
    ``TrainingSpec.attention_kernel`` ("flash2": FlashAttention 1/2 and Triton kernels, which predate
    the Hopper-specific ones the curve describes). 1.0 when a key is absent."""
    expert_efficiency: float = Field(default=1.0, gt=0, le=1)
    """Multiplier on the efficiency of routed-expert (grouped) GEMMs of MoE layers: token
    permutation, padding and many small per-expert GEMMs keep them below a dense GEMM's rate. Not
    applied where a rank holds one expert or runs the fused grouped MLP (``step.compute.expert_path``)."""
    expert_call_time: float = Field(default=0.0, ge=0, le=1e-3)
    """GPU seconds each routed-expert GEMM call costs beyond its FLOPs on the unfused grouped path
    (Transformer Engine's ``GroupedLinear``: one GEMM per local expert and pass, each with its own
    split, quantisation and wave tail; ``step.compute.expert_call_overhead``): a fixed time per call,
    so many small experts pay it often against little math and a few large ones rarely against
    much. 0 (the default) where a rank holds one expert or runs the fused grouped MLP."""
    collective_laws: dict[str, tuple[float, float]] = Field(default={})
    """Measured (alpha seconds, bus bandwidth bytes/s) of each collective kind on the machine a
    profile was fitted on (``calibrate fit``: Theil-Sen fit of the collective sweep, e.g. gloo over
    loopback). Empty for datasheet profiles; ``calibrate check`` prices each plan's collectives
    with the laws of the kinds that plan runs."""
    framework_overhead: dict[str, float] = Field(default={})
    """Seconds per collective call as torch's parallel frameworks issue them, keyed by
    ``ddp``, ``fsdp`` (FSDP2), ``tp`` and ``tp-sp`` (DTensor): hooks, DTensor dispatch and
    redistribution plus the transport's alpha, measured by a microbenchmark of the API calls
    (``calibrate measure``), never fitted to step times. Empty for datasheet profiles."""
    blocking_call_wait: float = Field(default=0.0, ge=0, le=1.0)
    """Seconds a collective or point-to-point call costs beyond its back-to-back price because the
    rank blocks on it right after a stretch of compute: the wait for the peer that reaches the call
    later and the wake-up of communication threads that went idle while the rank computed. Added
    to every call the pricer prices (``network.pricing.CommPricer``): on the CPU backend every call
    blocks (gloo runs on the rank's one core, nothing overlaps: ``torch_backend.check.parallel_plan``),
    a DTensor TP call by construction (the next op needs its result). Measured by ``calibrate
    measure``'s TP-call microbenchmark (``microbench_comm.tp_call_entry``: the TP message's all-reduce
    after a GEMM chunk, less the chunk, minus the same call back to back, interleaved sample by
    sample; ``fit_comm.blocking_call_wait``), never fitted to step times. 0 (the default: datasheet
    profiles, one rank, folders measured before it): none."""
    ecmp_routing: Literal["adaptive", "hash"] = "adaptive"
    """How switches spread flows over equal-cost uplinks: ``adaptive`` splits every flow ideally
    (adaptive routing / packet spraying, InfiniBand with AR as in DGX SuperPOD); ``hash`` pins each
    flow to one uplink by its header hash (RoCE ECMP, static IB routes), so the busiest edge-tier
    port gates a step (``clustersim.simulator.network.ecmp``; flow fidelity only)."""
    overlap_slowdown: dict[str, float] = Field(default={})
    """Fraction by which compute slows while a prefetched collective of that kind runs beside it
    (keys ``OVERLAP_SLOWDOWN_KINDS``; Calculon's "processor usage": NCCL's kernels take SMs
    and HBM bandwidth), applied to the FSDP/ZeRO-3 layer gathers and scatters and the ZeRO-1/2
    parameter gathers that run ahead of the forward (``step.lower_dp.flow_shop``), to the GEMMs
    beside the TP gathers and scatters of ``plan.tp_overlap`` (``step.tp_overlap``), and
    (``all_to_all``) to the compute of a paired forward and backward while the EP stream runs their
    dispatch and combine beside it (DualPipe, Megatron-Core's EP overlap; ``step.engine``). Absent: 0.
    Measured size: 18.9 % mean compute slowdown under overlapped communication, 40 % at most
    (``OVERLAP_SLOWDOWN_MEASURED``)."""
    sync_jitter_cv: float = Field(default=0.0, ge=0, le=SYNC_JITTER_MAX)
    """Coefficient of variation of one rank's compute between two synchronisation points (the
    lognormal of the straggler model, folded at 1): every pass waits for the slowest of the dp x cp
    ranks that synchronise with it, E[max of n] / E[one] - 1 of its compute
    (``clustersim.simulator.step.jitter``). 0 (the default): no waiting for stragglers."""
    sync_jitter_law: Literal["constant", "pass_length"] = "constant"
    """How the jitter's cv depends on the pass: ``constant`` (the default) uses ``sync_jitter_cv``
    for every pass; ``pass_length`` reads ``sync_jitter_cv`` as the cv of a 53.6 ms pass and scales
    it per pass with the pass's own compute seconds by the law measured on one H200 (shorter passes
    jitter more: 0.090 at 6.43 ms against 0.0209 at 53.6 ms; ``step.jitter.pass_jitter_cv``)."""
    gpu_variability_cv: float = Field(default=0.0, ge=0, le=SYNC_JITTER_MAX)
    """Coefficient of variation of the speed of one SKU's GPUs inside a cluster, fixed for a run
    (manufacturing and power management; lognormal around the median): a job runs at its slowest
    GPU's pace, each pass waiting E[max over the job's GPUs] / E[one] - 1 of its compute
    (``clustersim.simulator.step.jitter.variability_wait_fraction``). A cited constant, not fitted
    (``GPU_VARIABILITY_CV_MEASURED``, set by the fit beside the other cited constants). 0 (the
    default): every GPU alike."""
    collective_latency: Literal["path", "nccl"] = "path"
    """Latency of a collective call before its bytes move: ``path`` (the default) pays the path
    latency of the fabric's links once per sequential step; ``nccl`` uses NCCL's own tuning model
    (``clustersim.simulator.network.nccl_tuning``: baseLat + per-step hwLat by algorithm, protocol
    and intra/inter-node step, with the protocol (LL / LL128 / Simple) NCCL's tuner picks at that
    size and its bandwidth) for ring, tree and in-switch collectives, in the flow pricer and the
    closed-form tier alike."""
    eager_layer_overhead: dict[str, float] = Field(default={})
    """Seconds of host work per transformer layer per micro-batch that eager PyTorch spends beyond
    its kernels, keyed ``fwd`` and ``bwd`` (per micro-batch) and ``optimizer`` (per step): module
    calls, the dispatcher, autograd nodes, views and the optimizer's loop over the layer's
    parameter tensors. Measured on the backend's own module tree at negligible arithmetic
    (``calibrate measure``'s eager-host microbenchmark, ``fit_compute.host_fit``); the lowering adds what
    the per-op ``kernel_overhead`` of the layer's priced ops leaves of it (``step.host.eager_excess``).
    Empty (the default, datasheet profiles and folders measured before): none."""
    kernels_async: bool = False
    """True where the host only launches the kernels and a device runs them (CUDA): eager host work
    (``eager_layer_overhead``) then overlaps the kernels, a layer's pass taking max(host, device)
    (``step.host.eager_excess``), instead of adding to them as on a CPU rank, whose threads run both.
    Set by the microbenchmark fit from the device it measured (``fit.fit_micro``)."""
    step_overhead: float = Field(default=0.0, ge=0)
    """Seconds per training step outside the modelled phases (data loading, logging)."""
    machine: dict[str, float] = Field(default={})
    """Measured figures of the machine a profile was fitted on (``clustersim.simulator.calibration.fit``), SI units:
    ``peak_flops`` (FLOP/s per rank), ``memory_bandwidth`` (bytes/s), ``memory_capacity`` (bytes),
    ``link_bandwidth`` (bytes/s per direction), ``link_latency`` (s), ``ranks``, ``cores``.
    Empty for datasheet profiles; the "this machine" cluster preset is built from it."""

    @field_validator("gemm_efficiency", "attention_efficiency")
    @classmethod
    def _curve(cls, v: list[tuple[float, float]], info: object) -> list[tuple[float, float]]:
        return _check_curve(v, getattr(info, "field_name", "curve"))

    @field_validator("precision_efficiency", "attention_kernel_efficiency")
    @classmethod
    def _factors(cls, v: dict[str, float], info: object) -> dict[str, float]:
        name = getattr(info, "field_name", "")
        keys = FACTOR_KEYS[name]
        bad = {k: x for k, x in v.items() if k not in keys or not 0 < x <= 2}
        if bad:
            raise ValueError(f"{name}: keys {'/'.join(keys)} with values in (0, 2], got {bad}")
        return v

    @field_validator("eager_layer_overhead")
    @classmethod
    def _eager(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if k not in EAGER_PASSES or not 0 <= x < 1}
        if bad:
            raise ValueError(f"eager_layer_overhead: keys {'/'.join(EAGER_PASSES)} with seconds in [0, 1), got {bad}")
        return v

    @field_validator("overlap_slowdown")
    @classmethod
    def _slowdowns(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if k not in OVERLAP_SLOWDOWN_KINDS or not 0 <= x <= 1}
        if bad:
            raise ValueError(f"overlap_slowdown: keys {'/'.join(OVERLAP_SLOWDOWN_KINDS)} with values in [0, 1], got {bad}")
        return v

    @field_validator("link_efficiency")
    @classmethod
    def _fractions(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not 0 < x <= 1}
        if bad:
            raise ValueError(f"link_efficiency values must lie in (0, 1], got {bad}")
        return v

    def gemm_eff(self, flops: float) -> float:
        """Efficiency of one GEMM call of ``flops`` FLOP."""
        return _interp_log(self.gemm_efficiency, flops)

    def attention_eff(self, flops: float) -> float:
        """Efficiency of one attention call of ``flops`` FLOP."""
        return _interp_log(self.attention_efficiency, flops)

    def link_eff(self, link_class: str) -> float:
        """Efficiency of a link class (1.0 when the profile does not name it)."""
        return self.link_efficiency.get(link_class, 1.0)

    def replace(self, **changes: object) -> "CalibrationProfile":
        """A copy with ``changes`` applied and validated."""
        return CalibrationProfile(**{**self.model_dump(), **changes})


def _interp_log(points: list[tuple[float, float]], x: float) -> float:
    return _interp_log_of(tuple(points), x)


@lru_cache(maxsize=1 << 16)
def _interp_log_of(points: tuple[tuple[float, float], ...], x: float) -> float:
    """The curve's value at ``x`` (interpolated in log x), remembered by the curve's points and x:
    the engine asks for the same few GEMM and attention sizes thousands of times per step."""
    xs = np.log10([p[0] for p in points])
    ys = [p[1] for p in points]
    return float(np.interp(np.log10(max(x, 1.0)), xs, ys))


def load_profile(path: str | os.PathLike[str] | Mapping[str, object]) -> CalibrationProfile:
    """Read a profile from a YAML file (or a mapping); errors name the file and the field."""
    where = "<mapping>" if isinstance(path, Mapping) else str(path)
    try:
        data = path if isinstance(path, Mapping) else yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise CalibrationError(f"calibration profile {where} does not exist; pass an existing YAML file") from None
    except yaml.YAMLError as exc:
        raise CalibrationError(f"calibration profile {where} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, Mapping):
        raise CalibrationError(f"calibration profile {where} must be a YAML mapping of fields")
    try:
        return CalibrationProfile(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"calibration profile {where}: field '{field}': {err['msg']}") from None


def save_profile(profile: CalibrationProfile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` as YAML atomically (temporary name, then rename)."""
    return write_atomic(path, yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))


PROFILE_OF_PART: Mapping[str, str] = {
    "a100": "a100", "a100_40gb": "a100", "a100-pcie": "a100", "a800": "a100",
    "h100": "h100", "h100-pcie": "h100", "h100-nvl": "h100", "h800": "h100", "h20": "h100", "gh200": "h100",
    "gh200-144gb": "h100", "h200": "h200", "b200": "b200", "b300": "b300", "gb200": "gb200", "gb300": "gb300"}
"""Accelerator key (``topologies.accelerators.normalise_gpu``) -> the bundled profile its predictions
run at: a part's own where one is fitted, else that of the part with the same GPU die (A800 and the
A100 PCIe card: A100's; H800, H20, GH200 and the H100 PCIe / NVL cards: H100's). Efficiencies are
fractions of each part's own datasheet peak, and the part's own peaks, HBM and links come from its
``AcceleratorSpec``. The same table ``calibration.validate.SYSTEM_OF_PART`` reads a published row's
part with (one prediction path). No AMD part: those run at the generic defaults."""


MEMORY_VARIANTS: Mapping[str, str] = {"a100_40gb": "a100"}
"""Accelerator keys that are another memory size of a fitted part: their rows fit that part's
profile (``calibration.validate.part_of_row``), so it is their own, not borrowed."""


def part_key(accelerator_name: str) -> str | None:
    """The accelerator key of a name (``topologies.accelerators.normalise_gpu``), None for a name no
    spelling table knows."""
    try:
        return normalise_gpu(accelerator_name)
    except TopologyError:
        return None


def profile_stem_of(accelerator_name: str) -> str | None:
    """The bundled profile stem ``accelerator_name`` runs at (``PROFILE_OF_PART``), None for a part
    without one or a name no spelling table knows."""
    key = part_key(accelerator_name)
    return PROFILE_OF_PART.get(key) if key is not None else None


GEMM_CURVE_REFERENCE_PEAK = 989.4e12
"""``gemm_curve_peak`` of the bundled profiles: H100 SXM's dense BF16 peak (FLOP/s; H100 Tensor Core GPU
architecture whitepaper, H100 SXM5 table, ``topologies.accelerators``), the part on which the
shared curve shape is read."""


def default_profile(accelerator_name: str) -> CalibrationProfile:
    """The bundled profile of an accelerator (``profile_stem_of``), or the generic defaults."""
    stem = profile_stem_of(accelerator_name)
    if stem is not None and (PROFILE_DIR / f"{stem}.yaml").exists():
        return load_profile(PROFILE_DIR / f"{stem}.yaml")
    return CalibrationProfile()


def machine_cluster(profile: CalibrationProfile, num_ranks: int, *, time_shared: bool = True) -> Cluster:
    """ "This machine": ``num_ranks`` CPU ranks on loopback with the profile's measured figures.

    With ``time_shared``, ranks beyond the cores share them: each rank gets cores / (ranks x
    threads) of the measured compute and memory rates (fair scheduling assumed). Without it each
    rank has a core, as in step times with the CPU run delay removed.
    """
    m = profile.machine
    missing = [k for k in ("peak_flops", "memory_bandwidth") if k not in m]
    if missing:
        raise CalibrationError(f"profile {profile.name}: machine figures {missing} missing; "
                               "use a profile from `clustersim calibrate fit`")
    busy = num_ranks * m.get("threads_per_rank", 1.0)
    share = min(1.0, m.get("cores", busy) / busy) if time_shared else 1.0
    acc = cpu_accelerator(peak_flops=m["peak_flops"] * share, memory_bandwidth=m["memory_bandwidth"] * share,
                          memory_capacity=m.get("memory_capacity", 0.0) or 4.0 * 2**30,
                          name="cpu (measured)", source=profile.source)
    return cpu_loopback(num_ranks, accelerator=acc, loopback_bandwidth=m.get("link_bandwidth", 1e9),
                        name="this-machine")
