"""Power specs as data and the power-cap clock relation (topologies/power.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.topologies import ACCELERATORS, H100_SXM, TopologyError, load_cluster
from clustersim.topologies.power import (FacilitySpec, PowerSpec, clock_fraction, power_presets, power_spec,
                                         with_power_limit)


def test_presets_agree_with_the_accelerator_table_and_the_datasheets() -> None:
    by_name = {a.name: a for a in ACCELERATORS.values()}
    for name, spec in power_presets().items():
        assert spec.max_w == by_name[name].tdp_watts, name  # one TDP, two tables
        assert 0 < spec.idle_w < spec.max_w and spec.source
    # DGX H100 datasheet ~10.2 kW max for 8 x 700 W: (10,200 - 5,600) / 8 per GPU
    assert power_spec(H100_SXM).node_max_w_per_gpu == pytest.approx((10200 - 8 * 700) / 8)


def test_unknown_accelerator_gets_tdp_scaled_assumptions() -> None:
    spec = power_spec(ACCELERATORS["mi300x"])
    assert spec.max_w == 750.0 and spec.node_max_w_per_gpu == 0.0 and "assumption" in spec.source


@settings(max_examples=60, deadline=None)
@given(a=st.floats(71.0, 700.0), b=st.floats(71.0, 700.0))
def test_clock_fraction_is_monotone_and_never_above_one(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    f_lo = clock_fraction(with_power_limit(H100_SXM, lo))
    f_hi = clock_fraction(with_power_limit(H100_SXM, hi))
    assert 0 < f_lo <= f_hi <= 1.0


def test_clock_fraction_cube_law_closed_form() -> None:
    spec = power_spec(H100_SXM)
    limit = spec.idle_w + (spec.max_w - spec.idle_w) / 8  # an eighth of the dynamic power -> half the clock
    assert clock_fraction(with_power_limit(H100_SXM, limit)) == pytest.approx(0.5)
    assert clock_fraction(H100_SXM) == 1.0 and clock_fraction(with_power_limit(H100_SXM, 700.0)) == 1.0


@pytest.mark.parametrize("limit", [10.0, 70.0, 701.0, -1.0])
def test_power_limit_outside_idle_to_tdp_is_a_clear_error(limit: float) -> None:
    with pytest.raises(TopologyError, match="power_limit_w"):
        with_power_limit(H100_SXM, limit)


def test_cluster_file_sets_a_power_limit() -> None:
    cluster = load_cluster({"preset": "dgx-h100", "num_gpus": 8, "power_limit_w": 500})
    assert cluster.accelerator.power_limit_w == 500.0 and cluster.accelerator.tdp_watts == 700.0
    with pytest.raises(TopologyError, match="power_limit_w"):
        load_cluster({"preset": "dgx-h100", "num_gpus": 8, "power_limit_w": 5000})
    with pytest.raises(TopologyError, match="power_limit_w"):  # listed among the valid keys
        load_cluster({"preset": "dgx-h100", "num_gpus": 8, "power_limt_w": 500})


@pytest.mark.parametrize("kwargs,field", [({"pue": 0.9}, "pue"), ({"pue": math.inf}, "pue"),
                                          ({"price_per_kwh": -1.0}, "price_per_kwh"), ({"life_years": 0.0}, "life_years"),
                                          ({"grid_kg_per_kwh": -0.1}, "grid_kg_per_kwh")])
def test_facility_rejects_bad_values_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(TopologyError, match=field):
        FacilitySpec(**kwargs)


def test_power_spec_rejects_bad_levels_and_idle() -> None:
    with pytest.raises(TopologyError, match="levels"):
        PowerSpec(max_w=700, idle_w=70, node_max_w_per_gpu=0, levels={"dense": 1.0})
    with pytest.raises(TopologyError, match="idle_w"):
        PowerSpec(max_w=700, idle_w=800, node_max_w_per_gpu=0)


def test_watts_clip_at_the_limit_and_capex_amortises() -> None:
    spec = power_spec(H100_SXM)
    assert spec.watts(1.0) == 700.0 and spec.watts(1.0, 450.0) == 450.0 and spec.watts(0.0) == spec.idle_w
    assert FacilitySpec(capex_per_gpu=35040.0, life_years=4.0).capex_per_gpu_hour == pytest.approx(1.0)
