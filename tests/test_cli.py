"""CLI smoke tests, run as a user would (a subprocess of the installed entry point's module)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3_70b_h100.yaml"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_simulate_writes_json_and_a_perfetto_trace(tmp_path: Path) -> None:
    out, trace, plot = tmp_path / "r.json", tmp_path / "t.json", tmp_path / "w.png"
    p = cli("simulate", str(EXAMPLE), "--json", str(out), "--trace", str(trace), "--plot", str(plot), "--set", "plan.micro_batch=1")
    assert p.returncode == 0, p.stderr
    assert "MFU" in p.stdout and "exposed_tp" in p.stdout
    doc = json.loads(out.read_text())
    assert abs(sum(doc["breakdown_s"].values()) - doc["step_time_s"]) < 1e-6 * doc["step_time_s"]
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and "pid" in e and "tid" in e for e in spans)
    assert {e["cat"] for e in spans} >= {"compute", "bubble"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


@pytest.mark.parametrize("args,needle", [
    (["--set", "plan.tp=3"], "dp(2) * tp(3) * pp(4) * cp(1) = 24 != cluster GPUs 64"),
    (["--set", "model=gpt5"], "is not a preset"),
    (["--set", "cluster.preset=nope"], "unknown cluster preset"),
    (["--set", "plan.micro_batch=8", "--set", "plan.recompute=none"], "largest part: activations"),
    (["--set", "plan.bogus=1"], "unknown field(s) ['bogus']"),
    (["--set", "plan.tp"], "must look like plan.tp=4"),
    (["--set", "training.attention_kernel=flash9"], "attention_kernel = 'flash9': use one of flash3, flash2, unfused"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    p = cli("simulate", str(EXAMPLE), *args)
    assert p.returncode == 2
    assert needle in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_malformed_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [\n")
    for target, needle in ((bad, "not valid YAML at line 2"), (tmp_path / "missing.yaml", "does not exist")):
        p = cli("simulate", str(target))
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_inconsistent_cluster_is_a_clear_error(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(EXAMPLE.read_text().replace("cluster: {preset: dgx-h100, num_gpus: 64}",
                                                    "cluster: {preset: dgx-h100, num_gpus: 60}"))
    p = cli("simulate", str(scenario))
    assert p.returncode == 2 and "num_gpus" in p.stderr and "Traceback" not in p.stderr


def test_simulate_prints_collectives_and_the_placement() -> None:
    p = cli("simulate", str(EXAMPLE), "--placement")
    assert p.returncode == 0, p.stderr
    assert "busiest link" in p.stdout and "gpu0->nic0" in p.stdout
    assert "placement (order tp-cp-ep-dp-pp" in p.stdout


def test_presets_lists_models_accelerators_clusters() -> None:
    p = cli("presets")
    assert p.returncode == 0
    for name in ("llama3-405b", "deepseek-v3", "dgx-h100", "gb200-nvl72"):
        assert name in p.stdout


def test_search_prints_ranked_plans_with_both_tiers() -> None:
    p = cli("search", str(EXAMPLE), "--gpus", "32", "--top", "3")
    assert p.returncode == 0, p.stderr
    assert "plans/s" in p.stdout and p.stdout.count("%") >= 6


def test_search_workers_change_nothing_but_the_time(tmp_path: Path) -> None:
    """``--workers 2`` (engine on forked processes) writes the JSON ``--workers 1`` writes, byte for byte."""
    docs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        p = cli("search", str(EXAMPLE), "--gpus", "32", "--top", "4", "--workers", workers, "--json", str(out))
        assert p.returncode == 0, p.stderr
        assert f"on {workers} process" in " ".join(p.stdout.split())
        docs.append(json.loads(out.read_text()))
    for doc in docs:
        doc.pop("written_at", None)
    assert docs[0]["ranked"] and docs[0] == docs[1]
    bad = cli("search", str(EXAMPLE), "--gpus", "32", "--workers", "-1")
    assert bad.returncode == 2 and "--workers" in bad.stderr and "Traceback" not in bad.stderr


def test_search_gives_each_plan_its_regime_interval(tmp_path: Path) -> None:
    from clustersim.simulator.intervals import interval_for

    out = tmp_path / "s.json"
    p = cli("search", str(EXAMPLE), "--gpus", "32", "--top", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "80% interval s" in p.stdout
    ranked = json.loads(out.read_text())["ranked"]
    assert ranked
    for row in ranked:
        iv = interval_for(row["step_time_s"], "dense", "H100 SXM 80GB", 32)  # the example: Llama 3 70B, H100
        assert row["interval_regime"] == iv.regime == "dense/hopper"
        assert row["step_time_low_s"] == pytest.approx(iv.low_s) and row["step_time_high_s"] == pytest.approx(iv.high_s)
        assert row["step_time_low_s"] < row["step_time_s"] < row["step_time_high_s"]
        assert row["interval_extrapolated"] is False


def test_readme_main_command_shape_and_scale_report(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "clustersim scale examples/scaling_llama3_70b.yaml" in readme
    assert "python -m pytest" in readme
    p = cli("scale", str(ROOT / "examples" / "scaling_llama3_70b.yaml"), "--gpus", "64,128", "--out", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "data:image/png;base64" in html and "naive" in html.lower()


def test_stragglers_distribution_is_ordered_and_slower_than_the_clean_step() -> None:
    p = cli("stragglers", str(EXAMPLE), "--steps", "3", "--slow-fraction", "0.05", "--slow-factor", "1.3")
    assert p.returncode == 0, p.stderr
    values = {}
    for line in p.stdout.splitlines():
        for name in ("no-straggler step", "p50", "p99", "max"):
            if line.strip("│ ").startswith(name + " "):
                values[name] = float(line.split("│")[2].split("s (")[0])
    assert values["no-straggler step"] < values["p50"] <= values["p99"] <= values["max"]


def test_simulate_with_flows_prints_the_fabric_report(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = cli("simulate", str(EXAMPLE), "--fabric-sharing", "flows", "--background", "nic=0.5", "--fabric-report",
            "--degraded", "gpu0->nic0=0.25", "--json", str(out), "--set", "plan.micro_batch=1")
    assert p.returncode == 0, p.stderr
    assert "hottest links" in p.stdout and "lost to sharing" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["fabric"]["sharing"] == "flows" and doc["fabric"]["hottest_links"]
    assert doc["provenance"]["fidelity"] == "flow" and doc["fabric"]["lost_to_sharing_s"]["pp"] > 0
    assert all(0 < row["utilisation"] <= 1 for row in doc["fabric"]["hottest_links"])


@pytest.mark.parametrize("args,needle", [
    (["--fabric-sharing", "fluid"], "--fabric-sharing 'fluid' is not a choice; use one of static, flows"),
    (["--background", "nic=0.5"], "need --fabric-sharing flows"),
    (["--fabric-sharing", "flows", "--background", "nic"], "--background 'nic': write NAME=FRACTION"),
    (["--fabric-sharing", "flows", "--background", "pcie=0.5"], "link class 'pcie' is not in this fabric"),
])
def test_bad_fabric_options_fail_in_one_line(args: list[str], needle: str) -> None:
    p = cli("simulate", str(EXAMPLE), "--set", "plan.micro_batch=1", *args)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


JOB = """name: {name}
model: llama3-8b
training: {{seq_len: 2048, global_batch_size: 32, precision: bf16}}
cluster: {{preset: dgx-h100, num_gpus: 32, oversubscription: 4, rail_optimized: false, hosts_per_leaf: {leaf}}}
plan: {{tp: 1, pp: 1, dp: 32, zero: 1, recompute: full}}
"""


def test_colocate_prints_each_jobs_slowdown_and_writes_json(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(JOB.format(name=name, leaf=32))
    out = tmp_path / "co.json"
    p = cli("colocate", "a.yaml", "b.yaml", "--placement", "interleaved", "--json", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "2 jobs on 64 GPUs" in p.stdout and "links the jobs share" in p.stdout and "leaf0->spine0" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["placement"] == "interleaved" and doc["converged"]
    assert [j["name"] for j in doc["jobs"]] == ["a", "b"] and all(j["slowdown"] > 0 for j in doc["jobs"])
    assert all(j["step_time_aligned_s"] >= j["step_time_shared_s"] > j["step_time_alone_s"] for j in doc["jobs"])


@pytest.mark.parametrize("b_leaf,args,needle", [
    (16, [], "b.yaml: cluster.hosts_per_leaf = 16 but a.yaml has 32"),
    (32, ["--placement", "scattered"], "--placement 'scattered' is not a choice"),
])
def test_bad_colocations_fail_in_one_line(tmp_path: Path, b_leaf: int, args: list[str], needle: str) -> None:
    (tmp_path / "a.yaml").write_text(JOB.format(name="a", leaf=32))
    (tmp_path / "b.yaml").write_text(JOB.format(name="b", leaf=b_leaf))
    p = cli("colocate", "a.yaml", "b.yaml", *args, cwd=tmp_path)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_simulate_beside_a_co_tenant(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(JOB.format(name=name, leaf=32))
    out = tmp_path / "r.json"
    p = cli("simulate", "a.yaml", "--co-tenant", "b.yaml", "--job-placement", "interleaved", "--json", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "beside b (interleaved on 64 GPUs" in p.stdout and "bursts aligned" in p.stdout
    doc = json.loads(out.read_text())
    alone = cli("simulate", "a.yaml", "--fabric-sharing", "flows", "--json", "-", cwd=tmp_path)
    assert doc["fabric"]["sharing"] == "flows" and doc["step_time_s"] > json.loads(alone.stdout)["step_time_s"]
    assert [j["name"] for j in doc["colocation"]["jobs"]] == ["a", "b"]
    assert doc["colocation"]["jobs"][0]["step_time_shared_s"] == doc["step_time_s"]
    bad = cli("simulate", "a.yaml", "--co-tenant", "b.yaml", "--background", "nic=0.2", cwd=tmp_path)
    assert bad.returncode == 2 and "drop --background" in bad.stderr and "Traceback" not in bad.stderr
