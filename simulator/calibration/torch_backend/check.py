"""Predicted vs measured: simulate the plans the backend ran, with a microbenchmark-only profile.

Owns translating the backend's records into simulator inputs (the GPT as a ``ModelSpec``, its
batch as a ``TrainingSpec``, the ``BackendPlan`` as a ``ParallelPlan``, "this machine" as a
``cpu_loopback`` cluster built from the profile's measured figures) and the per-plan error
table. The profile must come from ``clustersim.simulator.calibration.fit.fit_profile`` (microbenchmarks only): the step
times are only ever compared against, never fitted. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.calibration.profile import CalibrationProfile, machine_cluster
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord
from clustersim.workloads import ModelSpec, TrainingSpec

Statistic = Literal["median", "best", "uncontended"]
STATISTICS: tuple[Statistic, ...] = ("median", "best", "uncontended")

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
        learned_position_embeddings=False, source="simulator/calibration/torch_backend/gpt.py",
    )


def training_spec(cfg: GPTConfig, plan: BackendPlan) -> TrainingSpec:
    """fp32 Adam training on the plan's global batch (the backend trains in fp32 on CPU)."""
    return TrainingSpec(seq_len=cfg.seq_len, global_batch_size=plan.global_batch, precision="fp32",
                        optimizer="adam")


def parallel_plan(plan: BackendPlan, *, overlap: bool = True) -> ParallelPlan:
    """The simulator's plan for a backend plan (DDP buckets, FSDP2 prefetch).

    ``overlap=False`` for CPU ranks that each own one core: gloo moves bytes with CPU threads
    on that same core, so communication cannot hide behind compute.
    """
    return ParallelPlan(
        tp=plan.tp, pp=plan.pp, dp=plan.dp, sp=plan.sp, micro_batch=plan.micro_batch,
        schedule=plan.schedule if plan.pp > 1 else "1f1b",
        fsdp="full" if plan.data_parallel == "fsdp" and plan.dp > 1 else "none",
        bucket_size=float(DDP_BUCKET_BYTES), grad_dtype_bytes=4,
        overlap_grad_reduce=overlap, overlap_param_gather=overlap,
    )


def predict(record: StepRecord, profile: CalibrationProfile, *, time_shared: bool = True) -> float:
    """Simulated step time in seconds of one measured plan."""
    result = simulate(model_spec(record.model), training_spec(record.model, record.plan),
                      machine_cluster(profile, record.world_size, time_shared=time_shared),
                      parallel_plan(record.plan, overlap=record.device != "cpu"), profile=profile)
    return float(result.step_time)


def measured(record: StepRecord, statistic: Statistic) -> float:
    """The record's step time by ``statistic``: median, best, or median with CPU run delay removed."""
    match statistic:
        case "median":
            return record.median
        case "best":
            return record.best
        case "uncontended":
            return record.uncontended
    raise CalibrationError(f"statistic {statistic!r} unknown; use one of {list(STATISTICS)}")


def check(records: Sequence[StepRecord], profiles: Mapping[int, CalibrationProfile] | CalibrationProfile,
          statistic: Statistic = "median") -> list[CheckRow]:
    """Predicted vs measured for every record; ``profiles`` maps a world size to its profile
    (the microbenchmarks run on that many concurrent ranks) or is one profile for all."""
    rows = []
    for r in records:
        prof = profiles if isinstance(profiles, CalibrationProfile) else _for_world(profiles, r.world_size)
        pred = predict(r, prof, time_shared=statistic != "uncontended")  # run delay removed: no sharing
        rows.append(CheckRow(plan=r.plan.name, world_size=r.world_size, predicted=pred,
                             measured=measured(r, statistic), spread=r.spread))
    return rows


def _for_world(profiles: Mapping[int, CalibrationProfile], world: int) -> CalibrationProfile:
    """The profile of ``world`` ranks, else of the nearest larger (then smaller) world measured."""
    larger = sorted(w for w in profiles if w >= world)
    return profiles[larger[0]] if larger else profiles[max(profiles)]


def summary(rows: Sequence[CheckRow]) -> dict[str, float]:
    """Median and max |error| and the signed mean error over the rows."""
    errs = np.array([r.error for r in rows])
    return {"median_abs_error": float(np.median(np.abs(errs))), "max_abs_error": float(np.max(np.abs(errs))),
            "mean_error": float(np.mean(errs)), "plans": float(len(rows))}
