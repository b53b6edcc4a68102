"""Every row of the published-runs data set becomes a valid scenario, or says exactly why not.

Issue acceptance (parallel plans): MoE, CP and FSDP rows included. The rows and their sources are
bundled in workloads/data/published_runs.csv (see workloads/data/SOURCES.md).
"""

from __future__ import annotations

import collections

import pytest

from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.calibration.validate import load_runs, scenario_for_row
from clustersim.simulator.calibration.validate_rules import SkipRow

# The documented skip reasons (docs/VALIDATION.md, "Skipped rows"); a new reason fails the test.
KNOWN_REASONS = ("hybrid Mamba", "(source quirk)", "not published", "DeepSeek", "no step time")


@pytest.fixture(scope="module")
def built() -> tuple[list, dict[int, str]]:
    ok, skipped, cache = [], {}, {}
    for row in load_runs().to_dict("records"):
        try:
            sc = scenario_for_row(row, cache)
        except SkipRow as exc:
            skipped[int(row["row_id"])] = str(exc)
            continue
        check_plan(sc.model, sc.training, sc.cluster, sc.plan)
        ok.append((row, sc))
    return ok, skipped


def test_every_row_is_a_valid_scenario_or_a_documented_skip(built: tuple[list, dict[int, str]]) -> None:
    ok, skipped = built
    assert len(ok) + len(skipped) == 556
    unknown = {rid: why for rid, why in skipped.items() if not any(k in why for k in KNOWN_REASONS)}
    assert not unknown, unknown
    assert len(ok) >= 520  # 541 since Nemotron 3 Super has a preset


def test_moe_cp_and_fsdp_rows_are_expressed(built: tuple[list, dict[int, str]]) -> None:
    ok, _ = built
    kinds = collections.Counter()
    for row, sc in ok:
        kinds["moe"] += sc.model.is_moe and sc.plan.ep > 1
        kinds["cp"] += sc.plan.cp > 1
        kinds["fsdp"] += sc.plan.fsdp != "none"
        kinds["interleaved"] += sc.plan.schedule == "interleaved"
        kinds["fp8"] += sc.training.precision == "fp8"
    assert kinds["moe"] >= 100 and kinds["cp"] >= 20 and kinds["fsdp"] >= 200
    assert kinds["interleaved"] >= 20 and kinds["fp8"] >= 100
