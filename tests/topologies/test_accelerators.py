"""Accelerator presets: datasheet relations, published peak figures, lookups and the CPU factory."""

from __future__ import annotations

import csv
from dataclasses import replace
import pickle
from pathlib import Path

import pytest

from clustersim.topologies import (
    A100_40GB, A100_80GB, ACCELERATORS, B200, B300, GB200, GB300, H100_SXM, H200, MI300X, AcceleratorSpec,
    TopologyError, cpu_accelerator, get_accelerator,
)
from clustersim.topologies.accelerators import PRECISIONS

RUNS = Path(__file__).resolve().parents[2] / "workloads" / "data" / "published_runs.csv"
PRESETS = (A100_40GB, A100_80GB, H100_SXM, H200, B200, B300, GB200, GB300, MI300X)


def _rows() -> list[dict[str, str]]:
    with RUNS.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("acc", PRESETS, ids=lambda a: a.name)
def test_dense_peaks_follow_tensor_core_ratios(acc: AcceleratorSpec) -> None:
    # Every generation here: FP16 = BF16, TF32 = BF16 / 2, FP8 = 2 x BF16 (dense), FP32 < TF32.
    p = acc.peak_flops
    assert set(p) <= set(PRECISIONS)
    assert p["fp16"] == p["bf16"]
    assert p["tf32"] == pytest.approx(p["bf16"] / 2, rel=1e-3)
    assert p["fp32"] < p["tf32"]
    if "fp8" in p:
        assert p["fp8"] == pytest.approx(2 * p["bf16"], rel=1e-3)
    if "fp4" in p:
        assert p["fp4"] >= 2 * p["fp8"]


@pytest.mark.parametrize(
    ("acc", "nvlink"),
    [(A100_80GB, 300e9), (H100_SXM, 450e9), (H200, 450e9), (B200, 900e9), (GB200, 900e9), (GB300, 900e9)],
)
def test_nvlink_is_per_direction_half_of_datasheet(acc: AcceleratorSpec, nvlink: float) -> None:
    # NVLink 600 / 900 / 1,800 GB/s bidirectional (A100 / H100 / Blackwell datasheets) -> half per direction.
    assert acc.nvlink_bandwidth == nvlink


def test_capacities_and_bandwidths_order_by_generation() -> None:
    assert A100_80GB.hbm_capacity == 2 * A100_40GB.hbm_capacity
    assert H200.hbm_capacity > H100_SXM.hbm_capacity and H200.hbm_bandwidth > H100_SXM.hbm_bandwidth
    assert H200.peak_flops == H100_SXM.peak_flops
    assert B300.hbm_capacity == GB300.hbm_capacity > B200.hbm_capacity
    assert B300.peak_flops["fp4"] > B200.peak_flops["fp4"]
    assert all(a.nvls for a in (H100_SXM, H200, B200, B300, GB200, GB300)) and not A100_80GB.nvls


def test_published_peak_basis_matches_presets() -> None:
    # peak_tflops_basis of published_runs.csv: MosaicML Composer GPU_AVAILABLE_FLOPS (312 A100 bf16,
    # 989 H100 bf16, 1979 H100 fp8) and Megatron SC'21 (312 A100); 0.1 % tolerance for rounding.
    checked = 0
    for row in _rows():
        if not row["peak_tflops_basis"]:
            continue
        key = "fp8" if "fp8" in row["precision"].lower() else "bf16"
        peak = get_accelerator(row["gpu_type"]).peak(key)
        assert peak == pytest.approx(float(row["peak_tflops_basis"]) * 1e12, rel=1e-3), row["row_id"]
        checked += 1
    assert checked > 200


def _row_precision(precision: str) -> str:
    p = precision.lower()
    return "fp4" if "fp4" in p else "fp8" if "fp8" in p else "bf16"


def test_published_achieved_tflops_never_exceed_peak() -> None:
    # Achieved model TFLOP/s per GPU (as printed by each source) is a bound check on our peaks.
    checked = 0
    for row in _rows():
        if not row["tflops_per_gpu"]:
            continue
        acc = get_accelerator(row["gpu_type"], memory_gb=float(row["gpu_mem_gb"] or 80))
        assert float(row["tflops_per_gpu"]) * 1e12 <= acc.peak(_row_precision(row["precision"])), row["row_id"]
        checked += 1
    assert checked > 300


def test_every_published_gpu_type_resolves() -> None:
    types = {row["gpu_type"] for row in _rows()}
    assert types >= {"A100", "A100-SXM4", "H100", "B200", "B300", "GB200", "GB300"}
    for t in types:
        assert get_accelerator(t) is ACCELERATORS[t.lower()]
    assert get_accelerator("A100", memory_gb=40) is A100_40GB
    assert get_accelerator("a100", memory_gb=80) is A100_80GB


def test_unknown_accelerator_lists_names() -> None:
    with pytest.raises(TopologyError, match="h100") as err:
        get_accelerator("TPUv9")
    assert "TPUv9" in str(err.value)


def test_missing_precision_names_the_supported_ones() -> None:
    with pytest.raises(TopologyError, match="fp8"):
        A100_80GB.peak("fp8")


def test_spec_validates_fields() -> None:
    with pytest.raises(TopologyError, match="int4"):
        AcceleratorSpec(name="x", peak_flops={"int4": 1.0}, hbm_capacity=1, hbm_bandwidth=1,
                        nvlink_bandwidth=0, tdp_watts=0, source="")
    with pytest.raises(TopologyError, match="hbm_bandwidth"):
        AcceleratorSpec(name="x", peak_flops={"bf16": 1.0}, hbm_capacity=1, hbm_bandwidth=0,
                        nvlink_bandwidth=0, tdp_watts=0, source="")


def test_spec_is_immutable_hashable_and_picklable() -> None:
    peaks = {"bf16": 1e12}
    spec = AcceleratorSpec(name="x", peak_flops=peaks, hbm_capacity=1, hbm_bandwidth=1, nvlink_bandwidth=0,
                           tdp_watts=0, source="")
    peaks["bf16"] = 5.0  # the caller's dict is copied, not aliased
    assert spec.peak("bf16") == 1e12
    assert pickle.loads(pickle.dumps(H100_SXM)) == H100_SXM
    assert len({H100_SXM, H200, H100_SXM}) == 2


def test_cpu_factory_uses_measured_numbers() -> None:
    cpu = cpu_accelerator(peak_flops=2e11, memory_capacity=8e9, memory_bandwidth=2e10)
    assert cpu.peak("fp32") == cpu.peak("bf16") == 2e11
    assert (cpu.hbm_capacity, cpu.hbm_bandwidth, cpu.nvlink_bandwidth) == (8e9, 2e10, 0.0)
    per_dtype = cpu_accelerator(peak_flops={"fp32": 1e11, "bf16": 3e11}, memory_capacity=1, memory_bandwidth=1)
    assert per_dtype.peak("bf16") == 3e11


def test_host_bandwidth_is_validated() -> None:
    spec = ACCELERATORS["h100"]
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(TopologyError, match="host_bandwidth"):
            replace(spec, host_bandwidth=bad)
    assert isinstance(replace(spec, host_bandwidth=0.0), AcceleratorSpec)  # 0: not known


def test_preset_host_links() -> None:
    # PCIe 4.0 / 5.0 x16 per direction; NVLink-C2C 900 GB/s bidirectional; GB200: one Grace for 2 GPUs
    expected = {"a100": 32e9, "a800": 32e9, "h100": 64e9, "h200": 64e9, "h800": 64e9, "h20": 64e9,
                "mi300x": 64e9, "b200": 64e9, "b300": 64e9, "gh200": 450e9, "gb200": 225e9, "gb300": 225e9}
    for name, bandwidth in expected.items():
        assert ACCELERATORS[name].host_bandwidth == bandwidth, name
    assert all(spec.host_bandwidth > 0 for spec in ACCELERATORS.values())
