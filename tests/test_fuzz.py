"""Fuzzing the boundary: random scenarios and random command lines (hypothesis, bounded).

Two properties, a few hundred examples in all, under a minute on the CI machine:
- A scenario mapping (valid or mangled: wrong types, out-of-range, NaN, huge values) through
  ``scenario_from_dict`` + ``simulate`` raises only the project's error types; when it
  succeeds, the Result keeps its invariants: 0 < MFU <= HFU <= 1, step >= ideal compute, the
  breakdown sums to the step, every memory part >= 0, and the same inputs give the same Result.
- A ``clustersim simulate`` command line with random ``--set`` items and options exits 0 or 2,
  and on 2 prints one error line and no traceback (an exception escaping ``main`` fails it).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim.simulator.cli.app import main
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import TopologyError
from clustersim.workloads import WorkloadError

PROJECT_ERRORS = (ClusterSimError, WorkloadError, TopologyError)
JUNK = st.sampled_from([None, True, False, -1, 0, 3, 2.5, math.nan, math.inf, "four", "8", [], {}, 10**30])


def _maybe(value: st.SearchStrategy[Any], junk_percent: int = 4) -> st.SearchStrategy[Any]:
    """Mostly ``value``, junk in about ``junk_percent`` % of the draws (one_of would pick half)."""
    return st.integers(0, 99).flatmap(lambda n: JUNK if n < junk_percent else value)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A small scenario: a shallow Llama-like model (1-8 layers) on 1-16 H100s, a consistent plan
    most of the time, and a junk value in some field now and then."""
    tp, pp, dp = (draw(st.sampled_from(v)) for v in ((1, 2, 4), (1, 2), (1, 2, 4)))
    layers = draw(st.integers(1, 8))
    mb = draw(st.sampled_from((1, 2)))
    model = {"preset": "llama3-8b", "num_layers": draw(_maybe(st.just(layers))),
             "hidden_size": draw(st.sampled_from((1024, 2048, 4096))), "vocab_size": draw(st.sampled_from((32000, 128256, 256000))),
             "tied_embeddings": draw(st.booleans())}
    model["ffn_hidden_size"] = 4 * model["hidden_size"]
    plan = {"tp": draw(_maybe(st.just(tp))), "pp": draw(_maybe(st.just(pp))), "dp": dp, "micro_batch": mb,
            "schedule": draw(st.sampled_from(("1f1b", "gpipe", "zb-h1"))),
            "recompute": draw(st.sampled_from(("none", "selective", "full"))),
            "zero": draw(_maybe(st.sampled_from((0, 1, 2, 3)))), "sp": draw(_maybe(st.booleans())),
            "overlap_grad_reduce": draw(_maybe(st.booleans())), "grad_dtype_bytes": draw(_maybe(st.sampled_from((2, 4))))}
    if draw(st.booleans()):
        plan["recompute_layers"] = draw(_maybe(st.integers(0, layers)))
    if draw(st.integers(0, 3)) == 0:  # ZeRO++ switches (valid with zero 3, refused otherwise)
        plan.update(zero_quantized_weights=draw(_maybe(st.booleans())),
                    zero_hpz_partition_size=draw(_maybe(st.sampled_from((1, 2, 4)))),
                    zero_quantized_gradients=draw(_maybe(st.booleans())))
    training = {"seq_len": draw(_maybe(st.sampled_from((256, 1024, 4096)))),
                "global_batch_size": draw(_maybe(st.just(dp * mb * draw(st.sampled_from((1, 2, 4, 8))))))}
    cluster = {"preset": "dgx-h100", "num_gpus": draw(_maybe(st.just(tp * pp * dp)))}
    if draw(st.integers(0, 9)) == 0:
        cluster[draw(st.sampled_from(("nvlink_bandwidth_gb_s", "nic_bandwidth_gbps", "gpus_per_node",
                                      "nvlink_domain_size", "oversubscription")))] = draw(JUNK)
    return {"model": model, "training": training, "cluster": cluster, "plan": plan}


def _check_invariants(model: Any, result: Any) -> None:
    step = result.step_time
    assert 0 < result.mfu <= result.hfu <= 1.0 + 1e-9, (result.mfu, result.hfu)
    assert step >= result.ideal_compute_s * (1 - 1e-9), (step, result.ideal_compute_s)
    assert math.isclose(sum(result.breakdown.values()), step, rel_tol=1e-6)
    for m in result.memory:
        assert all(v >= 0 for v in m.parts().values()), m.parts()


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=scenarios())
def test_random_scenarios_raise_only_project_errors_and_keep_invariants(data: dict[str, Any]) -> None:
    try:
        sc = scenario_from_dict(data)
        result = simulate(sc.model, sc.training, sc.cluster, sc.plan)
    except PROJECT_ERRORS:
        return
    _check_invariants(sc.model, result)
    again = simulate(sc.model, sc.training, sc.cluster, sc.plan)
    assert again.to_dict() == result.to_dict()


SET_KEYS = ("plan.tp", "plan.pp", "plan.dp", "plan.micro_batch", "plan.sp", "plan.zero", "plan.bucket_size",
            "plan.zero_quantized_weights", "plan.zero_hpz_partition_size",
            "plan.recompute_layers", "plan.schedule", "training.seq_len", "training.global_batch_size",
            "model.num_layers", "model.hidden_size", "cluster.num_gpus", "cluster.nvlink_bandwidth_gb_s",
            "cluster.gpus_per_node", "seed", "mode", "plan", "plan.tp.x", "")
SET_VALUES = ("", "four", "1", "2", "0", "-1", "8.0", "1e30", ".nan", "true", "null", "[1", "[1, 2]", "{a: 1}",
              '"yes"', "1000000000000")
SCENARIO = """\
model: {preset: llama3-8b, num_layers: 2}
training: {seq_len: 1024, global_batch_size: 4}
cluster: {preset: dgx-h100, num_gpus: 2}
plan: {tp: 2, pp: 1, dp: 1}
"""


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    argv = ["simulate", "s.yaml"]
    for _ in range(draw(st.integers(0, 3))):
        key, value = draw(st.sampled_from(SET_KEYS)), draw(st.sampled_from(SET_VALUES))
        argv += ["--set", draw(st.sampled_from((f"{key}={value}", key)))]
    if draw(st.booleans()):
        argv += ["--mode", draw(st.sampled_from(("full", "symmetric", "fast", "")))]
    if draw(st.integers(0, 3)) == 0:
        argv += [draw(st.sampled_from(("--json", "--trace", "--plot"))), draw(st.sampled_from(("out.json", "d", "f/x.json")))]
    return argv


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(argv=command_lines())
def test_random_command_lines_exit_0_or_2_without_traceback(argv: list[str], tmp_path_factory: pytest.TempPathFactory,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "s.yaml").write_text(SCENARIO)
    (folder / "d").mkdir()
    (folder / "f").write_text("a file")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(sys, "argv", ["clustersim", *argv])
        try:
            main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 0
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err
    if code == 2:
        assert "error" in err.lower() or "Invalid value" in err, err
