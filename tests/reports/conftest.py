"""Synthetic result rows for the reports tests (a rendering module may build its own input).

The rows are self-consistent by construction: the breakdown sums to the step time, MFU is
ideal / step, tokens/s/GPU is tokens per step / step time / GPUs. Loss sizes are knobs so that
tests can change the data and watch the report follow.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd
import pytest

TOKENS_PER_STEP = 1024 * 4096
MODEL_FLOPS_PER_STEP = 6 * 7e9 * TOKENS_PER_STEP  # PaLM 6N per token, 7B dense, attention omitted
PEAK_FLOPS = {"h100": 989e12, "a100": 312e12}  # dense BF16: NVIDIA H100 SXM / A100 datasheets
TDP_W = {"h100": 700.0, "a100": 400.0}  # board power: NVIDIA H100 SXM / A100 SXM datasheets
J_PER_KWH = 3.6e6


def _row(*, cluster: str, n: int, series: str, dp_loss: float, bubble_loss: float,
         tp: int, pp: int) -> dict[str, object]:
    """One ok result row with losses that grow with log2(N / 8)."""
    ideal = MODEL_FLOPS_PER_STEP / (n * PEAK_FLOPS[cluster])
    growth = math.log2(n / 8)
    parts = {
        "t_compute": ideal / 0.6, "t_exposed_tp": 0.04 * ideal * (tp > 1),
        "t_exposed_cp": 0.0, "t_exposed_ep": 0.0, "t_exposed_pp": 0.005 * ideal * (pp > 1),
        "t_bubble": bubble_loss * ideal * (pp > 1), "t_exposed_dp": dp_loss * ideal * growth,
        "t_optimizer": 0.01 * ideal, "t_other": 0.002 * ideal,
    }
    step = sum(parts.values())
    gpu_w = 0.75 * TDP_W[cluster]  # mean board power over the step; energy per token follows from it
    energy = {"mean_gpu_power_w": gpu_w, "kwh_per_million_tokens": gpu_w * n * step / TOKENS_PER_STEP * 1e6 / J_PER_KWH}
    compute = parts["t_compute"]  # split like Result.compute_breakdown: the parts sum to t_compute
    split = {"c_gemm_ideal": 0.55 * compute, "c_gemm_efficiency_loss": 0.25 * compute,
             "c_attention_kernel": 0.12 * compute, "c_elementwise": 0.05 * compute,
             "c_recompute": 0.0, "c_overhead": 0.03 * compute}
    return {**split, **energy, "model_params": 7e9, "num_layers": 32, "hidden_size": 4096, "precision": "bf16",
        "fabric": "fat_tree", "profile": f"{cluster}-test-profile", "profile_fit_date": "2026-11-30",
        "version": "0.1.0", "input_hash": f"hash-{cluster}-{series}-{n}", "peak_memory_gib": 55.9,
        "hbm_capacity_gib": 80.0, "memory_headroom_gib": 24.1, "tflops_per_gpu": MODEL_FLOPS_PER_STEP / step / n / 1e12,
        "point_id": f"{cluster}-{series}-{n}", "model": "llama-7b", "cluster": cluster,
        "accelerator": cluster.upper(), "num_gpus": n, "series": series, "status": "ok",
        "tp": tp, "pp": pp, "dp": n // (tp * pp), "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1,
        "schedule": "1f1b", "recompute": "none", "zero": 1, "fsdp": "none",
        "global_batch_size": 1024, "seq_len": 4096, "step_time_s": step,
        "tokens_per_s": TOKENS_PER_STEP / step, "tokens_per_s_per_gpu": TOKENS_PER_STEP / step / n,
        "mfu": ideal / step, "hfu": ideal / step, "peak_memory_gb": 60.0,
        "cost_per_gpu_hour": 0.0, "cost_per_million_tokens": float("nan"),
        "ideal_compute_s": ideal, **parts,
    }


def make_results(*, clusters: tuple[str, ...] = ("h100",),
                 counts: tuple[int, ...] = (8, 64, 512, 4096), best_dp_loss: float = 0.02,
                 naive_dp_loss: float = 0.15, bubble_loss: float = 0.05,
                 with_error: bool = True) -> pd.DataFrame:
    """Best, naive-DP and one fixed-plan series per cluster, plus one failed point."""
    rows = []
    for cluster in clusters:
        for n in counts:
            pp = 1 if n == counts[0] else 2
            rows.append(_row(cluster=cluster, n=n, series="best", dp_loss=best_dp_loss,
                             bubble_loss=bubble_loss, tp=8, pp=pp))
            rows.append(_row(cluster=cluster, n=n, series="naive_dp", dp_loss=naive_dp_loss,
                             bubble_loss=bubble_loss, tp=8, pp=1))
            rows.append(_row(cluster=cluster, n=n, series="tp4-pp1", dp_loss=naive_dp_loss * 0.8,
                             bubble_loss=bubble_loss, tp=4, pp=1))
    if with_error:
        rows.append({"point_id": "oom-1", "cluster": clusters[0], "num_gpus": counts[-1],
                     "series": "tp1-pp1", "status": "error", "tp": 1, "pp": 1,
                     "error": "OutOfMemoryError: 95.2 GB > 80 GB on stage 0",
                     **{c: np.nan for c in ("step_time_s", "tokens_per_s_per_gpu", "mfu",
                                            "ideal_compute_s", "t_compute", "t_exposed_tp",
                                            "t_exposed_cp", "t_exposed_ep", "t_exposed_pp",
                                            "t_bubble", "t_exposed_dp", "t_optimizer",
                                            "t_other")}})
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def results_factory() -> Callable[..., pd.DataFrame]:
    """``make_results`` with its knobs, for tests that change the data."""
    return make_results
