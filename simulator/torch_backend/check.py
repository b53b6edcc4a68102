"""Predicted vs measured: simulate the plans the backend ran, with a microbenchmark-only profile.

Owns translating the backend's records into simulator inputs (the GPT as a ``ModelSpec``, its
batch as a ``TrainingSpec``, the ``BackendPlan`` as a ``ParallelPlan``, "this machine" as a
``cpu_loopback`` cluster built from the profile's measured figures) and the per-plan error
table. The profile must come from ``simulator.fit.fit_profile`` (microbenchmarks only): the step
times are only ever compared against, never fitted. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from simulator.api import simulate
from simulator.calibration import CalibrationProfile
from simulator.errors import CalibrationError
from simulator.plan import ParallelPlan
from simulator.torch_backend.specs import BackendPlan, GPTConfig, StepRecord
from topologies import Cluster, cpu_accelerator, cpu_loopback
from workloads import ModelSpec, TrainingSpec

Statistic = Literal["median", "best"]

DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default gradient bucket (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel docs)."""


@dataclass(frozen=True, kw_only=True)
class CheckRow:
    """One measured plan against its prediction."""

    plan: str
    """Plan label."""
    world_size: int
    """Ranks."""
    measured: float
    """Measured step time in seconds (the chosen statistic)."""
    predicted: float
    """Simulated step time in seconds."""
    spread: float
    """(max - min) / median of the measured steps: the run-to-run noise."""

    @property
    def error(self) -> float:
        """Signed relative error predicted / measured - 1."""
        return self.predicted / self.measured - 1.0


def model_spec(cfg: GPTConfig) -> ModelSpec:
    """The backend's GPT as the simulator sees it (LayerNorm, GELU MLP, no bias, untied head)."""
    return ModelSpec(
        name=f"torch-gpt-l{cfg.num_layers}-h{cfg.hidden_size}", num_layers=cfg.num_layers,
        hidden_size=cfg.hidden_size, num_heads=cfg.num_heads, num_kv_heads=cfg.num_heads,
        ffn_hidden_size=cfg.ffn_hidden_size, vocab_size=cfg.vocab_size, gated_mlp=False,
        tied_embeddings=False, max_seq_len=cfg.seq_len, norm="layernorm", linear_bias=False,
        learned_position_embeddings=False, source="simulator/torch_backend/gpt.py",
    )


def training_spec(cfg: GPTConfig, plan: BackendPlan) -> TrainingSpec:
    """fp32 Adam training on the plan's global batch (the backend trains in fp32 on CPU)."""
    return TrainingSpec(seq_len=cfg.seq_len, global_batch_size=plan.global_batch, precision="fp32",
                        optimizer="adam")


def parallel_plan(plan: BackendPlan) -> ParallelPlan:
    """The simulator's plan for a backend plan (DDP buckets overlap backward; FSDP2 prefetches)."""
    return ParallelPlan(
        tp=plan.tp, pp=plan.pp, dp=plan.dp, sp=plan.sp, micro_batch=plan.micro_batch,
        schedule=plan.schedule if plan.pp > 1 else "1f1b",
        fsdp="full" if plan.data_parallel == "fsdp" and plan.dp > 1 else "none",
        bucket_size=float(DDP_BUCKET_BYTES), grad_dtype_bytes=4,
    )


def machine_cluster(profile: CalibrationProfile, num_ranks: int) -> Cluster:
    """ "This machine": ``num_ranks`` CPU ranks on loopback with the profile's measured figures.

    Ranks beyond the cores time-share them: each rank gets cores / (ranks x threads) of the
    measured single-rank compute and memory rates (an assumption of fair scheduling).
    """
    m = profile.machine
    missing = [k for k in ("peak_flops", "memory_bandwidth") if k not in m]
    if missing:
        raise CalibrationError(f"profile {profile.name}: machine figures {missing} missing; "
                               "use a profile from `clustersim calibrate fit`")
    busy = num_ranks * m.get("threads_per_rank", 1.0)
    share = min(1.0, m.get("cores", busy) / busy)
    acc = cpu_accelerator(peak_flops=m["peak_flops"] * share, memory_bandwidth=m["memory_bandwidth"] * share,
                          memory_capacity=m.get("memory_capacity", 0.0) or 4.0 * 2**30,
                          name="cpu (measured)", source=profile.source)
    return cpu_loopback(num_ranks, accelerator=acc, loopback_bandwidth=m.get("link_bandwidth", 1e9),
                        name="this-machine")


def predict(record: StepRecord, profile: CalibrationProfile) -> float:
    """Simulated step time in seconds of one measured plan."""
    result = simulate(model_spec(record.model), training_spec(record.model, record.plan),
                      machine_cluster(profile, record.world_size), parallel_plan(record.plan), profile=profile)
    return float(result.step_time)


def check(records: Sequence[StepRecord], profile: CalibrationProfile,
          statistic: Statistic = "median") -> list[CheckRow]:
    """Predicted vs measured for every record."""
    return [
        CheckRow(plan=r.plan.name, world_size=r.world_size, predicted=predict(r, profile),
                 measured=r.median if statistic == "median" else r.best, spread=r.spread)
        for r in records
    ]


def summary(rows: Sequence[CheckRow]) -> dict[str, float]:
    """Median and max |error| and the signed mean error over the rows."""
    errs = np.array([r.error for r in rows])
    return {"median_abs_error": float(np.median(np.abs(errs))), "max_abs_error": float(np.max(np.abs(errs))),
            "mean_error": float(np.mean(errs)), "plans": float(len(rows))}
