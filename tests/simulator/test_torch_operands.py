"""Cold-operand compute microbenchmarks (issue 21, ``--micro-operands hot|cold|both``).

The working set the cold microbenchmarks cycle through is a closed form of the model and plan
(``measure.working_set_bytes``): its weight part is checked against the real GPT module's
parameters (whole, one TP shard, one pipeline stage) and its activation part against the tensors
counted by hand. The option travels into the tasks and back out of a folder (``with_operands``);
folders measured before it (hot only) still fit as before, and asking them for cold operands is
one clear error. The pool's operand sets are disjoint views that cover the buffer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clustersim.simulator.calibration.fit import fit_profile
from clustersim.simulator.calibration.torch_backend import micro_passes
from clustersim.simulator.calibration.torch_backend.measure import (MICRO_OPERANDS, SMALL_GPT, TINY_GPT,
                                                                     layer_activations, micro_working_set,
                                                                     standard_plans, tasks_for, working_set_bytes)
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, TimingRecipe
from clustersim.simulator.errors import CalibrationError

RECORDED = Path(__file__).parent / "torch_recorded" / "small"
"""A folder measured before the option existed (hot operands only)."""
TIMING = TimingRecipe(repeats=4, repeats_max=8, step_passes=4, threads_per_rank=1)


def _weights(plan: BackendPlan) -> int:
    """The weight part of ``working_set_bytes``: total bytes less the activations, over 2 (weights
    and gradients) and 4 (fp32)."""
    cfg = TINY_GPT
    layers = -(-cfg.num_layers // plan.pp)
    in_flight = 1 if plan.pp == 1 else plan.micro_batches if plan.schedule == "gpipe" else min(plan.pp, plan.micro_batches)
    acts = in_flight * (layers * layer_activations(cfg, plan) + plan.micro_batch * cfg.seq_len * cfg.vocab_size // plan.tp)
    return (working_set_bytes(cfg, plan) // 4 - acts) // 2


def test_the_weights_part_is_the_real_modules_parameters_without_the_norms() -> None:
    torch = pytest.importorskip("torch")
    from clustersim.simulator.calibration.torch_backend.gpt import GPT

    def linear_params(model: object) -> int:
        return sum(p.numel() for name, p in model.named_parameters()  # type: ignore[attr-defined]
                   if "norm" not in name)

    cfg = TINY_GPT
    with torch.device("cpu"):
        whole = linear_params(GPT(cfg))
        first = linear_params(GPT(cfg, layers=range(0, 1), first=True, last=False))
        last = linear_params(GPT(cfg, layers=range(1, 2), first=False, last=True))
    single = BackendPlan(name="single", data_parallel="none")
    assert _weights(single) == whole
    # TP shards every linear and the embedding and output over its ranks
    assert _weights(BackendPlan(name="tp2", tp=2, data_parallel="none")) * 2 == whole
    # one stage of two: one block and one end of the model (both ends the same size here)
    pp = BackendPlan(name="pp2", pp=2, data_parallel="none", micro_batches=4)
    assert _weights(pp) == first == last
    # FSDP computes on gathered weights: the same as DDP's whole copy
    assert _weights(BackendPlan(name="fsdp", dp=2, data_parallel="fsdp")) == whole


def test_the_activation_part_counts_the_blocks_tensors_and_the_micro_batches_in_flight() -> None:
    cfg = TINY_GPT  # h 128, ffn 512, seq 64
    single = BackendPlan(name="single", data_parallel="none")  # 8 sequences: 512 tokens
    # per token: 2 norm outputs + attention projection + MLP output (h each), q, k, v and the
    # attention output (h each), the MLP's inner activation before and after GELU (ffn each)
    per_token = 4 * 128 + 4 * 128 + 2 * 512
    assert layer_activations(cfg, single) == 512 * per_token
    tp = BackendPlan(name="tp2", tp=2, data_parallel="none")
    assert layer_activations(cfg, tp) == 512 * (4 * 128 + (4 * 128 + 2 * 512) // 2)
    # GPipe keeps every micro-batch's activations, 1F1B at most pp of them
    gpipe = BackendPlan(name="g", pp=2, data_parallel="none", micro_batches=4)
    onef = BackendPlan(name="o", pp=2, schedule="1f1b", data_parallel="none", micro_batches=4)
    acts_g = working_set_bytes(cfg, gpipe) // 4 - 2 * _weights(gpipe)
    acts_o = working_set_bytes(cfg, onef) // 4 - 2 * _weights(onef)
    assert acts_g == 2 * acts_o  # 4 in flight vs 2
    assert acts_o == 2 * (layer_activations(cfg, onef) + 2 * 64 * cfg.vocab_size)  # 2-sequence micro-batches


def test_a_launch_cycles_through_its_largest_plans_working_set() -> None:
    plans = standard_plans(2)
    sizes = [working_set_bytes(SMALL_GPT, p) for p in plans]
    assert micro_working_set(SMALL_GPT, plans) == max(sizes) and len(set(sizes)) > 1
    assert micro_working_set(SMALL_GPT, []) == 0


def test_the_option_travels_in_the_compute_task_and_is_checked() -> None:
    assert MICRO_OPERANDS[0] == "both"
    for world in (1, 2):
        plans = standard_plans(world)
        for ops in MICRO_OPERANDS:
            for placement in ("interleaved", "first"):
                tasks = tasks_for(TINY_GPT, plans, TIMING, world, sweep=False, micro_placement=placement,
                                  micro_operands=ops)
                compute = tasks[0]["micro"]["compute"] if placement == "interleaved" else tasks[0]  # type: ignore[index]
                assert compute["micro_operands"] == ops  # type: ignore[index]
                assert compute["working_set_bytes"] == micro_working_set(TINY_GPT, plans)  # type: ignore[index]
    with pytest.raises(CalibrationError, match="operands = 'warm' are unknown.*both, hot, cold.*--micro-operands"):
        tasks_for(TINY_GPT, standard_plans(2), TIMING, 2, micro_operands="warm")


def _section(cold: bool) -> dict[str, object]:
    def gemm(t: float) -> list[dict[str, float]]:
        return [{"m": 64.0, "n": 64.0, "k": 64.0, "flops": 5e5, "time_s": t}]
    passes = [{"gemm": gemm(1.0 + i), **({"gemm_cold": gemm(10.0 + i)} if cold else {})} for i in range(3)]
    return {"gemm": gemm(2.0), **({"gemm_cold": gemm(11.0)} if cold else {}), "passes": passes, "probe": {"x": 1}}


def test_with_operands_swaps_the_cold_entries_in_everywhere_and_keeps_hot_as_recorded() -> None:
    both = _section(cold=True)
    assert micro_passes.recorded_operands(both) == ["hot", "cold"]
    assert micro_passes.with_operands(both, "hot") == both
    cold = micro_passes.with_operands(both, "cold")
    assert cold["gemm"][0]["time_s"] == 11.0 and "gemm_cold" not in cold and cold["probe"] == {"x": 1}
    assert [p["gemm"][0]["time_s"] for p in cold["passes"]] == [10.0, 11.0, 12.0]
    assert all("gemm_cold" not in p for p in cold["passes"])
    # each pass of the cold section is what micro_passes.of hands the per-pass fits
    assert [p["gemm"][0]["time_s"] for p in micro_passes.of(cold)] == [10.0, 11.0, 12.0]
    with pytest.raises(CalibrationError, match="'cold' were not recorded.*recorded: hot.*--micro-operands"):
        micro_passes.with_operands(_section(cold=False), "cold")
    # unless told: the default where recorded, else what was recorded
    assert micro_passes.chosen_operands(_section(cold=False), None) == "hot"
    assert micro_passes.chosen_operands(both, None) == micro_passes.OPERANDS_DEFAULT
    cold_only = {k: v for k, v in both.items() if k != "gemm"}
    assert micro_passes.chosen_operands(cold_only, None) == "cold"
    assert micro_passes.with_operands(cold_only, None)["gemm"][0]["time_s"] == 11.0


def test_an_old_folder_fits_as_before_and_refuses_cold_operands_clearly() -> None:
    before = fit_profile(RECORDED)
    assert before.operands == "hot" and fit_profile(RECORDED, operands="hot").profile == before.profile
    with pytest.raises(CalibrationError, match="'cold' were not recorded"):
        fit_profile(RECORDED, operands="cold")


def test_cold_entries_fit_the_profile_in_place_of_the_hot_ones(tmp_path: Path) -> None:
    # a copy of the old folder whose cold entries are its hot ones 1.25x slower: the cold fit's
    # peak is the hot one over 1.25, the efficiencies the same
    folder = tmp_path / "small"
    shutil.copytree(RECORDED, folder)
    for path in folder.glob("micro_w*.json"):
        micro = json.loads(path.read_text())

        def slower(d: dict[str, object]) -> dict[str, object]:
            out = dict(d)
            for key in micro_passes.SECTIONS:
                out[f"{key}_cold"] = [{k: (v * 1.25 if k in ("time_s", "fwd_s", "bwd_s") else
                                           v / 1.25 if k == "bandwidth" else v) for k, v in e.items()}
                                      for e in d[key]]  # type: ignore[attr-defined]
            return out
        compute = slower(micro["compute"])
        compute["passes"] = [slower(p) for p in micro["compute"].get("passes", [])]
        path.write_text(json.dumps({**micro, "compute": compute}))
    hot, cold = fit_profile(folder, operands="hot"), fit_profile(folder, operands="cold")
    assert cold.operands == "cold" and fit_profile(folder).operands == micro_passes.OPERANDS_DEFAULT
    assert cold.profile.machine["peak_flops"] == pytest.approx(hot.profile.machine["peak_flops"] / 1.25)
    assert cold.profile.machine["memory_bandwidth"] == pytest.approx(hot.profile.machine["memory_bandwidth"] / 1.25)
    assert [e for _, e in cold.profile.gemm_efficiency] == pytest.approx([e for _, e in hot.profile.gemm_efficiency])


def test_the_cli_check_refuses_cold_operands_of_an_old_folder_with_exit_2() -> None:
    res = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "check", str(RECORDED),
                          "--micro-operands", "cold"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "'cold' were not recorded" in res.stderr and "--micro-operands" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_the_pools_operand_sets_are_disjoint_views_covering_the_buffer() -> None:
    torch = pytest.importorskip("torch")
    from clustersim.simulator.calibration.torch_backend.microbench import OperandPool

    pool = OperandPool(4 * 1000)  # 1000 floats
    sets = pool.sets([(3, 4), (2, 5)])  # 22 floats a set: 45 sets
    assert len(sets) == 1000 // 22
    starts = [t.data_ptr() for s in sets for t in s]
    assert len(set(starts)) == len(starts)
    assert all(t.untyped_storage().data_ptr() == pool.buffer.untyped_storage().data_ptr() for s in sets for t in s)
    assert sets[-1][1].data_ptr() + 10 * 4 == pool.buffer.data_ptr() + 45 * 22 * 4  # end to end, in order
    one = pool.sets([(40, 40)])  # larger than the buffer: one fresh set
    assert len(one) == 1 and one[0][0].shape == (40, 40) and torch.isfinite(one[0][0]).all()
