"""Fitting profiles: laws recovered from synthetic microbenchmarks, run-import fits, the check's
translation of backend plans into simulator inputs. No torch needed (the real runs are in
test_torch_backend.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clustersim.simulator.profile import load_profile, save_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.step.compute import ADAM_BYTES_PER_PARAM
from clustersim.simulator.calibration.fit import fit_profile, fit_profiles
from clustersim.simulator.calibration.fit_comm import alpha_beta, bus_factor
from clustersim.simulator.calibration.fit_compute import binned_curve, curve_error
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord

PEAK = 100e9
MEM_BW = 50e9
ALPHA = 150e-6
LINK_BW = 2e9


def true_gemm_eff(flops: float) -> float:
    """A saturating efficiency law: 0.9 * f / (f + 1e7)."""
    return 0.9 * flops / (flops + 1e7)


def synthetic_micro(world: int) -> dict[str, object]:
    """Microbenchmarks generated from known laws (what a perfect machine would measure)."""
    gemm = []
    for m, n, k in [(64, 64, 64), (256, 256, 256), (1024, 512, 512), (2048, 1024, 1024), (4096, 2048, 2048)]:
        f = 2.0 * m * n * k
        for layout in ("fwd", "bwd_input", "bwd_weight"):
            gemm.append({"m": m, "n": n, "k": k, "layout": layout, "flops": f, "time_s": f / (PEAK * true_gemm_eff(f))})
    # the best GEMM defines the peak: put one exactly at it
    gemm.append({"m": 1, "n": 1, "k": 1, "layout": "fwd", "flops": 1e12, "time_s": 1e12 / PEAK})
    attention = [{"batch": b, "heads": 4, "seq": 128, "head_dim": 32, "flops_fwd_full": 4.0 * b * 4 * 128 * 128 * 32,
                  "fwd_s": 0.5 * 4.0 * b * 4 * 128 * 128 * 32 / (PEAK * 0.3),
                  "bwd_s": 2 * 0.5 * 4.0 * b * 4 * 128 * 128 * 32 / (PEAK * 0.3)} for b in (1, 4, 16)]
    memory = [{"kind": kind, "elements": 1 << 20, "bytes": 8.0 * 2**20, "time_s": 8.0 * 2**20 / bw, "bandwidth": bw}
              for kind, bw in (("copy", MEM_BW), ("add", 0.5 * MEM_BW), ("gelu", 0.2 * MEM_BW), ("layernorm", 0.2 * MEM_BW))]
    params = 1 << 20
    compute = {"world_size": world, "threads_per_rank": 1, "device": "cpu", "gemm": gemm, "attention": attention,
               "memory": memory, "overhead": {"tiny_op_s": 2e-6, "per_linear_fwd_bwd_s": 30e-6, "backward_call_s": 80e-6},
               "optimizer": {"params": float(params), "time_s": ADAM_BYTES_PER_PARAM * params / (MEM_BW * 0.25)}}
    entries = [{"kind": kind, "size": float(s), "world_size": world,
                "time_s": ALPHA + bus_factor(kind, world) * s / LINK_BW}
               for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
               for s in (4096, 65536, 1 << 20, 1 << 22)]
    framework = [{"variant": v, "calls": 10.0, "time_s": 0.0, "plain_s": 0.0, "per_call_s": x}
                 for v, x in (("tp", 1e-3), ("tp-sp", 2e-3), ("fsdp", 3e-3))]
    return {"compute": compute, "collectives": {"world_size": world, "backend": "gloo", "entries": entries,
                                                "framework": framework}}


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for world in (1, 2):
        micro = synthetic_micro(world)
        if world == 1:
            micro.pop("collectives")
        (tmp_path / f"micro_w{world}.json").write_text(json.dumps(micro))
    (tmp_path / "meta.json").write_text(json.dumps({"host": {"cores": 2, "memory_bytes": 8 * 2**30}}))
    return tmp_path


def test_bus_factors_are_the_nccl_tests_ones() -> None:
    # nccl-tests PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n; all-gather/reduce-scatter (n-1)/n
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("send_recv", 2) == 1.0
    with pytest.raises(CalibrationError, match="unknown"):
        bus_factor("gossip", 2)


def test_alpha_beta_recovers_latency_and_bandwidth_exactly() -> None:
    micro = synthetic_micro(2)
    for kind in ("all_reduce", "all_gather", "send_recv"):
        ab = alpha_beta(kind, micro["collectives"]["entries"])  # type: ignore[index]
        assert ab.alpha == pytest.approx(ALPHA, rel=1e-6)
        assert ab.bus_bandwidth == pytest.approx(LINK_BW, rel=1e-6)
        assert ab.median_abs_error < 1e-9


def test_alpha_beta_is_robust_to_one_scheduling_outlier() -> None:
    entries = [{"kind": "all_reduce", "size": float(s), "world_size": 2, "time_s": ALPHA + s / LINK_BW}
               for s in (1024, 4096, 16384, 65536, 1 << 18, 1 << 20, 1 << 22)]
    entries[2]["time_s"] *= 20  # one sample hit a 3 ms time slice of another process
    ab = alpha_beta("all_reduce", entries)
    assert ab.bus_bandwidth == pytest.approx(LINK_BW, rel=0.05)
    assert ab.alpha == pytest.approx(ALPHA, rel=0.2)


def test_binned_curve_follows_the_law_and_stays_in_unit_interval() -> None:
    flops = np.geomspace(1e5, 1e11, 40)
    points = [(float(f), true_gemm_eff(float(f))) for f in flops]
    curve = binned_curve(points)
    assert all(0 < e <= 1 for _, e in curve)
    assert [x for x, _ in curve] == sorted(x for x, _ in curve)
    assert curve_error(curve, points) < 0.05
    effs = [e for _, e in curve]
    assert effs == sorted(effs)  # the law is increasing, so is each bin's median


def test_binned_curve_needs_points() -> None:
    with pytest.raises(CalibrationError, match="no microbenchmark points"):
        binned_curve([])


def test_fit_profile_recovers_every_synthetic_law(folder: Path) -> None:
    report = fit_profile(folder, world_size=2)
    p = report.profile
    assert p.machine["peak_flops"] == pytest.approx(PEAK)
    assert p.machine["memory_bandwidth"] == pytest.approx(MEM_BW)
    assert p.machine["link_bandwidth"] == pytest.approx(LINK_BW, rel=1e-6)
    assert p.machine["memory_capacity"] == pytest.approx(4 * 2**30)  # 8 GiB host over 2 ranks
    assert p.gemm_eff(2.0 * 2048 * 1024 * 1024) == pytest.approx(true_gemm_eff(2.0 * 2048 * 1024 * 1024), rel=0.02)
    assert p.attention_eff(1e8) == pytest.approx(0.3, rel=1e-6)  # constant law, any FLOP
    assert p.memory_efficiency == pytest.approx(0.2)  # median of add, gelu, layernorm = 0.2
    assert p.optimizer_efficiency == pytest.approx(0.25)
    assert p.kernel_overhead == pytest.approx(10e-6)  # 30 us per linear over its 3 GEMM calls
    assert p.step_overhead == pytest.approx(80e-6)
    assert p.collective_overhead == pytest.approx(2e-3)  # median of the framework per-call costs
    assert p.p2p_overhead == pytest.approx(ALPHA, rel=1e-6)
    assert report.quality["gemm_efficiency"] < 0.05


def test_one_rank_fit_has_no_links_and_defaults_to_largest_world(folder: Path) -> None:
    reports = fit_profiles(folder)
    assert sorted(reports) == [1, 2]
    assert "link_bandwidth" not in reports[1].profile.machine
    assert fit_profile(folder).profile.machine["ranks"] == 2.0


def test_fit_errors_name_the_folder_and_the_fix(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(CalibrationError, match="calibrate measure"):
        fit_profile(tmp_path / "empty")
    with pytest.raises(CalibrationError, match=r"--world-size 4 .*measured: \[1, 2\]"):
        fit_profile(folder, world_size=4)


def test_profile_with_machine_round_trips_through_yaml(folder: Path, tmp_path: Path) -> None:
    p = fit_profile(folder).profile
    assert load_profile(save_profile(p, tmp_path / "p.yaml")) == p


# --- the check's translation (needs the simulator core) -------------------------------------

try:
    from clustersim.simulator.calibration.torch_backend import check
except ImportError:  # the simulator core is not there yet: only these tests skip
    check = None  # type: ignore[assignment]
needs_api = pytest.mark.skipif(check is None, reason="clustersim.simulator.step.simulate cannot be imported")

CFG = GPTConfig(num_layers=2, hidden_size=64, num_heads=4, seq_len=32, vocab_size=128)


def torch_gpt_params(cfg: GPTConfig) -> int:
    """Parameters of simulator/calibration/torch_backend/gpt.py, counted by hand: embedding V*h, per layer
    q,k,v,o 4h^2 + MLP 2*h*4h + two LayerNorms 2*2h, final LayerNorm 2h, head V*h."""
    h, v, f = cfg.hidden_size, cfg.vocab_size, cfg.ffn_hidden_size
    return v * h + cfg.num_layers * (4 * h * h + 2 * h * f + 4 * h) + 2 * h + v * h


@needs_api
def test_model_spec_counts_the_torch_gpts_parameters() -> None:
    assert check.model_spec(CFG).num_params() == torch_gpt_params(CFG)


@needs_api
def test_parallel_plan_mapping() -> None:
    fsdp = check.parallel_plan(BackendPlan(name="f", dp=2, data_parallel="fsdp", global_batch=8))
    assert (fsdp.dp, fsdp.fsdp, fsdp.micro_batch) == (2, "full", 4)
    pp = check.parallel_plan(BackendPlan(name="p", pp=2, data_parallel="none", schedule="gpipe", micro_batches=4,
                                         global_batch=8), overlap=False)
    assert (pp.pp, pp.schedule, pp.micro_batch, pp.overlap_grad_reduce) == (2, "gpipe", 2, False)


@needs_api
def test_ranks_beyond_the_cores_share_them(folder: Path) -> None:
    p = fit_profile(folder).profile  # fitted on 2 ranks of a 2-core host
    two, four = check.machine_cluster(p, 2), check.machine_cluster(p, 4)
    assert two.accelerator.peak("fp32") == pytest.approx(PEAK)
    assert four.accelerator.peak("fp32") == pytest.approx(PEAK / 2)
    assert two.num_gpus == 2 and four.num_gpus == 4


def record(plan: BackendPlan, seconds: float) -> StepRecord:
    return StepRecord(plan=plan, model=CFG, world_size=plan.world_size, backend="gloo", device="cpu",
                      step_times=(seconds,) * 3, run_delays=(0.0,) * 3)


@needs_api
def test_prediction_falls_with_a_faster_machine(folder: Path) -> None:
    p = fit_profile(folder).profile
    faster = p.replace(machine={**p.machine, "peak_flops": 4 * PEAK, "link_bandwidth": 4 * LINK_BW})
    for plan in (BackendPlan(name="ddp", dp=2, global_batch=8), BackendPlan(name="tp", tp=2, data_parallel="none")):
        assert check.predict(record(plan, 1.0), faster) < check.predict(record(plan, 1.0), p)


@needs_api
def test_check_rows_carry_the_signed_error(folder: Path) -> None:
    p = fit_profile(folder).profile
    plan = BackendPlan(name="ddp", dp=2, global_batch=8)
    pred = check.predict(record(plan, 1.0), p)
    rows = check.check([record(plan, 2 * pred)], {2: p}, "median")
    assert rows[0].error == pytest.approx(-0.5)
    assert check.summary(rows)["median_abs_error"] == pytest.approx(0.5)


def test_uncontended_removes_the_run_delay() -> None:
    r = StepRecord(plan=BackendPlan(name="s", data_parallel="none"), model=CFG, world_size=1, backend="gloo",
                   device="cpu", step_times=(1.0, 1.2, 1.4), run_delays=(0.5, 0.5, 0.5))
    assert (r.median, r.best, r.uncontended) == pytest.approx((1.2, 1.0, 0.7))
    assert r.contention == pytest.approx(0.5 / 1.2)


# --- fitting a user's own runs -------------------------------------------------------------

@needs_api
def test_import_runs_never_worsens_its_own_rows_and_reports_the_holdout(tmp_path: Path) -> None:
    from clustersim.simulator.calibration import fit_runs
    from clustersim.simulator.profile import CalibrationProfile
    from clustersim.simulator.calibration.validate import load_runs

    runs = load_runs()
    dense = runs[runs.source_id == "mosaicml-llmfoundry"].head(12)
    path = tmp_path / "runs.csv"
    dense.to_csv(path, index=False)
    res = fit_runs.fit_runs(path, CalibrationProfile(), holdout=0.3, rng=np.random.default_rng(0))
    assert res.train_rows > 0 and res.holdout_rows > 0
    assert res.train_rows + res.holdout_rows <= 12
    assert res.after["train"] <= res.before["train"] + 1e-12  # 1.0 is on both grids
    assert all(0 < e <= 1 for _, e in res.profile.gemm_efficiency)


def test_fit_keeps_each_kinds_law_and_each_frameworks_call_cost(folder: Path) -> None:
    p = fit_profile(folder, world_size=2).profile
    assert set(p.collective_laws) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    for alpha, bw in p.collective_laws.values():
        assert alpha == pytest.approx(ALPHA, rel=1e-6) and bw == pytest.approx(LINK_BW, rel=1e-6)
    assert p.framework_overhead == {"tp": 1e-3, "tp-sp": 2e-3, "fsdp": 3e-3}
    # the laws were fitted on the whole sweep: no NCCL-style pipeline fill is added on top
    assert p.pipeline_fill_bytes == 0.0
    assert fit_profile(folder, world_size=1).profile.collective_laws == {}
