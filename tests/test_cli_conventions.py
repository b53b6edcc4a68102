"""CLI conventions: --version, '-' is standard output, search and collective tables as files,
--calibration on every simulating command, files readable by others, every command says what it wrote."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pandas as pd
import pytest

from tests.test_cli import EXAMPLE, ROOT, cli

SMALL = ("--set", "model=llama2-7b", "--set", "training.global_batch_size=16", "--set", "training.seq_len=2048")


def test_version() -> None:
    p = cli("--version")
    assert p.returncode == 0 and p.stdout.strip().startswith("clustersim 0.")


def test_simulate_json_to_stdout_is_pure_json_with_the_scenario(tmp_path: Path) -> None:
    p = cli("simulate", str(EXAMPLE), "--json", "-", "--trace", str(tmp_path / "t.json"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    sc = doc["scenario"]
    assert sc["model"] == "llama3-70b" and sc["num_layers"] == 80 and sc["global_batch_size"] == 128
    assert sc["profile"] and sc["profile_fit_date"] and sc["input_hash"] and doc["written_at"]
    assert sum(doc["compute_breakdown_s"].values()) == pytest.approx(doc["breakdown_s"]["compute"], rel=1e-9)
    assert doc["tflops_per_gpu"] == pytest.approx(doc["mfu"] * 989.4, rel=0.01)  # H100 SXM dense BF16 peak
    assert f"wrote {tmp_path / 't.json'}" in p.stderr  # said on stderr: stdout stays JSON


def test_simulate_files_are_0644_and_said(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = cli("simulate", str(EXAMPLE), "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert f"wrote {out}" in p.stdout
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert "GEMM efficiency loss" in p.stdout and "TFLOP/s/GPU" in p.stdout and "headroom" in p.stdout


def test_search_json_and_csv(tmp_path: Path) -> None:
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--top", "3", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["scenario"]["model"] == "llama2-7b" and doc["scenario"]["engine_calls"] >= 1
    ranked = doc["ranked"]
    assert ranked and all(r["bound_s"] <= r["step_time_s"] for r in ranked)
    assert [r["step_time_s"] for r in ranked] == sorted(r["step_time_s"] for r in ranked)
    assert doc["pareto"][0]["step_time_s"] == ranked[0]["step_time_s"]
    out = tmp_path / "s.csv"
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--top", "3", "--csv", str(out))
    assert p.returncode == 0 and f"wrote {out}" in p.stdout
    frame = pd.read_csv(out, comment="#")
    assert frame["step_time_s"].iloc[0] == pytest.approx(ranked[0]["step_time_s"])
    assert "# model: llama2-7b" in out.read_text()


def test_search_cost_needs_a_price_and_objectives_are_closed() -> None:
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "cost")
    assert p.returncode == 2 and "cost_per_gpu_hour" in p.stderr and "Traceback" not in p.stderr
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "speed")
    assert p.returncode == 2 and "time, cost, memory, energy" in p.stderr
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "cost", "--set", "cluster.cost_per_gpu_hour=2.5")
    assert p.returncode == 0, p.stderr
    assert "$/M tok" in p.stdout


def test_search_cost_at_an_owners_prices() -> None:
    """--objective cost with --price-per-kwh/--capex-per-gpu ranks by the owner's $/token (energy and
    amortised capital), the bound in $/M tokens never above the plan's; a bad price names its option."""
    owner = ["--price-per-kwh", "0.5", "--capex-per-gpu", "25000", "--pue", "1.3"]
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "cost", *owner, "--top", "3", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["scenario"]["price_basis"] == "owner" and doc["scenario"]["pue"] == 1.3
    costs = [r["cost_per_million_tokens"] for r in doc["ranked"]]
    assert costs == sorted(costs) and all(r["bound_cost_per_million_tokens"] <= r["cost_per_million_tokens"] * (1 + 1e-12)
                                          for r in doc["ranked"])
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "cost", "--price-per-kwh", "0.5", "--pue", "0.5")
    assert p.returncode == 2 and "--pue = 0.5" in p.stderr and "Traceback" not in p.stderr


def test_search_energy_objective_ranks_by_energy_per_token() -> None:
    """--objective energy: JSON rows ranked by J/token, kWh/M tokens = J/token / 3.6, the bound in
    kWh/M tokens never above the plan's figure, and a front over time, memory and energy."""
    p = cli("search", str(EXAMPLE), "--gpus", "8", *SMALL, "--objective", "energy", "--top", "3", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    ranked, front = doc["ranked"], doc["pareto"]
    assert doc["scenario"]["objective"] == "energy" and ranked and front
    energies = [r["energy_j_per_token"] for r in ranked]
    assert energies == sorted(energies)
    for r in ranked:
        assert r["kwh_per_million_tokens"] == pytest.approx(r["energy_j_per_token"] / 3.6)
        assert r["bound_kwh_per_million_tokens"] <= r["kwh_per_million_tokens"]
    assert min(r["energy_j_per_token"] for r in front) == pytest.approx(energies[0])


def test_collective_csv_to_stdout_and_the_renamed_profile_flag() -> None:
    p = cli("collective", "--gpus", "16", "--sizes", "1MiB,64MiB", "--csv", "-")
    assert p.returncode == 0, p.stderr
    frame = pd.read_csv(io.StringIO(p.stdout), comment="#")
    assert list(frame["size_bytes"]) == [2**20, 64 * 2**20] and (frame["time_s"] > 0).all()
    assert "# accelerator: H100" in p.stdout
    p = cli("collective", "--gpus", "16", "--profile", "x.yaml")
    assert p.returncode == 2 and "--calibration" in p.stderr


@pytest.mark.parametrize("command", [["scale", str(ROOT / "examples" / "scaling_llama3_70b.yaml"), "--gpus", "64"],
                                     ["goodput", str(EXAMPLE)], ["stragglers", str(EXAMPLE)],
                                     ["simulate", str(EXAMPLE)], ["search", str(EXAMPLE)],
                                     ["sweep", str(ROOT / "examples" / "sweeps" / "llama3_8b_scaling.yaml"), "--out", "x"],
                                     ["collective"]])
def test_every_simulating_command_takes_calibration(command: list[str], tmp_path: Path) -> None:
    p = cli(*command, "--calibration", str(tmp_path / "missing.yaml"), cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "missing.yaml does not exist" in p.stderr and "Traceback" not in p.stderr
