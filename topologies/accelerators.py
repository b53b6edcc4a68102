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
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from clustersim.units import GIB
from clustersim.topologies.errors import TopologyError

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""The precision keys of ``AcceleratorSpec.peak_flops``."""


TERA: float = 1e12
PETA: float = 1e15
PCIE4_X16: float = 32e9
"""PCIe 4.0 x16, bytes/s per direction (16 GT/s x 16 lanes x 128b/130b = 31.5 GB/s; vendors print 32 GB/s)."""
PCIE5_X16: float = 64e9
"""PCIe 5.0 x16, bytes/s per direction (32 GT/s x 16 lanes x 128b/130b = 63 GB/s; vendors print 64 GB/s)."""
C2C_PER_DIRECTION: float = 450e9
"""NVLink-C2C between one Grace CPU and its GPUs: 900 GB/s bidirectional -> 450 GB/s per direction
(NVIDIA GH200 Grace Hopper Superchip datasheet; GB200 NVL72 datasheet: 900 GB/s NVLink-C2C)."""


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
    host_bandwidth: float = 0.0
    """GPU <-> host memory bandwidth in bytes/s per direction (the link activation CPU offloading and
    pinned-memory copies run over); 0: not known, and the plan check refuses to offload over it.
    PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s, taken as 32e9; PCIe 5.0 x16: 64e9 (PCI-SIG
    base specifications, the figures vendors print per direction); NVLink-C2C (Grace superchips):
    900 GB/s bidirectional -> 450e9 per direction (NVIDIA GH200 datasheet)."""
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
        if not 0 <= self.host_bandwidth < math.inf:
            raise TopologyError(f"accelerator {self.name!r}: host_bandwidth = {self.host_bandwidth} must be finite "
                                "and >= 0 (bytes/s per direction of the GPU-host link; 0 when not known)")
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
    host_bandwidth=PCIE4_X16,  # A100 datasheet: PCIe Gen4
    source="NVIDIA A100 Tensor Core GPU datasheet, SXM 40GB column (host link: PCIe Gen4 64 GB/s bidirectional)",
)

A100_80GB = AcceleratorSpec(
    name="A100 SXM4 80GB",
    peak_flops=_A100_PEAKS,
    hbm_capacity=80 * GIB,
    hbm_bandwidth=2039e9,  # A100 datasheet: 80GB HBM2e, 2,039 GB/s
    nvlink_bandwidth=300e9,
    tdp_watts=400.0,
    host_bandwidth=PCIE4_X16,  # A100 datasheet: PCIe Gen4
    source="NVIDIA A100 Tensor Core GPU datasheet, SXM 80GB column (host link: PCIe Gen4 64 GB/s bidirectional)",
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
    host_bandwidth=PCIE5_X16,  # H100 datasheet: PCIe Gen5 128 GB/s (bidirectional)
    source="NVIDIA H100 datasheet (SXM column; host link PCIe Gen5 128 GB/s bidirectional) and Hopper architecture "
           "whitepaper",
    nvls=True,  # NVLink SHARP introduced with third-generation NVSwitch (Hopper whitepaper)
)

H200 = AcceleratorSpec(
    name="H200 SXM 141GB",
    peak_flops=_HOPPER_PEAKS,  # H200 datasheet: same Tensor Core figures as H100 SXM
    hbm_capacity=141 * GIB,  # H200 datasheet: 141 GB HBM3e
    hbm_bandwidth=4.8 * TERA,  # H200 datasheet: 4.8 TB/s
    nvlink_bandwidth=450e9,
    tdp_watts=700.0,
    host_bandwidth=PCIE5_X16,  # H200 datasheet: PCIe Gen5 128 GB/s
    source="NVIDIA H200 Tensor Core GPU datasheet, SXM column (host link: PCIe Gen5 128 GB/s bidirectional)",
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
    host_bandwidth=PCIE5_X16,  # HGX B200: each GPU on a PCIe Gen5 x16 link to the host
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
    host_bandwidth=PCIE5_X16,  # taken as B200's PCIe Gen5 x16 (assumption)
    source="NVIDIA HGX B300 datasheet (8-GPU totals / 8, dense = sparse / 2 except FP4 dense as printed)",
    nvls=True,
)

# Host link (assumption, stated): a GB200 superchip has one Grace CPU and two Blackwell GPUs on one
# NVLink-C2C of 900 GB/s bidirectional, so each GPU is given half of the 450 GB/s per direction (GB300 alike).
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
    host_bandwidth=C2C_PER_DIRECTION / 2,  # assumption: one Grace's C2C shared by its 2 GPUs
    source="NVIDIA GB200 NVL72 datasheet (rack totals / 72, dense = sparse / 2); host link: NVLink-C2C 900 GB/s "
           "per Grace, shared by its 2 GPUs (assumption)",
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
    host_bandwidth=C2C_PER_DIRECTION / 2,  # assumption: one Grace's C2C shared by its 2 GPUs
    source="NVIDIA GB300 NVL72 datasheet (rack totals / 72); host link: NVLink-C2C 900 GB/s per Grace, shared by "
           "its 2 GPUs (assumption)",
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
    host_bandwidth=PCIE5_X16,  # MI300X data sheet: PCIe Gen5 x16 host interface
    source="AMD Instinct MI300X accelerator data sheet (host link: PCIe Gen5 x16)",
)


# --- parts read from real run descriptions (``normalise_gpu``); each figure from the cited datasheet.
# NVIDIA H100 datasheet, PCIe and NVL columns (sparse figures halved for dense): PCIe BF16 1,513 ->
# 756.5 TF, FP8 3,026 -> 1,513, 80 GB HBM2e 2.0 TB/s, 350 W, NVLink bridge 600 GB/s -> 300 per direction;
# NVL BF16 1,671 -> 835.5, FP8 3,341 -> 1,670.5, 94 GB HBM3 3.9 TB/s, 400 W, NVLink 600 GB/s -> 300.
H100_PCIE = AcceleratorSpec(
    name="H100 PCIe 80GB",
    peak_flops={"fp32": 51.2 * TERA, "tf32": 378 * TERA, "bf16": 756.5 * TERA, "fp16": 756.5 * TERA, "fp8": 1513 * TERA},
    hbm_capacity=80 * GIB, hbm_bandwidth=2.0 * TERA, nvlink_bandwidth=300e9, tdp_watts=350.0,
    host_bandwidth=PCIE5_X16,
    source="NVIDIA H100 datasheet, PCIe column (dense = sparse / 2)",
)
H100_NVL = AcceleratorSpec(
    name="H100 NVL 94GB",
    peak_flops={"fp32": 60 * TERA, "tf32": 417.5 * TERA, "bf16": 835.5 * TERA, "fp16": 835.5 * TERA, "fp8": 1670.5 * TERA},
    hbm_capacity=94 * GIB, hbm_bandwidth=3.9 * TERA, nvlink_bandwidth=300e9, tdp_watts=400.0,
    host_bandwidth=PCIE5_X16,
    source="NVIDIA H100 datasheet, NVL column (dense = sparse / 2)",
)
# NVIDIA H800 / A800: the export variants of H100 SXM / A100 SXM with the same Tensor Core figures and
# NVLink cut to 400 GB/s bidirectional -> 200 GB/s per direction (NVIDIA H800 and A800 product briefs).
H800 = AcceleratorSpec(
    name="H800 SXM 80GB", peak_flops=_HOPPER_PEAKS, hbm_capacity=80 * GIB, hbm_bandwidth=3.35 * TERA,
    nvlink_bandwidth=200e9, tdp_watts=700.0, nvls=True,
    host_bandwidth=PCIE5_X16,
    source="NVIDIA H800 product brief: H100 SXM compute, NVLink 400 GB/s bidirectional",
)
A800_80GB = AcceleratorSpec(
    name="A800 SXM4 80GB", peak_flops=_A100_PEAKS, hbm_capacity=80 * GIB, hbm_bandwidth=2039e9,
    nvlink_bandwidth=200e9, tdp_watts=400.0,
    host_bandwidth=PCIE4_X16,
    source="NVIDIA A800 product brief: A100 80GB SXM compute and memory, NVLink 400 GB/s bidirectional",
)
# NVIDIA A100 datasheet, PCIe 80GB column: same Tensor Core peaks, 1,935 GB/s, 300 W, NVLink bridge
# 600 GB/s bidirectional (2 GPUs) -> 300 per direction.
A100_PCIE_80GB = AcceleratorSpec(
    name="A100 PCIe 80GB", peak_flops=_A100_PEAKS, hbm_capacity=80 * GIB, hbm_bandwidth=1935e9,
    nvlink_bandwidth=300e9, tdp_watts=300.0, host_bandwidth=PCIE4_X16,
    source="NVIDIA A100 Tensor Core GPU datasheet, PCIe 80GB column",
)
# NVIDIA H20 product brief: BF16 148 TF dense, FP8 296, 96 GB HBM3 at 4.0 TB/s, NVLink 900 GB/s
# bidirectional -> 450 per direction, 400 W.
H20 = AcceleratorSpec(
    name="H20 96GB",
    peak_flops={"fp32": 44 * TERA, "tf32": 74 * TERA, "bf16": 148 * TERA, "fp16": 148 * TERA, "fp8": 296 * TERA},
    hbm_capacity=96 * GIB, hbm_bandwidth=4.0 * TERA, nvlink_bandwidth=450e9, tdp_watts=400.0, nvls=True,
    host_bandwidth=PCIE5_X16,
    source="NVIDIA H20 product brief",
)
# NVIDIA GH200 Grace Hopper Superchip datasheet: H100 Tensor Core figures, 96 GB HBM3 at 4 TB/s
# (144 GB HBM3e at 4.9 TB/s for the HBM3e part), NVLink 900 GB/s -> 450 per direction; GPU share of
# the up-to-1,000 W module taken as H100 SXM's 700 W.
GH200 = AcceleratorSpec(
    name="GH200 96GB", peak_flops=_HOPPER_PEAKS, hbm_capacity=96 * GIB, hbm_bandwidth=4.0 * TERA,
    nvlink_bandwidth=450e9, tdp_watts=700.0, nvls=True,
    host_bandwidth=C2C_PER_DIRECTION,  # GH200 datasheet: NVLink-C2C 900 GB/s CPU <-> GPU, bidirectional
    source="NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3 96GB; host link NVLink-C2C 900 GB/s bidirectional)",
)
GH200_144GB = replace(GH200, name="GH200 144GB", hbm_capacity=144 * GIB, hbm_bandwidth=4.9 * TERA,
                      source="NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e 144GB)")
# AMD Instinct MI250X data sheet (one OAM = 2 GCDs; a training job sees each GCD as one device): BF16
# 383 TF -> 191.5 per GCD, FP32 matrix 95.7 -> 47.9, 128 GB HBM2e at 3.2768 TB/s -> 64 GB, 1.6384 TB/s;
# 560 W -> 280; Infinity Fabric 8 links x 100 GB/s per OAM, ~200 GB/s per direction per GCD.
MI250X_GCD = AcceleratorSpec(
    name="MI250X (per GCD)",
    peak_flops={"fp32": 47.9 * TERA, "bf16": 191.5 * TERA, "fp16": 191.5 * TERA},
    hbm_capacity=64 * GIB, hbm_bandwidth=1.6384 * TERA, nvlink_bandwidth=200e9, tdp_watts=280.0,
    host_bandwidth=PCIE4_X16 / 2,  # assumption: the OAM's one PCIe Gen4 x16 host link shared by its 2 GCDs
    source="AMD Instinct MI250X data sheet (OAM totals / 2 GCDs)",
)
# AMD Instinct MI325X data sheet: MI300X compute (BF16 1,307.4 TF dense, FP8 2,614.9), 256 GB HBM3E at
# 6 TB/s, 1,000 W, Infinity Fabric 896 GB/s -> 448 per direction.
MI325X = replace(MI300X, name="MI325X 256GB", hbm_capacity=256 * GIB, hbm_bandwidth=6.0 * TERA, tdp_watts=1000.0,
                 source="AMD Instinct MI325X accelerator data sheet")


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
        "h100-pcie": H100_PCIE, "h100-nvl": H100_NVL, "h800": H800, "a800": A800_80GB, "a100-pcie": A100_PCIE_80GB,
        "h20": H20, "gh200": GH200, "gh200-144gb": GH200_144GB, "mi250x": MI250X_GCD, "mi325x": MI325X,
    }


ACCELERATORS: Mapping[str, AcceleratorSpec] = MappingProxyType(_accelerator_table())
"""Preset accelerators by lower-case name or alias (read-only)."""


def get_accelerator(name: str, memory_gb: float | None = None) -> AcceleratorSpec:
    """The preset called ``name`` (case-insensitive); ``memory_gb=40`` picks the A100 40GB."""
    key = name.strip().lower().replace(" ", "_")
    if key not in ACCELERATORS:
        key = normalise_gpu(name)
        if (limit := stated_power_limit(name)) is not None:
            raise TopologyError(f"accelerator {name!r} states a {limit:g} W power cap: use {key!r} with "
                                "topologies.power.with_power_limit (or the cluster's power_limit_w)")
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


GPU_SPELLINGS: tuple[tuple[str, str, str], ...] = (
    (r"\bgh200\b.*(144|hbm3e)|(144|hbm3e).*\bgh200\b", "gh200-144gb", "GH200 144GB HBM3e"),
    (r"\bgh200\b", "gh200", "GH200, GH200 96GB, Grace Hopper"),
    (r"\bgb300\b", "gb300", "GB300, GB300 NVL72"),
    (r"\bgb200\b", "gb200", "GB200, GB200 NVL72"),
    (r"\bb300\b", "b300", "B300, HGX B300, Blackwell Ultra"),
    (r"\bb200\b", "b200", "B200, HGX B200, DGX B200"),
    (r"\bh800\b", "h800", "H800, H800 SXM5, H800 80GB"),
    (r"\bh20\b", "h20", "H20, H20 96GB"),
    (r"\bh200\b", "h200", "H200, H200 SXM 141GB"),
    (r"\bh100\b.*\bpcie\b", "h100-pcie", "H100 PCIe, H100-PCIE-80GB"),
    (r"\bh100\b.*\bnvl\b", "h100-nvl", "H100 NVL, H100 NVL 94GB"),
    (r"\bh100\b", "h100", "H100, H100-SXM5, H100 SXM5 80GB, H100 80GB HBM3, NVIDIA H100 Tensor Core"),
    (r"\ba800\b", "a800", "A800, A800-SXM4-80GB"),
    (r"\ba100\b.*\bpcie\b", "a100-pcie", "A100 PCIe 80GB"),
    (r"\ba100\b.*\b40gb\b", "a100_40gb", "A100 40GB, A100-SXM4-40GB"),
    (r"\ba100\b", "a100", "A100, A100-SXM4-80GB, A100 80GB SXM"),
    (r"\bmi325x\b", "mi325x", "MI325X, AMD Instinct MI325X"),
    (r"\bmi300x\b", "mi300x", "MI300X, AMD Instinct MI300X"),
    (r"\bmi250x?\b", "mi250x", "MI250X, AMD Instinct MI250X (one device = one GCD)"),
)
"""(regex on the cleaned spelling, ``ACCELERATORS`` key, spellings it covers), first match wins: a
part name as vendors, papers and logs print it (``normalise_gpu``)."""

WATTS = r"\b(\d{3,4})\s*w\b"
"""A stated board power; below the part's TDP it is a power cap."""
POWER_CAP_WORDS = r"power[- ]?(cap|capped|limit|limited)"
"""Words that state a power limit (a figure in watts must come with them)."""


def _clean_gpu(text: str) -> str:
    """Lower case; '-', '_', '/' and ',' as spaces; memory sizes as '<n>gb'; vendor words dropped."""
    s = re.sub(r"[-_/,()]+", " ", text.lower())
    s = re.sub(r"(\d+)\s*gb\b", r"\1gb", s)
    s = re.sub(r"\b(nvidia|amd|instinct|tensor|core|gpus?|accelerators?)\b", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def stated_power_limit(text: str) -> float | None:
    """The board power limit a GPU spelling states (watts below the part's TDP), else None."""
    key = normalise_gpu(text)
    watts = re.search(WATTS, _clean_gpu(text))
    if watts and float(watts.group(1)) < ACCELERATORS[key].tdp_watts:
        return float(watts.group(1))
    return None


def normalise_gpu(text: str) -> str:
    """The ``ACCELERATORS`` key of a GPU part as written (``GPU_SPELLINGS``); a stated wattage is
    read by ``stated_power_limit``. A power cap stated without a figure, or an unknown part, raises."""
    s = _clean_gpu(text)
    key = next((k for pattern, k, _ in GPU_SPELLINGS if re.search(pattern, s)), None)
    if key is not None and re.search(POWER_CAP_WORDS, s) and not re.search(WATTS, s):
        raise TopologyError(f"GPU {text!r}: a power cap without its figure; state it in watts (e.g. 'H100 SXM 500W')")
    if key is not None:
        return key
    raise TopologyError(f"unknown accelerator {text!r}; use one of {sorted(ACCELERATORS)} "
                        "or a spelling of topologies.accelerators.GPU_SPELLINGS")
