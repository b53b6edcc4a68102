"""The scenario schema: one set of pydantic models checks every field, prints the JSON Schema,
and a user-built Cluster is validated by simulate(); files and report folders are whole."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clustersim import files
from clustersim.simulator.errors import ScenarioError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.scenario import PLAN_BOUNDS, apply_overrides, scenario_from_dict, scenario_json_schema
from clustersim.simulator.scenario import ScenarioSpec, with_override
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.sweep import sweep_spec as sweep_module
from clustersim.topologies import H100_SXM, Cluster, NodeSpec, TopologyError, fat_tree
from clustersim.workloads import TrainingSpec, get_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
BASE = yaml.safe_load((ROOT / "examples" / "llama3_70b_h100.yaml").read_text())


def test_schema_names_types_ranges_and_choices() -> None:
    schema = scenario_json_schema()
    plan = schema["$defs"]["plan"]["properties"]
    assert {k: v for k, v in plan["tp"].items() if k != "description"} == {
        "default": 1, "maximum": 131072, "minimum": 1, "title": "Tp", "type": "integer"}
    assert plan["schedule"]["enum"] == ["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"]
    assert plan["sp"]["type"] == "boolean"
    assert schema["$defs"]["plan"]["additionalProperties"] is False
    assert set(schema["required"]) == {"model", "training", "cluster", "plan"}
    assert schema["$defs"]["cluster"]["properties"]["nvlink_bandwidth_gb_s"]["anyOf"][0]["exclusiveMinimum"] == 0


def test_schema_describes_every_plan_training_and_model_field() -> None:
    # editors show the field's own docstring: every field of the three dataclasses has one, and it is the text
    schema = scenario_json_schema()
    for section in ("plan", "training", "model"):
        props = schema["$defs"][section]["properties"]
        missing = [name for name, prop in props.items() if name != "preset" and not prop.get("description")]
        assert missing == [], (section, missing)
    plan = schema["$defs"]["plan"]["properties"]
    assert plan["tp"]["description"].startswith("Tensor-parallel") or "tensor" in plan["tp"]["description"].lower()
    assert "hpZ" in plan["zero_hpz_partition_size"]["description"]


def test_schema_command_prints_the_same_schema(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "schema"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == scenario_json_schema()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_scenario_is_valid_under_the_schema(path: Path) -> None:
    ScenarioSpec.model_validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("field", sorted(k for k, (lo, hi, _) in PLAN_BOUNDS.items() if isinstance(hi, int)))
def test_each_bounded_plan_field_rejects_just_past_its_range(field: str) -> None:
    low, high, _ = PLAN_BOUNDS[field]
    for value in (high + 1, low - 1, True, float(low), str(low)):
        with pytest.raises(ScenarioError, match=rf"plan\.{field} = "):
            scenario_from_dict(with_override(BASE, f"plan.{field}", value))


def test_set_and_sweeps_share_one_override_rule() -> None:
    assert sweep_module.with_override is with_override
    once = apply_overrides(BASE, ["plan.tp=4", "model.num_layers=40", "cluster={nic_bandwidth_gbps: 200}"])
    assert once["plan"]["tp"] == 4 and once["model"] == {"preset": "llama3-70b", "num_layers": 40}
    assert once["cluster"] == {"preset": "dgx-h100", "num_gpus": 64, "nic_bandwidth_gbps": 200}  # merged
    with pytest.raises(ScenarioError, match=r"plan\.tp = 8 is not a mapping"):
        apply_overrides(BASE, ["plan.tp.x=1"])


NODE = NodeSpec(gpus_per_node=8, nvlink_bandwidth=450e9, in_network_reduction=True, nic_bandwidth=50e9)


def _user_cluster(bandwidth: float = 50e9, cut: bool = False) -> Cluster:
    graph = fat_tree(16, NODE, hosts_per_leaf=16)
    if cut:
        for u, v in [e for e in graph.edges if "gpu15" in e]:
            graph.remove_edge(u, v)
    else:
        graph["nic0"]["leaf0"]["bandwidth"] = bandwidth
    return Cluster(name="mine", accelerator=H100_SXM, num_gpus=16, gpus_per_node=8, graph=graph, fabric="fat_tree",
                   params={}, nic_bandwidth=50e9, nvlink_domain_size=8)


@pytest.mark.parametrize("cluster,needle", [
    (lambda: _user_cluster(0.0), "bandwidth = 0.0 must be > 0"),
    (lambda: _user_cluster(math.nan), "bandwidth = nan must be > 0"),
    (lambda: _user_cluster(math.inf), "bandwidth = inf must be > 0"),
    (lambda: _user_cluster(cut=True), "unreachable"),
])
def test_simulate_validates_a_user_built_cluster(cluster, needle: str) -> None:
    plan, training = ParallelPlan(tp=8, dp=2), TrainingSpec(seq_len=1024, global_batch_size=8)
    with pytest.raises(TopologyError, match=needle):
        simulate(get_model("llama3-8b"), training, cluster(), plan)


def test_replace_dir_swaps_whole_folders_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "old.txt").write_text("old")

    def fail(folder: Path) -> None:
        (folder / "half.txt").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        files.replace_dir(out, fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"] and [p.name for p in out.iterdir()] == ["old.txt"]
    page = files.replace_dir(out, lambda folder: files.write_atomic(folder / "report.html", "new"))
    assert page == out / "report.html" and page.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"] and [p.name for p in out.iterdir()] == ["report.html"]
    assert oct(page.stat().st_mode & 0o777) == "0o644"


def test_a_scenario_caps_board_power_and_names_a_bad_cap() -> None:
    """cluster.power_limit_w reaches the accelerator (topologies.power): a compute-bound step slows
    under it; below idle power or above TDP is one error naming the field and the range."""
    base = {"model": {"preset": "llama2-7b", "num_layers": 2}, "training": {"seq_len": 2048, "global_batch_size": 8},
            "cluster": {"preset": "dgx-h100", "num_gpus": 8}, "plan": {"tp": 1, "dp": 8, "zero": 1}}
    free = scenario_from_dict(base)
    capped = scenario_from_dict({**base, "cluster": {**base["cluster"], "power_limit_w": 350}})
    assert free.cluster.accelerator.power_limit_w is None and capped.cluster.accelerator.power_limit_w == 350.0
    t_free = simulate(free.model, free.training, free.cluster, free.plan).step_time
    assert simulate(capped.model, capped.training, capped.cluster, capped.plan).step_time > t_free
    for bad in (40, 900):
        with pytest.raises(ValueError, match=r"power_limit_w = .* must be in \(70, 700\] W"):
            scenario_from_dict({**base, "cluster": {**base["cluster"], "power_limit_w": bad}})
