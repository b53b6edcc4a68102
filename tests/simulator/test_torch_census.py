"""The collective census: what a real training step puts on the wire against what the simulator prices.

Recorded censuses of the small and the holdout GPT (every 2-rank plan, 2 gloo ranks, provenance
in ``torch_recorded/PROVENANCE.md``) and a live one of the CI GPT must agree with the simulator's
lowering call for call (kind, count exactly, bytes within ``BYTES_TOLERANCE``); the pipeline
passes must run in the order the simulator's schedules issue them. Nothing here is timed.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clustersim.simulator.calibration.torch_backend.census import (BYTES_TOLERANCE, COUNTING_MACHINE, compare,
                                                                  measured_tally, passes, simulated_tallies, wire_kind)
from clustersim.simulator.calibration.torch_backend.check import DDP_FIRST_BUCKET_BYTES, model_spec, parallel_plan, training_spec
from clustersim.simulator.calibration.torch_backend.measure import HOLDOUT_GPT, SMALL_GPT, TINY_GPT, standard_plans
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig
from clustersim.simulator.profile import CalibrationProfile, machine_cluster
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.schedules import stage_program
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import LOSS_ALL_REDUCES, lower, step_calls

RECORDED = Path(__file__).parent / "torch_recorded"
PLANS = {p.name: p for p in standard_plans(2)}


def _recorded(model: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((RECORDED / f"census_{model}.json").read_text())
    return data


def _costing(plan: BackendPlan, cfg: GPTConfig) -> Costing:
    prof = CalibrationProfile(name="census", machine=dict(COUNTING_MACHINE))
    pplan = parallel_plan(plan, overlap=False)
    cluster = machine_cluster(prof, plan.world_size)
    return Costing(model_spec(cfg), training_spec(cfg, plan), pplan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(pplan, cluster.gpus_per_node), prof))


@pytest.mark.parametrize("model", ["small", "holdout"])
def test_every_recorded_plan_issues_exactly_what_the_simulator_prices(model: str) -> None:
    censuses = _recorded(model)
    assert {c["plan"]["name"] for c in censuses} == set(PLANS)
    for c in censuses:
        assert c["backend"] == "gloo" and len(c["ranks"]) == 2
        assert compare(c) == [], c["plan"]["name"]


@pytest.mark.parametrize("model", ["small", "holdout"])
def test_a_call_more_or_less_on_either_side_is_reported(model: str) -> None:
    """The comparison can fail: one call dropped, one invented, one resized are each found."""
    for c in _recorded(model):
        calls = c["ranks"][0]["calls"]
        if not calls:
            continue
        dropped = copy.deepcopy(c)
        dropped["ranks"][0]["calls"] = calls[1:]
        found = compare(dropped)
        assert len(found) == 1 and found[0].rank == 0 and found[0].measured + 1 == found[0].simulated
        extra = copy.deepcopy(c)
        extra["ranks"][1]["calls"] = calls + [["all_to_all", 1000]]
        assert [(m.kind, m.measured, m.simulated) for m in compare(extra)] == [("all_to_all", 1, 0)]
        resized = copy.deepcopy(c)
        op, n = calls[0]
        resized["ranks"][0]["calls"] = [[op, int(n * (1 + 5 * BYTES_TOLERANCE))]] + calls[1:]
        assert len(compare(resized)) == 2  # the resized call unpriced, the priced one missing


def test_the_recorded_pipelines_ran_in_the_simulators_order() -> None:
    """torch.distributed.pipelining's ScheduleGPipe (all forwards, then the backwards in the same
    order) and Schedule1F1B (stage s: pp - s forwards, then B/F alternating) against the
    simulator's ``stage_program``, micro-batch for micro-batch."""
    for model in ("small", "holdout"):
        for c in _recorded(model):
            plan = BackendPlan(**c["plan"])
            if plan.pp == 1:
                continue
            for rank, seen in passes(c).items():
                sim = [(kind, mb) for kind, mb, _ in stage_program(plan.schedule, rank, plan.pp, plan.micro_batches)]
                assert seen == sim, (model, plan.name, rank)


def test_the_recorded_pipelines_hold_as_many_activations_as_the_simulator_stores() -> None:
    """The memory consequence of the order: the most micro-batches whose forward ran and whose
    backward has not (their activations live), counted from the real pass order, is the
    simulator's in-flight peak: GPipe all m on every stage, 1F1B pp - stage (torch's warm-up)."""
    from clustersim.simulator.plan.schedules import stage_in_flight_peak
    for model in ("small", "holdout"):
        for c in _recorded(model):
            plan = BackendPlan(**c["plan"])
            if plan.pp == 1:
                continue
            for rank, seen in passes(c).items():
                live = peak = 0
                for kind, _ in seen:
                    live += 1 if kind == "F" else -1
                    peak = max(peak, live)
                assert peak == stage_in_flight_peak(plan.schedule, rank, plan.pp, plan.micro_batches)
                assert peak == (plan.micro_batches if plan.schedule == "gpipe" else plan.pp - rank)


def test_tp_calls_per_step_have_the_closed_form_counts() -> None:
    """Per step on the CI GPT: 4 calls per layer and micro-batch (2 blocks, forward and backward),
    plus the ends (TP: embedding 1, output 1; SP: 2 each) and the loss's 3 all-reduces."""
    for name, sp in (("tp2", False), ("tp2-sp", True)):
        plan = PLANS[name]
        calls = step_calls(_costing(plan, TINY_GPT))[0]
        tokens = plan.micro_batch * TINY_GPT.seq_len
        act = tokens * TINY_GPT.hidden_size * 4
        by = {(c.kind, c.size): c.count for c in calls}
        loss = by.pop(("all_reduce", tokens * 4.0))
        assert loss == LOSS_ALL_REDUCES
        if sp:
            norms = by.pop(("all_reduce", (2 * TINY_GPT.num_layers + 1) * 2 * TINY_GPT.hidden_size * 4.0))
            assert norms == 1  # weight and bias of every LayerNorm, one coalesced all-reduce
            assert by == {("all_gather", act): 4 * TINY_GPT.num_layers + 2,
                          ("reduce_scatter", act): 4 * TINY_GPT.num_layers + 2}
        else:
            assert by == {("all_reduce", act): 4 * TINY_GPT.num_layers + 2}


def test_priced_tp_time_is_the_sum_of_the_listed_calls() -> None:
    """``step_calls`` lists what lowering prices: the TP seconds of one step (every chunk's
    tp_fwd + tp_bwd per micro-batch, and the SP norms' all-reduce) equal the listed calls' prices."""
    for name in ("tp2", "tp2-sp"):
        for cfg in (TINY_GPT, SMALL_GPT, HOLDOUT_GPT):
            plan = PLANS[name]
            c = _costing(plan, cfg)
            stage = lower(c).stages[0]
            priced = plan.micro_batches * sum(ch.tp_fwd + ch.tp_bwd for ch in stage.chunks) + stage.grad_sync
            listed = sum(call.count * c.pricer.time(call.kind, call.size, call.axis) for call in step_calls(c)[0])
            assert priced == pytest.approx(listed, rel=1e-12) and listed > 0


def test_ddp_buckets_are_torchs_first_bucket_then_the_rest() -> None:
    calls = step_calls(_costing(PLANS["dp2-ddp"], SMALL_GPT))[0]
    sizes = sorted(c.size for c in calls for _ in range(c.count))
    grads = sum(o.params for o in _partition_ops(PLANS["dp2-ddp"], SMALL_GPT)) * 4
    assert sizes[0] == DDP_FIRST_BUCKET_BYTES and sum(sizes) == pytest.approx(grads)


@pytest.mark.parametrize("first", [-1.0, 2.0 * 25 * 2**20, float("inf")])
def test_a_first_bucket_outside_zero_to_the_bucket_size_is_refused(first: float) -> None:
    import dataclasses

    from clustersim.simulator.errors import PlanError
    from clustersim.simulator.plan.checks import check_plan
    plan, cfg = PLANS["dp2-ddp"], SMALL_GPT
    pplan = dataclasses.replace(parallel_plan(plan), first_bucket_size=first)
    cluster = machine_cluster(CalibrationProfile(name="census", machine=dict(COUNTING_MACHINE)), 2)
    with pytest.raises(PlanError, match="plan.first_bucket_size"):
        check_plan(model_spec(cfg), training_spec(cfg, plan), cluster, pplan)


def _partition_ops(plan: BackendPlan, cfg: GPTConfig) -> list[Any]:
    from clustersim.simulator.step.partition import partition_plan
    return [o for st in partition_plan(model_spec(cfg), training_spec(cfg, plan), parallel_plan(plan)).stages
            for ch in st.chunks for o in ch.ops]


def test_fsdp_gathers_every_unit_and_the_root_once() -> None:
    """Per layer: all-gather forward and backward, reduce-scatter; the root (embedding, final norm,
    output) once each; every parameter reduce-scattered exactly once."""
    plan, cfg = PLANS["dp2-fsdp"], SMALL_GPT
    calls = step_calls(_costing(plan, cfg))[0]
    gathers = {c.size: c.count for c in calls if c.kind == "all_gather"}
    scatters = {c.size: c.count for c in calls if c.kind == "reduce_scatter"}
    assert sorted(gathers.values()) == [1, 2 * cfg.num_layers]
    assert sum(s * n for s, n in scatters.items()) == pytest.approx(sum(o.params for o in _partition_ops(plan, cfg)) * 4)


def test_gloo_names_its_reduce_scatter_an_all_reduce() -> None:
    assert wire_kind("reduce_scatter", "gloo") == "all_reduce"
    assert wire_kind("reduce_scatter", "nccl") == "reduce_scatter"
    entry = {"calls": [["all_gather", 10], ["send", 3], ["recv", 3], ["all_reduce", 7]]}
    assert measured_tally(entry, 2) == {("all_gather", 80.0): 1, ("send_recv", 12.0): 2, ("all_reduce", 28.0): 1}


def test_pipeline_stages_tally_their_sends_and_receives() -> None:
    plan = PLANS["pp2-1f1b"]
    for tally in simulated_tallies(plan, SMALL_GPT):
        act = plan.micro_batch * SMALL_GPT.seq_len * SMALL_GPT.hidden_size * 4.0
        assert dict(tally) == {("send_recv", act): 2 * plan.micro_batches}


def test_the_older_backends_extra_calls_are_found() -> None:
    """``census_holdout_before.json``: the holdout GPT on the backend as it was before this census
    (q, k and v each reduced their input gradient; the SP norms' Partial gradients reduced again at
    every Adam op). The comparison names exactly those calls."""
    before = {c["plan"]["name"]: c for c in json.loads((RECORDED / "census_holdout_before.json").read_text())}
    tokens_act = PLANS["tp2"].micro_batch * HOLDOUT_GPT.seq_len * HOLDOUT_GPT.hidden_size * 4.0
    layers = HOLDOUT_GPT.num_layers
    for name, c in before.items():
        found = {(m.rank, m.kind, m.size): (m.measured, m.simulated) for m in compare(c)}
        if name == "tp2":  # 2 extra all-reduces per layer (k and v's own), all else priced
            assert found == {(r, "all_reduce", tokens_act): (6 * layers + 2, 4 * layers + 2) for r in (0, 1)}
        elif name == "tp2-sp":  # 3 all-reduces per norm parameter per step instead of one for all
            norm_params = (2 * layers + 1) * 2
            assert found == {**{(r, "all_reduce", HOLDOUT_GPT.hidden_size * 4.0): (3 * norm_params, 0) for r in (0, 1)},
                             **{(r, "all_reduce", norm_params * HOLDOUT_GPT.hidden_size * 4.0): (0, 1) for r in (0, 1)}}
        else:
            assert found == {}, name


def test_cli_census_replays_a_recorded_census(tmp_path: Path) -> None:
    # as a user runs it: the installed CLI (exit 0 agreed, 1 a mismatch, 2 a bad option, one line)
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "census", *args],
                              capture_output=True, text=True, timeout=300)

    ok = run("--replay", str(RECORDED / "census_small.json"), "--out", str(tmp_path / "c.json"))
    assert ok.returncode == 0, ok.stderr
    assert "pp2-gpipe" in ok.stdout and "F0 F1 F2 F3 B0 B1 B2 B3" in ok.stdout
    assert json.loads((tmp_path / "c.json").read_text()) == _recorded("small")
    bad = run("--replay", str(RECORDED / "census_holdout_before.json"))
    assert bad.returncode == 1 and "tp2 rank 0: all_reduce" in bad.stdout
    missing = run("--replay", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


torch = pytest.importorskip("torch")


@pytest.mark.timeout(240)
def test_live_census_of_every_plan_and_framework_variant() -> None:
    """2 real gloo ranks: every 2-rank plan of the CI GPT agrees with the simulator call for call,
    its pipelines run in the simulator's order, and the framework microbenchmark's call counts
    (``framework_calls``, the divisor of its per-call cost) are the ones on the wire."""
    from clustersim.simulator.calibration.torch_backend.measure import census
    from clustersim.simulator.calibration.torch_backend.microbench_comm import (FRAMEWORKS, framework_calls, framework_gpt,
                                                                           framework_plan)
    for c in census(TINY_GPT, list(PLANS.values()), timeout=200):
        assert compare(c) == [], c["plan"]["name"]
        plan = BackendPlan(**c["plan"])
        for rank, seen in passes(c).items():
            if plan.pp > 1:
                assert seen == [(k, mb) for k, mb, _ in stage_program(plan.schedule, rank, plan.pp, plan.micro_batches)]
    small = framework_gpt(2)
    for c in census(small, [framework_plan(v, 2) for v in FRAMEWORKS], timeout=200):
        assert len(c["ranks"][0]["calls"]) == framework_calls(c["plan"]["name"], small.num_layers), c["plan"]["name"]
