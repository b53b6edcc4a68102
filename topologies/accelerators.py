"""Accelerator specifications: what one device can compute, hold and move, from its datasheet.

Owns ``AcceleratorSpec``, the preset instances (A100 40/80 GB, H100 SXM, H200, B200, B300, GB200,
GB300, MI300X), the lookup ``get_accelerator`` (with the aliases of the bundled published-runs data
set) and ``cpu_accelerator``, the factory for "this machine" that calibration fills with measured
numbers. It does not say how fast kernels really run (that is the calibration profile's efficiency
curves) nor how devices are wired (``topologies.fabrics``).

Conventions: peak FLOP/s are dense (vendors print 2:4-sparse figures, twice these). Datasheet
"GB" of HBM are binary gigabytes: nvidia-smi reports 81,920 MiB on an A100 80GB, so capacities
here are ``GB * 2**30`` bytes. Bandwidths are decimal (1 TB/s = 1e12 bytes/s). NVLink bandwidth
is per direction per device: half the bidirectional figure of the datasheets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from clustersim.units import GIB
from clustersim.topologies.errors import TopologyError

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""The precision keys of ``AcceleratorSpec.peak_flops``."""


TERA: float = 1e12
PETA: float = 1e15


@dataclass(frozen=True, kw_only=True)
class AcceleratorSpec:
    """One accelerator model as its datasheet describes it (all SI units)."""

    name: str
    """Display name, e.g. ``"H100 SXM 80GB"``."""
    peak_flops: Mapping[str, float] = field(hash=False)
    """Dense peak FLOP/s per precision key in ``PRECISIONS``; a missing key = not supported."""
    hbm_capacity: float
    """Device memory in bytes."""
    hbm_bandwidth: float
    """Device memory bandwidth in bytes/s."""
    nvlink_bandwidth: float
    """Scale-up (NVLink / Infinity Fabric) bandwidth in bytes/s per direction per device; 0 if none."""
    tdp_watts: float
    """Maximum board power in watts."""
    source: str
    """Citation of the figures (datasheet name and section)."""
    nvls: bool = False
    """NVLink SHARP: the NVLink switch reduces in-network (Hopper and later NVSwitch systems)."""
    power_limit_w: float | None = None
    """Board power limit set below ``tdp_watts`` (``nvidia-smi -pl``); None = run at TDP. It lowers the
    sustained clock by the relation of ``topologies.power.clock_fraction``."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.peak_flops) - set(PRECISIONS))
        if unknown:
            raise TopologyError(
                f"accelerator {self.name!r}: peak_flops keys {unknown} are unknown; use {list(PRECISIONS)}"
            )
        bad = {k: v for k, v in self.peak_flops.items() if not 0 < v < math.inf}
        if bad or not self.peak_flops:
            raise TopologyError(f"accelerator {self.name!r}: peak_flops must be positive, got {dict(self.peak_flops)}")
        for name in ("hbm_capacity", "hbm_bandwidth"):
            if not 0 < getattr(self, name) < math.inf:
                raise TopologyError(f"accelerator {self.name!r}: {name} must be finite and > 0, got {getattr(self, name)}")
        if not (0 <= self.nvlink_bandwidth < math.inf and 0 <= self.tdp_watts < math.inf):
            raise TopologyError(f"accelerator {self.name!r}: nvlink_bandwidth = {self.nvlink_bandwidth} and "
                                f"tdp_watts = {self.tdp_watts} must be finite and >= 0")
        if self.power_limit_w is not None and not 0 < self.power_limit_w <= self.tdp_watts:
            raise TopologyError(f"accelerator {self.name!r}: power_limit_w = {self.power_limit_w} must be in "
                                f"(0, tdp_watts = {self.tdp_watts}]; lower it or leave it unset")
        # a private plain copy: picklable (process pools, Dask) and immune to the caller's mutation
        object.__setattr__(self, "peak_flops", dict(self.peak_flops))

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s at ``precision``; error lists the supported precisions."""
        if precision not in self.peak_flops:
            raise TopologyError(
                f"accelerator {self.name!r} has no {precision!r} peak; use one of {list(self.peak_flops)}"
            )
        return float(self.peak_flops[precision])


# NVIDIA A100 Tensor Core GPU datasheet (SXM column): FP32 19.5 TFLOPS, TF32 156, BF16/FP16 312
# (dense; 312/624 with sparsity), no FP8; 400 W; NVLink 600 GB/s bidirectional -> 300 per direction.
_A100_PEAKS: dict[str, float] = {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "bf16": 312 * TERA, "fp16": 312 * TERA}

A100_40GB = AcceleratorSpec(
    name="A100 SXM4 40GB",
    peak_flops=_A100_PEAKS,
    hbm_capacity=40 * GIB,
    hbm_bandwidth=1555e9,  # A100 datasheet: 40GB HBM2, 1,555 GB/s
    nvlink_bandwidth=300e9,
    tdp_watts=400.0,
    source="NVIDIA A100 Tensor Core GPU datasheet, SXM 40GB column",
)

A100_80GB = AcceleratorSpec(
    name="A100 SXM4 80GB",
    peak_flops=_A100_PEAKS,
    hbm_capacity=80 * GIB,
    hbm_bandwidth=2039e9,  # A100 datasheet: 80GB HBM2e, 2,039 GB/s
    nvlink_bandwidth=300e9,
    tdp_watts=400.0,
    source="NVIDIA A100 Tensor Core GPU datasheet, SXM 80GB column",
)

# NVIDIA H100 Tensor Core GPU architecture whitepaper, H100 SXM5 table (dense): FP32 66.9, TF32 494.7,
# BF16/FP16 989.4, FP8 1978.9 TFLOPS (datasheet prints 1,979 BF16 "with sparsity"); NVLink 900 GB/s
# bidirectional -> 450 per direction; up to 700 W (H100 datasheet, SXM column).
_HOPPER_PEAKS: dict[str, float] = {
    "fp32": 66.9 * TERA,
    "tf32": 494.7 * TERA,
    "bf16": 989.4 * TERA,
    "fp16": 989.4 * TERA,
    "fp8": 1978.9 * TERA,
}

H100_SXM = AcceleratorSpec(
    name="H100 SXM 80GB",
    peak_flops=_HOPPER_PEAKS,
    hbm_capacity=80 * GIB,
    hbm_bandwidth=3.35 * TERA,  # H100 datasheet SXM: 3.35 TB/s HBM3
    nvlink_bandwidth=450e9,
    tdp_watts=700.0,
    source="NVIDIA H100 datasheet (SXM column) and Hopper architecture whitepaper",
    nvls=True,  # NVLink SHARP introduced with third-generation NVSwitch (Hopper whitepaper)
)

H200 = AcceleratorSpec(
    name="H200 SXM 141GB",
    peak_flops=_HOPPER_PEAKS,  # H200 datasheet: same Tensor Core figures as H100 SXM
    hbm_capacity=141 * GIB,  # H200 datasheet: 141 GB HBM3e
    hbm_bandwidth=4.8 * TERA,  # H200 datasheet: 4.8 TB/s
    nvlink_bandwidth=450e9,
    tdp_watts=700.0,
    source="NVIDIA H200 Tensor Core GPU datasheet, SXM column",
    nvls=True,
)

# NVIDIA HGX B200 / DGX B200 datasheet, 8-GPU totals divided by 8, sparse halved: FP4 144 PF sparse
# -> 9 PF dense per GPU, FP8 72 -> 4.5, BF16/FP16 36 -> 2.25, TF32 18 -> 1.125, FP32 600 TF -> 75;
# 1,440 GB HBM3e -> 180 GB, 64 TB/s -> 8 TB/s; NVLink 1.8 TB/s bidirectional -> 900 GB/s.
B200 = AcceleratorSpec(
    name="B200 180GB",
    peak_flops={
        "fp32": 75 * TERA,
        "tf32": 1.125 * PETA,
        "bf16": 2.25 * PETA,
        "fp16": 2.25 * PETA,
        "fp8": 4.5 * PETA,
        "fp4": 9.0 * PETA,
    },
    hbm_capacity=180 * GIB,
    hbm_bandwidth=8 * TERA,
    nvlink_bandwidth=900e9,
    tdp_watts=1000.0,  # HGX B200 per-GPU max TDP 1,000 W
    source="NVIDIA HGX B200 / DGX B200 datasheet (8-GPU totals / 8, dense = sparse / 2)",
    nvls=True,
)

# NVIDIA HGX B300 datasheet, 8-GPU totals / 8: FP4 108 PF dense -> 13.5 PF, FP8 72 PF sparse -> 4.5
# dense, BF16 36 -> 2.25, TF32 18 -> 1.125, FP32 600 TF -> 75; 2.3 TB HBM3e -> 288 GB per GPU at 8 TB/s.
B300 = AcceleratorSpec(
    name="B300 288GB",
    peak_flops={
        "fp32": 75 * TERA,
        "tf32": 1.125 * PETA,
        "bf16": 2.25 * PETA,
        "fp16": 2.25 * PETA,
        "fp8": 4.5 * PETA,
        "fp4": 13.5 * PETA,
    },
    hbm_capacity=288 * GIB,
    hbm_bandwidth=8 * TERA,
    nvlink_bandwidth=900e9,
    tdp_watts=1100.0,  # HGX B300 per-GPU TDP 1,100 W
    source="NVIDIA HGX B300 datasheet (8-GPU totals / 8, dense = sparse / 2 except FP4 dense as printed)",
    nvls=True,
)

# NVIDIA GB200 NVL72 datasheet, rack totals / 72, sparse halved: FP4 1,440 PF -> 10 PF dense,
# FP8 720 -> 5, BF16 360 -> 2.5, TF32 180 -> 1.25, FP32 5,760 TF -> 80; 13.4 TB HBM3e -> 186 GB;
# 576 TB/s -> 8 TB/s; NVLink 130 TB/s -> 1.8 TB/s bidirectional per GPU -> 900 GB/s.
GB200 = AcceleratorSpec(
    name="GB200 (per GPU)",
    peak_flops={
        "fp32": 80 * TERA,
        "tf32": 1.25 * PETA,
        "bf16": 2.5 * PETA,
        "fp16": 2.5 * PETA,
        "fp8": 5.0 * PETA,
        "fp4": 10.0 * PETA,
    },
    hbm_capacity=186 * GIB,
    hbm_bandwidth=8 * TERA,
    nvlink_bandwidth=900e9,
    tdp_watts=1200.0,  # per Blackwell GPU of a GB200 superchip (2,700 W superchip incl. Grace)
    source="NVIDIA GB200 NVL72 datasheet (rack totals / 72, dense = sparse / 2)",
    nvls=True,
)

# NVIDIA GB300 NVL72 datasheet, rack totals / 72: FP4 1,080 PF dense -> 15 PF, FP8 720 PF sparse
# -> 5 dense, BF16 360 -> 2.5, TF32 180 -> 1.25, FP32 ~80 TF; 20.7 TB HBM3e -> 288 GB; 576 TB/s
# -> 8 TB/s; NVLink 130 TB/s -> 900 GB/s per direction per GPU.
GB300 = AcceleratorSpec(
    name="GB300 (per GPU)",
    peak_flops={
        "fp32": 80 * TERA,
        "tf32": 1.25 * PETA,
        "bf16": 2.5 * PETA,
        "fp16": 2.5 * PETA,
        "fp8": 5.0 * PETA,
        "fp4": 15.0 * PETA,
    },
    hbm_capacity=288 * GIB,
    hbm_bandwidth=8 * TERA,
    nvlink_bandwidth=900e9,
    tdp_watts=1400.0,  # Blackwell Ultra GPU in GB300 NVL72: 1,400 W
    source="NVIDIA GB300 NVL72 datasheet (rack totals / 72)",
    nvls=True,
)

# AMD Instinct MI300X data sheet: peak dense FP32 matrix 163.4 TF, TF32 653.7, FP16/BF16 1,307.4,
# FP8 2,614.9 TFLOPS; 192 GB HBM3 at 5.3 TB/s; 750 W; 7 Infinity Fabric links x 128 GB/s
# bidirectional = 896 GB/s -> 448 GB/s per direction (a full mesh, modelled as a switch).
MI300X = AcceleratorSpec(
    name="MI300X 192GB",
    peak_flops={
        "fp32": 163.4 * TERA,
        "tf32": 653.7 * TERA,
        "bf16": 1307.4 * TERA,
        "fp16": 1307.4 * TERA,
        "fp8": 2614.9 * TERA,
    },
    hbm_capacity=192 * GIB,
    hbm_bandwidth=5.3 * TERA,
    nvlink_bandwidth=448e9,
    tdp_watts=750.0,
    source="AMD Instinct MI300X accelerator data sheet",
)


def _accelerator_table() -> dict[str, AcceleratorSpec]:
    """Lower-case names and aliases (incl. the gpu_type values of published_runs.csv)."""
    return {
        "a100_40gb": A100_40GB,
        "a100-40gb": A100_40GB,
        "a100_80gb": A100_80GB,
        "a100-80gb": A100_80GB,
        "a100": A100_80GB,  # published_runs.csv 'A100': gpu_mem_gb is 80 or 40; 80 GB is the default
        "a100-sxm4": A100_80GB,
        "h100": H100_SXM,
        "h100_sxm": H100_SXM,
        "h100-sxm": H100_SXM,
        "h200": H200,
        "b200": B200,
        "b300": B300,
        "gb200": GB200,
        "gb300": GB300,
        "mi300x": MI300X,
    }


ACCELERATORS: Mapping[str, AcceleratorSpec] = MappingProxyType(_accelerator_table())
"""Preset accelerators by lower-case name or alias (read-only)."""


def get_accelerator(name: str, memory_gb: float | None = None) -> AcceleratorSpec:
    """The preset called ``name`` (case-insensitive); ``memory_gb=40`` picks the A100 40GB."""
    key = name.strip().lower().replace(" ", "_")
    if key not in ACCELERATORS:
        raise TopologyError(f"unknown accelerator {name!r}; use one of {sorted(ACCELERATORS)}")
    spec = ACCELERATORS[key]
    if memory_gb is not None and spec is A100_80GB and round(memory_gb) == 40:
        return A100_40GB
    return spec


def cpu_accelerator(
    *,
    peak_flops: float | Mapping[str, float],
    memory_capacity: float,
    memory_bandwidth: float,
    name: str = "cpu",
    tdp_watts: float = 0.0,
    source: str = "measured on this machine",
) -> AcceleratorSpec:
    """A CPU rank as an accelerator, from measured numbers (calibration backend).

    ``peak_flops`` is one measured matmul rate (used for fp32, bf16 and fp16) or a mapping per
    precision; ``memory_capacity`` (bytes) and ``memory_bandwidth`` (bytes/s) are per rank.
    """
    if isinstance(peak_flops, Mapping):
        peaks = dict(peak_flops)
    else:
        peaks = dict.fromkeys(("fp32", "bf16", "fp16"), float(peak_flops))
    return AcceleratorSpec(
        name=name,
        peak_flops=peaks,
        hbm_capacity=float(memory_capacity),
        hbm_bandwidth=float(memory_bandwidth),
        nvlink_bandwidth=0.0,
        tdp_watts=tdp_watts,
        source=source,
    )
