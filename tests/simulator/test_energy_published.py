"""Published training-energy, GPU-hour and emission accounts re-predicted by clustersim.

Each account's model, tokens, GPU type and count and plan (stated by the source, or for Llama 2,
whose plan is unpublished, the fastest of the candidate set of ``benchmarks/energy_published.py``,
pinned here) are simulated; the long run's goodput under the Llama 3 interruption rate (one per
50,677 GPU-hours, Llama 3 paper sec. 3.3.4) adds lost work and restarts; the run of the source's
token count gives GPU-hours and energy. The sources account energy as GPU-hours x the stated
power per GPU (TDP); clustersim integrates its power model over the simulated timeline, so the
energy error also measures mean power / TDP. Errors at the time of writing are in the comments;
the tolerances bound them with room for model changes, and fail when a prediction drifts.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from clustersim.simulator.cli.goodput import LLAMA3_GPU_MTBF_HOURS, TECTONIC_GBPS
from clustersim.simulator.longrun.checkpoint import CheckpointSpec
from clustersim.simulator.longrun.energy import RunEnergy, price_run
from clustersim.simulator.longrun.failures import FailureSpec
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import Cluster, get_cluster
from clustersim.units import GBIT
from clustersim.workloads import ModelSpec, TrainingSpec, get_model

CHECKPOINT = CheckpointSpec(write_bandwidth_per_node=200 * GBIT, storage_bandwidth=TECTONIC_GBPS * GBIT)
FAILURES = FailureSpec(mtbf_gpu=LLAMA3_GPU_MTBF_HOURS * 3600, detection_time=120, restart_time=600, reschedule_time=300)
TOLERANCE = 0.30
"""Relative bound on the GPU-hour error of every account."""
ENERGY_TOLERANCE = 0.40
"""Relative bound on energy and emissions (also carries mean power below TDP)."""

# BLOOM: BigScience, "BLOOM: A 176B-Parameter Open-Access Multilingual Language Model" (arXiv
# 2211.05100): 70 layers, hidden 14,336, 112 heads, seq 2,048, 366B tokens, 48 nodes x 8 A100 80GB,
# 4 x 100 Gb/s Omni-Path per node (50 Gb/s per GPU); plan from the run's launcher
# (github bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm): TP 4, PP 12,
# micro-batch 2, global batch 2,048, --checkpoint-activations, vocabulary padded to 250,880,
# bf16 with its own ZeRO-1 equivalent.
BLOOM = ModelSpec(name="bloom-176b", num_layers=70, hidden_size=14336, num_heads=112, num_kv_heads=112,
                  ffn_hidden_size=4 * 14336, vocab_size=250880, gated_mlp=False, tied_embeddings=True,
                  max_seq_len=2048, source="BLOOM paper arXiv 2211.05100; tr11-176B-ml.slurm")
# Luccioni, Viguier, Ligozat 2022, "Estimating the Carbon Footprint of BLOOM" (arXiv 2211.02001,
# JMLR 24(253)): 1,082,990 GPU-hours; dynamic energy 433,196 kWh (= GPU-hours x 400 W TDP);
# 256,646 kWh of idle/infrastructure energy; 24.69 t CO2eq dynamic at the French grid's
# 57 g CO2eq/kWh (24.69 t / 433,196 kWh = 57.0 g/kWh).
BLOOM_GPU_HOURS, BLOOM_DYNAMIC_KWH, BLOOM_IDLE_KWH = 1_082_990, 433_196, 256_646
BLOOM_T_CO2, BLOOM_KG_PER_KWH = 24.69, 0.057

# Llama 2 model card (github meta-llama/llama MODEL_CARD.md, "CO2 emissions during pretraining"):
# A100-80GB, power 400 W per GPU (peak, adjusted for PUE), 2.0T tokens, global batch 4M tokens,
# context 4k; (model, GPU-hours, t CO2eq). GPU count unpublished: 2,048 (the RSC size of Llama 1).
LLAMA2 = (("llama2-7b", 184_320, 31.22, ParallelPlan(tp=2, dp=1024, sp=True, zero=1, recompute="selective")),
          ("llama2-13b", 368_640, 62.44, ParallelPlan(tp=2, dp=1024, sp=True, zero=1, recompute="selective")),
          ("llama2-70b", 1_720_320, 291.42, ParallelPlan(tp=8, dp=256, micro_batch=2, sp=True, zero=1,
                                                         recompute="selective")))

# Llama 3.1 model card (huggingface.co/meta-llama/Llama-3.1-405B, "Training Energy Use"): 405B,
# 30.84M GPU-hours on H100-80GB at 700 W, 8,930 t CO2eq location-based. Llama 3 paper (arXiv
# 2407.21783): 15.6T tokens, 16,384 H100, TP 8, PP 16, DP 128, seq 8,192, 16M tokens per batch
# (Table 4); micro-batch and interleaving unpublished: the fastest (as benchmarks/
# fidelity_llama3_405b.py picks), VPP 4. Memory check lifted as there (our model is a few GiB above 80).
LLAMA31_405B_GPU_HOURS, LLAMA31_405B_T_CO2 = 30.84e6, 8930.0


def predict(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan,
            tokens: float) -> tuple[RunEnergy, float, float]:
    """(the run of ``tokens`` with failures, GPU-only kWh of that run, goodput)."""
    result = simulate(model, training, cluster, plan, fidelity="analytic")
    longrun, run = price_run(result, cluster, tokens, CHECKPOINT, FAILURES, np.random.default_rng(0),
                             days=30.0, repetitions=10)
    return run, run.gpu_energy_kwh.mean, longrun.goodput_mean


def rel(predicted: float, published: float) -> float:
    return predicted / published - 1.0


def test_bloom_luccioni_2022() -> None:
    cluster = get_cluster("dgx-a100", 384, nic_bandwidth=50 * GBIT)
    plan = ParallelPlan(tp=4, pp=12, dp=8, micro_batch=2, recompute="full", zero=1)
    run, gpu_kwh, goodput = predict(BLOOM, TrainingSpec(seq_len=2048, global_batch_size=2048), cluster, plan, 366e9)
    assert goodput < 1.0 and run.gpu_hours.ci95[0] <= run.gpu_hours.mean <= run.gpu_hours.ci95[1]
    assert abs(rel(run.gpu_hours.mean, BLOOM_GPU_HOURS)) < TOLERANCE  # -19.6% when written
    assert abs(rel(gpu_kwh, BLOOM_DYNAMIC_KWH)) < ENERGY_TOLERANCE  # GPU energy, -30.0% (-29.1% before element-wise kernels drew the memory level)
    assert abs(rel(gpu_kwh * BLOOM_KG_PER_KWH / 1e3, BLOOM_T_CO2)) < ENERGY_TOLERANCE  # dynamic emissions
    it_kwh = run.energy_kwh.mean  # GPU + node overhead (PUE 1) vs the study's dynamic + idle energy
    assert abs(rel(it_kwh, BLOOM_DYNAMIC_KWH + BLOOM_IDLE_KWH)) < ENERGY_TOLERANCE  # -30.0% (-29.5% before)


@pytest.mark.parametrize("name,gpu_hours,t_co2,plan", LLAMA2, ids=[c[0] for c in LLAMA2])
def test_llama2_model_card(name: str, gpu_hours: float, t_co2: float, plan: ParallelPlan) -> None:
    training = TrainingSpec(seq_len=4096, global_batch_size=1024)
    run, gpu_kwh, _ = predict(get_model(name), training, get_cluster("dgx-a100", 2048), plan, 2.0e12)
    assert abs(rel(run.gpu_hours.mean, gpu_hours)) < TOLERANCE  # 7B -8%, 13B -17%, 70B +1% when written
    card_kg_per_kwh = t_co2 * 1e3 / (gpu_hours * 0.4)  # the card's emissions per GPU-kWh at 400 W (PUE included)
    assert abs(rel(gpu_kwh * card_kg_per_kwh / 1e3, t_co2)) < ENERGY_TOLERANCE  # 7B -20.2%, 13B -27.7%, 70B -18.2%


def test_llama31_405b_model_card() -> None:
    cluster = get_cluster("h100", 16384)
    cluster = replace(cluster, accelerator=replace(cluster.accelerator, hbm_capacity=1e18))
    plan = ParallelPlan(tp=8, pp=16, dp=128, vpp=4, schedule="interleaved", sp=True, zero=1, tp_comm_overlap=0.5)
    training = TrainingSpec(seq_len=8192, global_batch_size=2048)
    run, gpu_kwh, goodput = predict(get_model("llama3-405b"), training, cluster, plan, 15.6e12)
    assert 0.8 < goodput < 0.95  # the paper: > 90% effective training time; 419 interruptions in 54 days
    assert abs(rel(run.gpu_hours.mean, LLAMA31_405B_GPU_HOURS)) < TOLERANCE  # +0.5% when written
    card_kg_per_kwh = LLAMA31_405B_T_CO2 * 1e3 / (LLAMA31_405B_GPU_HOURS * 0.7)
    assert abs(rel(gpu_kwh * card_kg_per_kwh / 1e3, LLAMA31_405B_T_CO2)) < ENERGY_TOLERANCE  # -22.3% (-21.7% before)

