"""Tests of topologies.accelerators.normalise_gpu: one case per spelling of GPU_SPELLINGS, the
datasheet figures that tell the parts apart, and the refusals (power cap, unknown part)."""

from __future__ import annotations

import pytest

from clustersim.topologies.accelerators import ACCELERATORS, get_accelerator, normalise_gpu, stated_power_limit
from clustersim.topologies.errors import TopologyError


@pytest.mark.parametrize(("text", "key"), [
    ("H100", "h100"), ("H100-SXM5", "h100"), ("H100 SXM5 80GB", "h100"), ("H100 80GB HBM3", "h100"),
    ("NVIDIA H100 Tensor Core GPU", "h100"), ("H100 SXM5 700W", "h100"), ("H100 SXM5 500W", "h100"), ("H100 PCIe", "h100-pcie"),
    ("H100-PCIE-80GB", "h100-pcie"), ("H100 NVL", "h100-nvl"), ("H100 NVL 94GB", "h100-nvl"),
    ("A100", "a100"), ("A100-SXM4", "a100"), ("A100-SXM4-80GB", "a100"), ("A100 80GB SXM", "a100"),
    ("A100-SXM4-40GB", "a100_40gb"), ("A100 40GB", "a100_40gb"), ("A100 PCIe 80GB", "a100-pcie"),
    ("H800", "h800"), ("H800 SXM5", "h800"), ("A800", "a800"), ("A800-SXM4-80GB", "a800"),
    ("H20", "h20"), ("H20 96GB", "h20"), ("H200", "h200"), ("H200 SXM 141GB", "h200"),
    ("GH200", "gh200"), ("GH200 Grace Hopper", "gh200"), ("GH200 144GB HBM3e", "gh200-144gb"),
    ("B200", "b200"), ("HGX B200", "b200"), ("B300", "b300"), ("GB200", "gb200"), ("GB200 NVL72", "gb200"),
    ("GB300 NVL72", "gb300"), ("MI250X", "mi250x"), ("AMD Instinct MI250X", "mi250x"), ("MI300X", "mi300x"),
    ("AMD Instinct MI300X", "mi300x"), ("MI325X", "mi325x"),
])
def test_spelling(text: str, key: str) -> None:
    assert normalise_gpu(text) == key
    if stated_power_limit(text) is None:
        assert get_accelerator(text) is ACCELERATORS[key]


def test_parts_differ_where_their_datasheets_do() -> None:
    h100, h800, h20 = (get_accelerator(n) for n in ("H100", "H800", "H20"))
    assert h800.peak("bf16") == h100.peak("bf16") and h800.nvlink_bandwidth == 200e9 < h100.nvlink_bandwidth
    assert h20.peak("bf16") == pytest.approx(148e12)
    assert get_accelerator("A800").nvlink_bandwidth == 200e9
    assert get_accelerator("MI250X").hbm_capacity == 64 * 2**30  # one GCD
    assert get_accelerator("MI325X").peak("bf16") == get_accelerator("MI300X").peak("bf16")


@pytest.mark.parametrize(("text", "watts"), [("H100 SXM5 500W", 500.0), ("A100 power limit 250W", 250.0),
                                            ("H100 SXM5 700W", None), ("H100", None)])
def test_stated_power_cap_is_read_and_never_dropped(text: str, watts: float | None) -> None:
    assert stated_power_limit(text) == watts
    if watts is not None:  # the plain lookup refuses rather than silently run at TDP
        with pytest.raises(TopologyError, match="power cap"):
            get_accelerator(text)


def test_power_cap_without_a_figure_is_refused() -> None:
    with pytest.raises(TopologyError, match="without its figure"):
        normalise_gpu("H100 (power capped)")


def test_unknown_part_names_the_value() -> None:
    with pytest.raises(TopologyError, match="'TPU v5p'"):
        normalise_gpu("TPU v5p")
