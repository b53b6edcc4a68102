"""The Result of one simulated step, summarised from the engine's intervals.

Owns the breakdown of the step time by cause (it sums to the step time), MFU and HFU, memory per
stage, provenance, and the flat row that sweeps and reports read. Metric definitions:
- ``mfu`` = model FLOPs per step (PaLM convention: 6·N·D + 12·L·h·s·D, no recompute) /
  (step_time · GPUs · dense peak of the training precision).
- ``hfu`` = FLOPs the devices execute, recompute included / (step_time · GPUs · peak).
- ``ideal_compute_s`` = model FLOPs / (GPUs · peak): the step at 100% MFU.
- ``tflops_per_gpu`` = model FLOPs / (step_time · GPUs) / 1e12 (what Megatron and NeMo print).
- ``compute_breakdown``: the critical stage's compute by ``step.compute.COMPUTE_PARTS``.
- memory in GiB (2^30 bytes) against the device's HBM capacity: ``memory_headroom``.
It does not render anything (``reports/`` does) and does not run the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from clustersim.units import GIB
from clustersim.simulator.step.engine import Interval
from clustersim.simulator.step.partition import StageMemory

CATEGORIES: tuple[str, ...] = (
    "compute", "exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "bubble",
    "exposed_dp", "exposed_offload", "optimizer", "other",
)


def breakdown_of(intervals: list[Interval], replica: int, stage: int, step_time: float) -> dict[str, float]:
    """Seconds by cause on one unit's compute stream; ``other`` closes the gap to ``step_time``."""
    return breakdowns(intervals, step_time)[(replica, stage)]


def breakdowns(intervals: list[Interval], step_time: float) -> dict[tuple[int, int], dict[str, float]]:
    """Seconds by cause of every unit's compute stream, in one pass over the intervals."""
    out: dict[tuple[int, int], dict[str, float]] = {}
    for iv in intervals:
        if iv.stream == "compute":
            row = out.setdefault((iv.replica, iv.stage), {c: 0.0 for c in CATEGORIES})
            row[iv.category] += iv.end - iv.start
    for row in out.values():
        row["other"] = max(0.0, step_time - sum(row.values()))
    return out


def critical_unit(intervals: list[Interval]) -> tuple[int, int]:
    """The (replica, stage) whose optimizer starts last with the least bubble: the critical path."""
    waits: dict[tuple[int, int], float] = {}
    for iv in intervals:
        if iv.stream == "compute":
            key = (iv.replica, iv.stage)
            waits.setdefault(key, 0.0)
            if iv.stage_sync:
                waits[key] += iv.end - iv.start
    return min(waits, key=lambda k: (waits[k], k))


@dataclass(frozen=True)
class Result:
    """Everything clustersim predicts about one training step."""

    step_time: float
    """Seconds per optimizer step (one global batch)."""
    tokens_per_step: int
    num_gpus: int
    model_flops: float
    """Model FLOPs per step, PaLM convention."""
    hardware_flops: float
    """Model FLOPs plus the FLOPs recomputed per step (the HFU numerator)."""
    device_flops: float
    """FLOPs of every device's ops summed (fwd + bwd, no recompute): conservation checks."""
    peak_flops: float
    """Dense peak FLOP/s per device at the training precision."""
    breakdown: Mapping[str, float]
    """Seconds by cause on the critical stage; sums to ``step_time``."""
    stage_breakdowns: tuple[Mapping[str, float], ...]
    memory: tuple[StageMemory, ...]
    checkpoint_bytes: float
    """Unique bytes of a full checkpoint: every parameter once, with fp32 master and optimizer state."""
    plan: Mapping[str, Any]
    labels: Mapping[str, Any]
    """Model, cluster and accelerator names."""
    provenance: Mapping[str, Any]
    """Input hash, tool version, seed, mode."""
    collectives: tuple[Mapping[str, Any], ...] = ()
    """Every distinct collective of the step: kind, axis, bytes, seconds, algorithm, bus bandwidth,
    busiest link and its utilisation with all concurrent groups (flow fidelity only)."""
    rank_wait_time: tuple[float, ...] | None = None
    """Full mode: seconds each rank waited for others (TP/DP sync, pipeline); None when symmetric."""
    compute_breakdown: Mapping[str, float] = field(default_factory=dict)
    """``breakdown["compute"]`` of the critical stage split by ``COMPUTE_PARTS`` (sums to it)."""
    stage_compute_breakdowns: tuple[Mapping[str, float], ...] = field(default=(), compare=False)
    """Each stage's compute seconds of one device by ``COMPUTE_PARTS`` (unscaled by stragglers):
    the kernel mix the energy model (``step.energy``) reads; empty when not known."""
    fabric: Mapping[str, Any] = field(default_factory=dict)
    """With ``fabric_sharing="flows"``: seconds each traffic class lost to sharing and the hottest
    links with their time-averaged utilisation (``step.streams.fabric_report``); empty otherwise."""
    intervals: tuple[Interval, ...] = field(default=(), repr=False, compare=False)
    link_rates: np.ndarray | None = field(default=None, repr=False, compare=False)
    """With ``fabric_sharing="flows"``: bytes/s the streams put on each directed link (by link id of
    the cluster's fabric), averaged over the step: what this job takes from a neighbour on the same
    links (``step.colocate``); None otherwise. Not in ``to_dict``."""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_time * self.num_gpus * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time * self.num_gpus * self.peak_flops)

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (PaLM model FLOPs / step time / GPUs / 1e12): MFU x peak."""
        return self.model_flops / (self.step_time * self.num_gpus) / 1e12

    @property
    def hbm_capacity(self) -> float:
        """Bytes of HBM per device (0 when the labels do not say)."""
        return float(self.labels.get("hbm_capacity_gib", 0.0) or 0.0) * GIB

    @property
    def memory_headroom(self) -> float:
        """HBM capacity minus the peak bytes per device."""
        return self.hbm_capacity - self.peak_memory

    @property
    def ideal_compute_s(self) -> float:
        return self.model_flops / (self.num_gpus * self.peak_flops)

    @property
    def peak_memory(self) -> float:
        return max(m.total for m in self.memory)

    @property
    def checkpoint_bytes_per_device(self) -> float:
        """Each device's share of a sharded checkpoint: unique weights and optimizer state / GPUs."""
        return self.checkpoint_bytes / self.num_gpus

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (no intervals)."""
        return {
            "step_time_s": self.step_time, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
            "ideal_compute_s": self.ideal_compute_s, "num_gpus": self.num_gpus,
            "tflops_per_gpu": self.tflops_per_gpu,
            "tokens_per_step": self.tokens_per_step, "breakdown_s": dict(self.breakdown),
            "compute_breakdown_s": dict(self.compute_breakdown),
            "peak_memory_gib": self.peak_memory / GIB, "hbm_capacity_gib": self.hbm_capacity / GIB,
            "memory_headroom_gib": self.memory_headroom / GIB,
            "stage_breakdowns_s": [dict(b) for b in self.stage_breakdowns],
            "memory_gib": [{k: v / GIB for k, v in {**m.parts(), "total": m.total}.items()} for m in self.memory],
            "plan": dict(self.plan), **{k: v for k, v in self.labels.items()},
            "scenario": self.scenario(),
            "provenance": dict(self.provenance),
            "rank_wait_time_s": list(self.rank_wait_time) if self.rank_wait_time is not None else None,
            "collectives": [dict(c) for c in self.collectives],
            **({"fabric": dict(self.fabric)} if self.fabric else {}),
        }

    def scenario(self) -> dict[str, Any]:
        """What was simulated, for every output's header: model, batch, sequence, precision,
        cluster and fabric, calibration profile and fit date, version, input hash."""
        keys = ("model", "model_params", "num_layers", "hidden_size", "global_batch_size", "seq_len", "precision",
                "cluster", "accelerator", "gpus_per_node", "fabric", "nic_bandwidth_gbps", "nvlink_domain_size",
                "hbm_capacity_gib", "profile", "profile_fit_date")
        return {"num_gpus": self.num_gpus, **{k: self.labels.get(k) for k in keys},
                "version": self.provenance.get("version"), "input_hash": self.provenance.get("input_hash")}

    def to_row(self) -> dict[str, Any]:
        """The flat row of the sweep DataFrame (docs/ARCHITECTURE.md)."""
        p = self.plan
        cost_h = float(self.labels.get("cost_per_gpu_hour", 0.0) or 0.0)
        row: dict[str, Any] = {
            "model": self.labels.get("model"), "cluster": self.labels.get("cluster"),
            "accelerator": self.labels.get("accelerator"), "num_gpus": self.num_gpus,
            **{k: p[k] for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "schedule", "recompute", "zero", "fsdp")},
            "global_batch_size": self.labels.get("global_batch_size"), "seq_len": self.labels.get("seq_len"),
            "step_time_s": self.step_time, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "peak_memory_gb": self.peak_memory / 1e9, "ideal_compute_s": self.ideal_compute_s,
            "tflops_per_gpu": self.tflops_per_gpu, "peak_memory_gib": self.peak_memory / GIB,
            "hbm_capacity_gib": self.hbm_capacity / GIB, "memory_headroom_gib": self.memory_headroom / GIB,
            "cost_per_gpu_hour": cost_h,
            "cost_per_million_tokens": cost_h * self.num_gpus / 3600.0 / self.tokens_per_s * 1e6,
        }
        for cat in CATEGORIES:
            row[f"t_{cat}"] = self.breakdown[cat]
        for part, secs in self.compute_breakdown.items():
            row[f"c_{part}"] = secs
        scenario = self.scenario()
        row.update({k: scenario[k] for k in ("model_params", "num_layers", "hidden_size", "precision", "fabric",
                                             "profile", "profile_fit_date", "version", "input_hash")})
        return row
