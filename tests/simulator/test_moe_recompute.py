"""Per-module recompute (Megatron-Core ``recompute_modules``), FP8 routed-expert caches, dispatch
buffers and CPU activation offloading (issue 13 item 5).

Memory: one DeepSeek-V3 MoE layer's stored tensors written out by hand from config.json (MLA
q_lora 1536, kv_lora 512, 128 heads of qk 128 + 64 rope and v 128; 256 routed experts of 2048 (SwiGLU),
top-8, one shared expert of 2048), with and without each module, and a DeepSeek-V3 stage's
activations against it. Time: recompute adds exactly the forward of the ops each module repeats.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.profile import default_profile
from clustersim.simulator.calibration.recipe_plans import RECIPE_RECOMPUTE
from clustersim.simulator.calibration.validate_plan import plan_for_row, recipe_recompute
from clustersim.simulator.errors import PlanError
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan, plan_from_mapping
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.simulator.step.partition import RESERVED_BYTES, kept_layer_bytes, partition_plan, stage_chunks
from clustersim.simulator.step.recompute import recomputed_ops
from clustersim.topologies import get_cluster
from clustersim.workloads import RECOMPUTE_MODULES, TrainingSpec, get_model, layer_activation_bytes, layer_ops

DSV3 = get_model("deepseek-v3")
N, H, HEADS, K = 4096, 7168, 128, 8  # tokens of one micro-batch (mb 1, s 4096), hidden, heads, top-k
PAIRS = N * K  # token-expert pairs on one device (tp 1)


def _hand_terms() -> dict[str, tuple[float, frozenset[str]]]:
    """Bytes (bf16) of each tensor one DeepSeek-V3 MoE layer keeps, and the modules that free it. No
    dropout masks (config.json attention_dropout 0.0, no hidden dropout); the routed experts keep the
    fp32 probabilities their weighted activation applies, not their output (the unpermute takes no
    probabilities, Megatron-Core >= 0.13)."""
    f, latent = 2048, 1536 + 512
    none: frozenset[str] = frozenset()
    ln, up, moe = frozenset({"layernorm"}), frozenset({"mla_up_proj"}), frozenset({"moe"})
    return {
        "attn_norm_input": (2 * N * H, none), "qkv_input": (2 * N * H, ln),
        "mla_latents": (2 * 2 * N * latent, none),
        "query": (2 * N * HEADS * 192, up), "key": (2 * N * HEADS * 192, up), "value": (2 * N * HEADS * 128, up),
        "softmax_lse": (4 * HEADS * N, frozenset({"core_attn"})), "out_proj_input": (2 * N * HEADS * 128, none),
        "mlp_norm_input": (2 * N * H, none), "mlp_input": (2 * N * H, ln),
        "router_probs": (4 * N * 256, moe), "expert_fc1_input": (2 * PAIRS * H, moe),
        "expert_act_input": (2 * PAIRS * 2 * f, moe), "expert_fc2_input": (2 * PAIRS * f, moe | {"moe_act"}),
        "expert_probs": (4 * PAIRS, moe), "shared_act_input": (2 * N * 2 * f, moe | {"shared_experts"}),
        "shared_fc2_input": (2 * N * f, moe | {"shared_experts"}),
    }


def _hand_bytes(modules: tuple[str, ...]) -> float:
    return sum(b for b, freed_by in _hand_terms().values() if freed_by.isdisjoint(modules))


def _layer(modules: tuple[str, ...], **kw: object) -> float:
    recompute = "selective" if modules else "none"
    return layer_activation_bytes(DSV3, 5, micro_batch=1, seq_len=N, ep=64, recompute=recompute,  # type: ignore[arg-type]
                                  recompute_modules=modules, **kw)


@pytest.mark.parametrize("modules", [(), *[(m,) for m in RECOMPUTE_MODULES if m != "mlp"],
                                     ("mla_up_proj", "layernorm", "moe_act"), ("mla_up_proj", "mlp")])
def test_moe_layer_activations_match_the_hand_computation(modules: tuple[str, ...]) -> None:
    # "mlp" recomputes the dense MLP only: an MoE layer keeps everything (last case)
    assert _layer(modules) == pytest.approx(_hand_bytes(modules))


def test_each_module_frees_what_it_recomputes() -> None:
    full = _hand_bytes(())
    assert full - _layer(("mla_up_proj",)) == pytest.approx(2 * N * HEADS * (192 + 192 + 128))
    assert full - _layer(("moe_act",)) == pytest.approx(2 * PAIRS * 2048)
    assert full - _layer(("layernorm",)) == pytest.approx(2 * 2 * N * H)
    assert _layer(("moe",)) < _layer(("moe_act", "shared_experts"))  # the whole block holds more
    # selective recompute without modules is Megatron-Core's default, core_attn
    default = layer_activation_bytes(DSV3, 5, micro_batch=1, seq_len=N, ep=64, recompute="selective")
    assert default == pytest.approx(_layer(("core_attn",)))


def test_dense_mlp_recompute_frees_only_dense_layers() -> None:
    dense = layer_activation_bytes(DSV3, 0, micro_batch=1, seq_len=N, ep=64)  # layer 0 is dense
    freed = dense - layer_activation_bytes(DSV3, 0, micro_batch=1, seq_len=N, ep=64, recompute="selective",
                                           recompute_modules=("mlp",))
    # fused norm output (fc1 input), fc1 outputs (2 x 18432) and fc2 input of the 18432-wide MLP
    assert freed == pytest.approx(2 * N * H + 2 * N * 2 * 18432 + 2 * N * 18432)


def test_fp8_keeps_the_routed_experts_linear_inputs_at_one_byte() -> None:
    # TE (Grouped)Linear saves the quantised input: QKV/down-proj input, MoE input, shared fc2 input,
    # and now the routed experts' fc1 input (permuted tokens) and fc2 input (activation output)
    narrow = N * H + N * H + N * 2048 + PAIRS * H + PAIRS * 2048
    assert _hand_bytes(()) - _layer((), gemm_input_bytes=1) == pytest.approx(narrow)


PLAN = ParallelPlan(tp=1, pp=16, dp=128, ep=64, micro_batch=1, schedule="dualpipe", zero=1)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("modules", [("mla_up_proj",), ("moe_act",), ("mla_up_proj", "layernorm", "moe_act")])
def test_a_deepseek_v3_stage_holds_the_hand_computed_layers(modules: tuple[str, ...], precision: str) -> None:
    training = TrainingSpec(seq_len=N, global_batch_size=15360, precision=precision)  # type: ignore[arg-type]
    stage = 6  # two chunks of 4 MoE layers (test_moe_memory)
    base = partition_plan(DSV3, training, PLAN).stages[stage].memory
    rec = partition_plan(DSV3, training, replace(PLAN, recompute="selective", recompute_modules=modules)).stages[stage].memory
    one_byte = 1 if precision == "fp8" else None
    ratio = _layer(modules, gemm_input_bytes=one_byte) / _layer((), gemm_input_bytes=one_byte)
    assert rec.activations == pytest.approx(base.activations * ratio)  # every layer of the stage alike
    assert (rec.weights, rec.grads, rec.optimizer, rec.buffers) == (base.weights, base.grads, base.optimizer, base.buffers)
    # dispatch buffers: one MoE layer's permuted send copy (and in FP8 the bf16 received copy)
    copies = 2 if precision == "fp8" else 1
    assert base.buffers == pytest.approx(RESERVED_BYTES + copies * 2 * PAIRS * H)


def _costing(model_name: str, plan: ParallelPlan, training: TrainingSpec) -> Costing:
    cluster = get_cluster("dgx-h100", plan.world_size)
    prof = default_profile(cluster.accelerator.name)
    return Costing(get_model(model_name), training, plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def _recompute_time(modules: tuple[str, ...]) -> tuple[float, float, float]:
    """(recompute s, EP backward s, EP forward s) of one chunk of a 2-layer DeepSeek-V3 cut on 8 GPUs."""
    model = replace(DSV3, num_layers=4, first_dense_layers=1)
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=8, micro_batch=1, recompute="selective" if modules else "none",
                        recompute_modules=modules, ep_comm_overlap=0.0)
    c = _costing("deepseek-v3", plan, TrainingSpec(seq_len=N, global_batch_size=16))
    c = replace(c, model=model)
    ch = lower(c).stages[0].chunks[0]
    return ch.recompute, ch.ep_bwd, ch.ep_fwd


def test_recompute_costs_the_forward_of_the_recomputed_ops() -> None:
    model = replace(DSV3, num_layers=4, first_dense_layers=1)
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=8, micro_batch=1)
    c = replace(_costing("deepseek-v3", plan, TrainingSpec(seq_len=N, global_batch_size=16)), model=model)
    kw = dict(micro_batch=1, seq_len=N, tp=1, cp=1, ep=8, etp=1, dtype_bytes=2, sp=False,
              sort_by_local_expert=plan.moe_dispatcher == "alltoall")
    layers = [(list(layer_ops(model, i, **kw)), model.is_moe_layer(i)) for i in range(4)]  # type: ignore[arg-type]
    for modules in [("mla_up_proj",), ("moe_act",), ("layernorm",), ("mlp",), ("moe",), ("core_attn", "mla_up_proj")]:
        expected = sum(c.time(recomputed_ops(ops, moe, True, modules), "fwd") for ops, moe in layers)
        assert _recompute_time(modules)[0] == pytest.approx(expected, rel=1e-9)
        assert expected > 0
    # disjoint modules add up; 'moe' already holds 'moe_act'
    up, act = _recompute_time(("mla_up_proj",))[0], _recompute_time(("moe_act",))[0]
    assert _recompute_time(("mla_up_proj", "moe_act"))[0] == pytest.approx(up + act)
    assert _recompute_time(("moe", "moe_act"))[0] == pytest.approx(_recompute_time(("moe",))[0])
    assert _recompute_time(())[0] == 0.0


def test_moe_recompute_repeats_the_dispatch_and_combine() -> None:
    _, bwd_none, fwd = _recompute_time(())
    _, bwd_moe, _ = _recompute_time(("moe",))
    assert bwd_none == pytest.approx(fwd) and fwd > 0
    assert bwd_moe == pytest.approx(2 * fwd)  # the recomputed forward's all-to-alls run again
    assert _recompute_time(("moe_act",))[1] == pytest.approx(fwd)


def test_offloaded_layers_leave_one_in_flight() -> None:
    per_layer = [3.0, 5.0, 7.0, 11.0]
    assert kept_layer_bytes(per_layer, 0) == 26.0
    assert kept_layer_bytes(per_layer, 2) == 7.0 + 11.0 + 5.0  # kept layers + the larger copy in flight
    model = get_model("llama3-8b")
    training = TrainingSpec(seq_len=4096, global_batch_size=8)
    base = ParallelPlan(tp=1, pp=1, dp=8, micro_batch=1)
    full = partition_plan(model, training, base).stages[0].memory.activations
    off = partition_plan(model, training, replace(base, cpu_offloading_num_layers=20)).stages[0].memory.activations
    one = layer_activation_bytes(model, 0, micro_batch=1, seq_len=4096)
    assert full - off == pytest.approx(19 * one)  # 20 layers leave, one copy stays in flight


@pytest.mark.parametrize(("fields", "words"), [
    ({"recompute": "selective", "recompute_modules": ("attn",)}, ["plan.recompute_modules", "unknown ['attn']", "core_attn"]),
    ({"recompute": "selective", "recompute_modules": ("moe", "moe")}, ["plan.recompute_modules", "twice"]),
    ({"recompute_modules": ("moe_act",)}, ["plan.recompute_modules", "recompute = selective", "'none'"]),
    ({"recompute": "full", "recompute_modules": ("moe_act",)}, ["plan.recompute_modules", "'full'"]),
    ({"recompute_modules": "moe"}, ["plan.recompute_modules", "'moe'", "list"]),
    ({"cpu_offloading_num_layers": 61}, ["plan.cpu_offloading_num_layers = 61", "0..60"]),
    ({"cpu_offloading_num_layers": 4, "pp": 2, "dp": 4}, ["plan.cpu_offloading_num_layers = 4", "pp = 1", "pp = 2"]),
    ({"cpu_offloading_num_layers": 4, "recompute": "selective"}, ["plan.cpu_offloading_num_layers", "recompute = none"]),
    ({"cpu_offloading_num_layers": 2.5}, ["plan.cpu_offloading_num_layers = 2.5", "integer"]),
])
def test_bad_settings_name_the_field_the_value_and_the_fix(fields: dict[str, object], words: list[str]) -> None:
    plan = replace(ParallelPlan(tp=1, pp=1, dp=8, ep=8), **fields)  # type: ignore[arg-type]
    with pytest.raises(PlanError) as err:
        check_plan(DSV3, TrainingSpec(seq_len=4096, global_batch_size=64), get_cluster("dgx-h100", plan.world_size), plan)
    for w in words:
        assert w in str(err.value)


def test_modules_a_model_lacks_are_refused() -> None:
    dense = get_model("llama3-8b")
    training, cluster = TrainingSpec(seq_len=4096, global_batch_size=8), get_cluster("dgx-h100", 8)
    for module in ("moe_act", "mla_up_proj"):
        plan = ParallelPlan(dp=8, recompute="selective", recompute_modules=(module,))
        with pytest.raises(PlanError, match=f"plan.recompute_modules.*{module}"):
            check_plan(dense, training, cluster, plan)
    check_plan(dense, training, cluster, ParallelPlan(dp=8, recompute="selective", recompute_modules=("mlp", "core_attn")))


def test_a_scenario_mapping_takes_a_list_of_modules() -> None:
    plan = plan_from_mapping({"dp": 8, "recompute": "selective", "recompute_modules": ["mla_up_proj", "mlp"]})
    assert plan.recompute_modules == ("mla_up_proj", "mlp")
    assert "rc:mla_up_proj+mlp" in plan.describe()


def _row(**cells: object) -> dict[str, object]:
    base: dict[str, object] = {"framework": "Megatron-Bridge / Megatron-Core (NeMo 26.04)", "model": "DeepSeekV3",
                               "gpu_type": "B200", "precision": "MXFP8", "num_gpus": 256, "tp": 1, "pp": 16, "ep": 8,
                               "micro_batch": 1, "recompute": "", "seq_len": 4096, "global_batch_seqs": 4096}
    return {**base, **cells}


def test_the_recipe_table_is_keyed_by_what_the_row_prints() -> None:
    entry = recipe_recompute(_row(), DSV3, (1, 16, 1, 8, 1), (False, True))
    assert entry is not None and entry.modules == ("mla_up_proj",) and "deepseek_workload_base_configs.py" in entry.locator
    # another framework, model, precision or layout: no recipe
    assert recipe_recompute(_row(framework="Megatron-LM"), DSV3, (1, 16, 1, 8, 1), (False, True)) is None
    assert recipe_recompute(_row(), DSV3, (1, 16, 1, 8, 2), (False, True)) is None  # micro-batch 2 is not the recipe's
    assert recipe_recompute(_row(), DSV3, (1, 16, 1, 8, 2), (False, False)) is not None  # not printed: not compared
    # same layout, a later copy of the recipe with another micro-batch: the printed one picks
    gb300 = _row(gpu_type="GB300", pp=2, vpp=8, ep=32)
    old = recipe_recompute(gb300, DSV3, (1, 2, 8, 32, 2), (True, True))
    new = recipe_recompute(gb300, DSV3, (1, 2, 8, 32, 1), (True, True))
    assert old is not None and old.modules == ("mla_up_proj",) and new is not None and new.modules == ()
    for e in RECIPE_RECOMPUTE:  # every entry names a valid module set and where it comes from
        assert set(e.modules) <= set(RECOMPUTE_MODULES)
        assert "scripts/performance/configs/" in e.locator or e.locator.startswith("github NVIDIA/dgxc-benchmarking ")


def test_a_row_gets_its_recipe_unless_it_prints_its_recompute() -> None:
    cluster = get_cluster("dgx-b200", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=4096, precision="fp8")
    notes: list[str] = []
    plan = plan_for_row(_row(), DSV3, training, cluster, notes)
    assert (plan.recompute, plan.recompute_modules) == ("selective", ("mla_up_proj",))
    assert any("recompute_modules = ['mla_up_proj']" in n and "framework recipe" in n for n in notes)
    printed = plan_for_row(_row(recompute="full"), DSV3, training, cluster, [])
    assert (printed.recompute, printed.recompute_modules) == ("full", ())


def test_stage_chunks_unchanged_by_recompute() -> None:
    plan = replace(PLAN, recompute="selective", recompute_modules=("moe",))
    assert stage_chunks(plan, DSV3.num_layers) == stage_chunks(PLAN, DSV3.num_layers)


@pytest.mark.parametrize(("layer", "modules", "names"), [
    (5, ("mla_up_proj",), ["q_up", "kv_up"]),
    (5, ("layernorm",), ["attn_norm", "mlp_norm"]),  # MLA input norm and the MoE block's own norm
    (0, ("layernorm",), ["attn_norm"]),  # a dense MLP fuses its norm into fc1 (TE LayerNormLinear)
    (0, ("mlp",), ["mlp_norm", "mlp_fc1", "mlp_act", "mlp_fc2"]),
    (5, ("mlp",), []),  # 'mlp' is the dense MLP only
    (5, ("moe_act",), ["expert_act"]),
    (5, ("shared_experts",), ["shared_fc1", "shared_act", "shared_fc2"]),
    (5, ("core_attn",), ["attn_core"]),
    (5, ("moe",), ["router", "moe_permute", "moe_dispatch", "expert_fc1", "expert_act", "expert_fc2",
                   "moe_combine", "moe_unpermute", "shared_fc1", "shared_act", "shared_fc2"]),
])
def test_each_module_recomputes_its_megatron_submodule(layer: int, modules: tuple[str, ...], names: list[str]) -> None:
    ops = list(layer_ops(DSV3, layer, micro_batch=1, seq_len=N, tp=1, cp=1, ep=64, etp=1, dtype_bytes=2, sp=False))
    assert [o.name for o in recomputed_ops(ops, DSV3.is_moe_layer(layer), True, modules)] == names


def test_the_fp8_activation_input_store_halves_the_swiglu_inputs() -> None:
    # Megatron-Core activation_func_fp8_input_store: the routed experts' fc1 output (2 x 2048 per pair)
    # and the shared expert's (2 x 2048 per token) kept at 1 byte instead of 2; nothing else moves
    saved = _layer(()) - _layer((), act_input_fp8=True)
    assert saved == pytest.approx(PAIRS * 2 * 2048 + N * 2 * 2048)
    # what moe_act frees (the fc2 input) is not an activation input: the two savings add up
    both = _layer(("moe_act",), act_input_fp8=True)
    assert _layer(()) - both == pytest.approx(saved + 2 * PAIRS * 2048)
    # a clamped (gpt-oss) or non-gated MLP keeps its input as it is: the option has no kernel there
    for model in (get_model("gpt-oss-20b"), replace(get_model("gpt3-175b"), num_layers=2)):
        plain = layer_activation_bytes(model, 1, micro_batch=1, seq_len=N)
        assert layer_activation_bytes(model, 1, micro_batch=1, seq_len=N, act_input_fp8=True) == plain


def test_the_deepseek_v3_report_plan_fits_an_h800_with_the_reports_memory_measures() -> None:
    # report sec. 3.2 plan (PP16 DualPipe, EP64, ZeRO-1 over 128), sec. 3.2.3 recompute (RMSNorm, MLA
    # up-projections), sec. 3.3.3 FP8 cache of the SwiGLU input and BF16 AdamW moments: every stage
    # within the H800's 80 GB; without the recompute and the FP8 cache a middle stage is not
    from clustersim.topologies.accelerators import H800
    training = TrainingSpec(seq_len=N, global_batch_size=15360, precision="fp8", optimizer_state_dtype_bytes=2)
    measures = replace(PLAN, recompute="selective", recompute_modules=("mla_up_proj", "layernorm", "moe_act"),
                       activation_fp8_input_store=True)
    peak = max(s.memory.total for s in partition_plan(DSV3, training, measures).stages)
    assert peak < H800.hbm_capacity
    bare = max(s.memory.total for s in partition_plan(DSV3, training, PLAN).stages)
    assert bare > H800.hbm_capacity
