"""The causes ``watch`` names beyond one log's level: the slow rank or node of per-rank timings
(Megatron-LM ``--timing-log-option all`` blocks, ``megatron/core/timers.py`` commit 00caa53a;
``--log-straggler`` lines, ``megatron/core/utils.py::StragglerDetector.report`` commit 22e030e9),
and growth with scale (runs of the same job at other GPU counts, r_i = k + c_i (f - k)).
The logs are synthetic, drawn with a seeded numpy Generator, in those formats."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from clustersim.simulator.calibration.imported_runs import ImportedRun, write_run
from clustersim.simulator.calibration.ranks import (
    detection_reports, parse_rank_times, parse_straggler_reports, slow_rank, slow_rank_from_straggler, slow_rank_from_timers,
)
from clustersim.simulator.calibration.runlog_records import StepStats
from clustersim.simulator.calibration.watch import Prediction, ScalePoint, WatchRules, assess, cause_of, scale_fit
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.step.simulate import simulate

WORLD = 16
TIMERS = (("forward-backward", 900.0), ("forward-compute", 300.0), ("backward-compute", 580.0))


def iteration_line(it: int, total: int, t_s: float) -> str:
    """Megatron training_log line (training.py), log interval 1."""
    return (f" [2025-06-01 12:00:00] iteration {it:8d}/{total:8d} | consumed samples: {it * 128:12d} | "
            f"elapsed time per iteration (ms): {t_s * 1e3:.1f} | learning rate: 1.0E-04 | global batch size:   128 |"
            " lm loss: 2.0E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def all_ranks_block(rng: np.random.Generator, slow: dict[int, float], scale: float = 1.0) -> str:
    """``times across ranks (ms):`` as Timers._get_all_ranks_time_string prints it; compute timers
    of the ranks in ``slow`` are multiplied by their factor (forward-backward, holding the waits, is not)."""
    text = "times across ranks (ms):"
    for name, base in TIMERS:
        text += f"\n  {name}:"
        for r in range(WORLD):
            t = base * scale * float(rng.normal(1.0, 0.01)) * (slow.get(r, 1.0) if name != "forward-backward" else 1.0)
            text += f"\n     rank {r:2d}: {t:.2f}"
    return text + "\n"


def megatron_with_timers(times: np.ndarray, rng: np.random.Generator, slow_from: int | None = None,
                         slow: dict[int, float] | None = None, pp_scale: dict[int, float] | None = None) -> str:
    text = "using world size: 16, data-parallel size: 16\n"
    for k, t in enumerate(times):
        it = k + 1
        text += iteration_line(it, len(times), float(t))
        hit = slow if (slow and slow_from is not None and it >= slow_from) else {}
        text += all_ranks_block(rng, hit)
    return text


def test_all_ranks_block_is_read_as_megatron_prints_it() -> None:
    text = megatron_with_timers(np.full(5, 1.0), np.random.default_rng(0))
    blocks = parse_rank_times(text)
    assert [b.step for b in blocks] == [1, 2, 3, 4, 5]
    assert set(blocks[0].timers) == {"forward-backward", "forward-compute", "backward-compute"}
    assert sorted(blocks[0].timers["forward-compute"]) == list(range(WORLD))
    assert blocks[0].timers["backward-compute"][3] == pytest.approx(580.0, rel=0.05)


@pytest.mark.parametrize("seed", range(5))
def test_slow_rank_is_named_with_its_lead(seed: int) -> None:
    rng = np.random.default_rng(seed)
    text = megatron_with_timers(np.full(40, 1.0), rng, slow_from=2, slow={13: 1.20})
    found = slow_rank(text, gpus_per_node=8)
    assert found is not None and (found.rank, found.node) == (13, 1) and not found.whole_node
    assert found.slower == pytest.approx(0.20, abs=0.02) and found.share == 1.0
    assert "forward-compute+backward-compute" in found.source


@pytest.mark.parametrize("seed", range(5))
def test_clean_timers_name_no_rank(seed: int) -> None:
    text = megatron_with_timers(np.full(40, 1.0), np.random.default_rng(seed))
    assert slow_rank(text, gpus_per_node=8) is None


def test_a_whole_slow_node_is_named_as_the_node() -> None:
    text = megatron_with_timers(np.full(30, 1.0), np.random.default_rng(1), slow_from=2,
                                slow={r: 1.15 for r in range(8, 16)})
    found = slow_rank(text, gpus_per_node=8)
    assert found is not None and found.whole_node and found.node == 1 and found.node_ranks == tuple(range(8, 16))
    assert "node 1 (ranks 8, 9" in found.describe()


def test_pipeline_stages_are_compared_within_themselves() -> None:
    """With pp=2, ranks 8-15 (stage 1, e.g. the output layer) run 30% longer: a stage, not a slow rank."""
    rng = np.random.default_rng(2)
    stage1 = {r: 1.30 for r in range(8, 16)}
    text = megatron_with_timers(np.full(30, 1.0), rng, slow_from=1, slow=stage1)
    assert slow_rank(text, pp=2, gpus_per_node=8) is None
    rng = np.random.default_rng(2)
    text = megatron_with_timers(np.full(30, 1.0), rng, slow_from=1, slow={**stage1, 11: 1.30 * 1.12})
    found = slow_rank(text, pp=2, gpus_per_node=8)
    assert found is not None and found.rank == 11 and found.slower == pytest.approx(0.12, abs=0.02)


def test_forward_backward_alone_is_used_and_said() -> None:
    blocks = parse_rank_times("times across ranks (ms):\n  forward-backward:\n" + "".join(
        f"     rank {r:2d}: {1200.0 if r == 5 else 1000.0:.2f}\n" for r in range(8)) * 1)
    found = slow_rank_from_timers(blocks * 4, gpus_per_node=8)
    assert found is not None and found.rank == 5 and "timing-log-level 2" in found.notes[0]


def straggler_line(rng: np.random.Generator, slow_rank_id: int | None, lead: float) -> str:
    """A StragglerDetector.report line (megatron/core/utils.py); the slow rank also has the lowest clock."""
    fast = 3450.0 * float(rng.normal(1.0, 0.002))
    slow_r = slow_rank_id if slow_rank_id is not None else int(rng.integers(0, WORLD))
    mx = fast * (1.0 + (lead if slow_rank_id is not None else 0.004))
    clk_r = slow_r if slow_rank_id is not None else int(rng.integers(0, WORLD))
    return (f"[2025-06-01 12:00:00] | MnRtt/Rnk: {fast:.2f}ms/{(slow_r + 1) % WORLD} | MxRtt/Rnk: {mx:.2f}ms/{slow_r} | "
            f"MnPwr/Rnk: 601796W/8 | MxPwr/Rnk: 683801W/{slow_r} | MnTmp/Rnk: 52C/0 | MxTmp/Rnk: 65C/21 | "
            f"MnUtl/Rnk: 97%/8 | MxUtl/Rnk: 100%/6 | MnClk/Rnk: 1650MHz/{clk_r} | MxClk/Rnk: 1980MHz/0 | "
            f"MnDRtt/Rnk: 14.27ms/23 | MxDRtt/Rnk: 34.65ms/3 | MnEtpt/Rnk: 296.02TF/{slow_r} | MxEtpt/Rnk: 297.32TF/8\n")


def test_straggler_detector_lines_name_the_rank_and_its_clock() -> None:
    rng = np.random.default_rng(3)
    text = "".join(iteration_line(k, 30, 1.0) + straggler_line(rng, 6, 0.18) for k in range(1, 31))
    reports = parse_straggler_reports(text)
    assert len(reports) == 30 and reports[0].step == 1 and reports[0].ends["Rtt"][3] == 6
    found = slow_rank(text, gpus_per_node=8)
    assert found is not None and found.rank == 6 and found.slower == pytest.approx(0.18, abs=0.01)
    assert "lowest GPU clock" in found.notes[0] and "1650" in found.notes[0]
    clean = "".join(iteration_line(k, 30, 1.0) + straggler_line(rng, None, 0.0) for k in range(1, 31))
    assert slow_rank_from_straggler(parse_straggler_reports(clean)) is None


# ---------------------------------------------------------------- growth with scale

@pytest.mark.parametrize("k,f", [(1.0, 1.6), (1.15, 1.0), (1.05, 1.4)])
def test_scale_fit_recovers_compute_and_communication_factors(k: float, f: float) -> None:
    """r_i = (1 - c_i) k + c_i f exactly: the fit returns k and f, residual 0."""
    shares = [0.15, 0.21, 0.31, 0.46]
    points = [ScalePoint(gpus=16 * 2 ** i, ratio=(1 - c) * k + c * f, comm_share=c) for i, c in enumerate(shares)]
    fit = scale_fit(points)
    assert fit is not None and fit.compute == pytest.approx(k, abs=1e-9) and fit.comm == pytest.approx(f, abs=1e-9)
    assert fit.residual < 1e-9


def test_scale_fit_needs_a_spread_of_communication_shares() -> None:
    assert scale_fit([ScalePoint(gpus=8, ratio=1.1, comm_share=0.20), ScalePoint(gpus=16, ratio=1.2, comm_share=0.205)]) is None
    assert scale_fit([ScalePoint(gpus=8, ratio=1.1, comm_share=0.2)]) is None


def test_cause_growth_with_scale_vs_compute() -> None:
    pred = Prediction(step_time_s=1.0, interval=(0.95, 1.05), exposed_comm_share=0.46, compute_share=0.5, num_gpus=128)
    net = scale_fit([ScalePoint(gpus=g, ratio=1 + 0.6 * c, comm_share=c) for g, c in ((16, 0.15), (32, 0.21), (128, 0.46))])
    assert net is not None and cause_of(0.28, pred, WatchRules(), False, scale=net).startswith("network (growth with scale)")
    cpu = scale_fit([ScalePoint(gpus=g, ratio=1.15, comm_share=c) for g, c in ((16, 0.15), (32, 0.21), (128, 0.46))])
    assert cpu is not None and cause_of(0.15, pred, WatchRules(), False, scale=cpu).startswith("compute (not growth")
    both = scale_fit([ScalePoint(gpus=g, ratio=1.2 + c * (1.4 - 1.2), comm_share=c)
                      for g, c in ((16, 0.15), (32, 0.21), (128, 0.46))])
    assert both is not None and both.compute == pytest.approx(1.2) and both.comm == pytest.approx(1.4)
    assert cause_of(0.22, pred, WatchRules(), False, scale=both).startswith("network and compute")


def test_assess_puts_the_slow_rank_first() -> None:
    rng = np.random.default_rng(0)
    text = megatron_with_timers(np.full(30, 1.0), rng, slow_from=2, slow={13: 1.2})
    slow = slow_rank(text, gpus_per_node=8)
    pred = Prediction(step_time_s=1.0, interval=(0.95, 1.05), exposed_comm_share=0.2, compute_share=0.7)
    from clustersim.simulator.calibration.runlogs import parse_log
    records = parse_log(megatron_with_timers(np.full(30, 1.15), rng), "x.log").steps
    a = assess(records, pred, slow=slow)
    assert a.alert and a.cause.startswith("slow rank: rank 13 (node 1)") and "about +14% of the step" in a.cause
    assert "slow_rank" in {e.kind for e in a.events}


# ---------------------------------------------------------------- the command

def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", *args], capture_output=True, text=True, timeout=600)


def job(n: int) -> dict[str, object]:
    return {"name": f"l8-{n}", "model": "llama3-8b", "training": {"seq_len": 4096, "global_batch_size": 128, "precision": "bf16"},
            "cluster": {"preset": "dgx-h100", "num_gpus": n, "nic_bandwidth_gbps": 100},
            "plan": {"tp": 2, "dp": n // 2, "zero": 1, "micro_batch": 1}}


def predicted(n: int) -> tuple[float, float]:
    sc = scenario_from_dict(job(n))
    r = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile)
    exposed = sum(r.breakdown.get(k, 0.0) for k in ("exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "exposed_dp"))
    return r.step_time, exposed / r.step_time


def test_watch_cli_names_the_slow_rank_in_the_action_line(tmp_path: Path) -> None:
    scenario = tmp_path / "job.yaml"
    scenario.write_text(yaml.safe_dump(job(16)))
    t, _ = predicted(16)
    rng = np.random.default_rng(4)
    times = t * (1 + 0.01 * rng.standard_normal(50))
    times[25:] *= 1.15
    (tmp_path / "slow.log").write_text(megatron_with_timers(times, rng, slow_from=26, slow={13: 1.25}))
    p = cli("watch", str(scenario), str(tmp_path / "slow.log"), "--interval", "-5,5")
    assert p.returncode == 3, p.stdout + p.stderr
    action = [ln for ln in p.stdout.splitlines() if ln.startswith("ACTION clustersim-watch")]
    assert action and "cause=slow_rank" in action[0] and "rank=13 node=1" in action[0]
    assert 26 <= int(action[0].split("step=")[1].split()[0]) <= 26 + 4  # where the slowdown was flagged
    assert p.stdout.count("slow_rank") >= 1 and "rank 13 (node 1) is 2" in p.stdout
    rng = np.random.default_rng(5)
    (tmp_path / "clean.log").write_text(megatron_with_timers(t * (1 + 0.01 * rng.standard_normal(50)), rng))
    ok = cli("watch", str(scenario), str(tmp_path / "clean.log"), "--interval", "-5,5")
    assert ok.returncode == 0 and "slow_rank" not in ok.stdout, ok.stdout + ok.stderr


def scale_run(root: Path, n: int, measured: float) -> None:
    stats = StepStats(median_s=measured, p99_s=measured, mean_s=measured, records=10, warmup_steps=0, marked={})
    write_run(ImportedRun(name=f"l8-{n}", family="l8", scenario=job(n), framework="megatron", stats=stats,
                          steps=((1, measured, 1, ()),), provenance={"num_gpus": n, "notes": []}), root / f"l8-{n}")


@pytest.mark.parametrize("k,f,cause", [(1.0, 1.8, "cause=network_growth_with_scale"), (1.2, 1.0, "cause=compute_not_growth_with_scale")])
def test_watch_cli_tells_growth_with_scale_from_compute(tmp_path: Path, k: float, f: float, cause: str) -> None:
    """Runs at 16 and 32 GPUs and the watched one at 128, each measured = predicted x ((1-c)k + cf)."""
    for n in (16, 32):
        t, c = predicted(n)
        scale_run(tmp_path / "runs", n, t * ((1 - c) * k + c * f))
    scenario = tmp_path / "job.yaml"
    scenario.write_text(yaml.safe_dump(job(128)))
    t, c = predicted(128)
    rng = np.random.default_rng(6)
    times = t * ((1 - c) * k + c * f) * (1 + 0.003 * rng.standard_normal(40))
    (tmp_path / "big.log").write_text("".join(iteration_line(i + 1, 40, float(x)) for i, x in enumerate(times)))
    p = cli("watch", str(scenario), str(tmp_path / "big.log"), "--interval", "-5,5", "--scale-runs", str(tmp_path / "runs"))
    assert p.returncode == 3, p.stdout + p.stderr
    action = [ln for ln in p.stdout.splitlines() if ln.startswith("ACTION clustersim-watch")]
    assert action and cause in action[0], p.stdout
    assert f"compute {k:.2f}x and exposed communication {f:.2f}x" in " ".join(p.stdout.split())
    none = cli("watch", str(scenario), str(tmp_path / "big.log"), "--scale-runs", str(tmp_path / "nothing"))
    assert none.returncode == 2 and "not a folder" in none.stderr and "Traceback" not in none.stderr


def test_rank_prefixed_timers_are_read() -> None:
    """Megatron prints the timers on the last rank: under torchrun --tee every line carries [rank15]:."""
    text = megatron_with_timers(np.full(30, 1.0), np.random.default_rng(8), slow_from=2, slow={4: 1.2})
    prefixed = "".join(f"[rank15]:{line}" for line in text.splitlines(keepends=True))
    found = slow_rank(prefixed, gpus_per_node=8)
    assert found is not None and (found.rank, found.node) == (4, 0)


def test_a_slow_rank_is_named_within_the_stated_records() -> None:
    """watch reads the last 2 x window reports (16): a rank slow from report N is named once more than
    2/3 of them show it, by report N + 10 (11 of 16), and never before N."""
    rng = np.random.default_rng(9)
    start, n = 40, 70
    text = megatron_with_timers(np.full(n, 1.0), rng, slow_from=start, slow={13: 1.15})
    cuts = [m.start() for m in re.finditer(r"^ \[2025", text, flags=re.M)][1:] + [len(text)]
    first = next(k + 1 for k, cut in enumerate(cuts) if slow_rank(text[:cut], gpus_per_node=8, last=16) is not None)
    assert first == start + detection_reports(16) - 1 == start + 10
