"""``simulate(workload, cluster, plan) -> Result``: the five phases in order, each a new value.

check the plan -> place ranks -> partition memory -> lower to per-stage costs -> run the engine ->
summarise. Each stage is a function of its own module; this one only strings them together and
adds provenance. ``evaluate_point`` is the picklable entry point sweeps run on workers.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import asdict
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from clustersim.simulator import __version__
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.plan import (
    ParallelPlan,
    Placement,
    check_plan,
    chunks_per_stage,
    num_microbatches,
)
from clustersim.simulator.network import DEFAULT_FIDELITY, CommPricer, FabricLoad, Fidelity
from clustersim.simulator.step.compute import expert_path, local_experts, peak_for
from clustersim.simulator.step.engine import EngineInput, Interval, run
from clustersim.simulator.step.jitter import pass_wait_fraction, sync_wait_fraction, variability_wait_fraction
from clustersim.simulator.step.costs import StageCost
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import compute_parts, lower
from clustersim.simulator.step.partition import StageMemory, partition
from clustersim.simulator.step.result import Result, breakdowns, critical_unit
from clustersim.simulator.step.streams import FabricSharing, fabric_report, link_volume, send_counts, stream_transfers
from clustersim.simulator.errors import PlanError
from clustersim.topologies import Cluster, ensure_valid
from clustersim.workloads import ModelSpec, TrainingSpec, model_flops_per_step

Mode = Literal["symmetric", "full"]


def simulate(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: Cluster,
    plan: ParallelPlan,
    *,
    profile: CalibrationProfile | None = None,
    mode: Mode = "symmetric",
    seed: int = 0,
    compute_scale: Sequence[float] | np.ndarray | None = None,
    fidelity: Fidelity = DEFAULT_FIDELITY,
    fabric_sharing: FabricSharing = "static",
    fabric_load: FabricLoad | None = None,
) -> Result:
    """Predict one training step of ``model`` on ``cluster`` under ``plan``.

    ``compute_scale`` (full mode only) multiplies each rank's compute time (stragglers).
    ``fabric_sharing="flows"`` lets the pipeline sends, DP buckets and ZeRO gathers that overlap in
    time share the fabric's links (``fabric_load``: other tenants' load and degraded links).
    """
    _check_inputs(model, training, cluster, plan, mode)
    _check_sharing(fabric_sharing, fabric_load, mode, fidelity)
    check_plan(model, training, cluster, plan)
    part = partition(model, training, plan, cluster)
    memory = part.memory
    prof = profile or default_profile(cluster.accelerator.name)
    placement = Placement(plan, cluster.gpus_per_node)
    pricer = CommPricer(cluster, placement, prof, fidelity)
    costing = Costing(model, training, plan, cluster.accelerator, expert_path(prof, plan.moe_fused_grouped_mlp, local_experts(model, plan)), pricer)
    lowered = lower(costing, part)
    stages = lowered.stages
    flows = stream_transfers(pricer, stages, fabric_load or FabricLoad()) if fabric_sharing == "flows" else None
    rank_scale = _rank_scale(plan, mode, compute_scale)
    unit_scale = _unit_scale(placement, rank_scale) if mode == "full" else np.ones((1, plan.pp))
    m = num_microbatches(plan, training)
    inp = EngineInput(
        stages=stages, schedule=plan.schedule, microbatches=m, vpp=chunks_per_stage(plan.schedule, plan.vpp),
        overlap_grad_reduce=plan.overlap_grad_reduce, overlap_param_gather=plan.overlap_param_gather,
        scale=unit_scale, step_overhead=prof.step_overhead, flows=flows,
        sync_wait=_sync_wait(plan, prof), sync_wait_of=_pass_law(plan, prof),
        ep_slowdown=prof.overlap_slowdown.get("all_to_all", 0.0), paired=plan.paired_steady,
    )
    intervals, step = run(inp)
    inputs = _inputs_doc(model, training, cluster, plan, prof, mode, seed, fidelity, rank_scale)
    if fabric_sharing == "flows":
        inputs["fabric_sharing"] = {"mode": fabric_sharing, "background": dict((fabric_load or FabricLoad()).background),
                                    "degraded": dict((fabric_load or FabricLoad()).degraded)}
    result = _summarise(model, training, cluster, plan, stages, memory, intervals, step, m, inputs,
                        _rank_waits(placement, intervals, rank_scale, unit_scale) if mode == "full" else None)
    crit = critical_unit(intervals)
    scale = float(unit_scale[crit[0], crit[1]])  # a straggling unit's compute runs at its scale
    stage_parts = compute_parts(costing, part)
    parts = {k: v * scale for k, v in stage_parts[crit[1]].items()}
    sends = send_counts(plan.schedule, plan.pp, m, inp.vpp) if flows is not None else None
    fabric = {} if flows is None or sends is None else fabric_report(flows, sends, intervals, step, microbatches=m)
    rates = None if flows is None or sends is None else link_volume(flows, sends, m) / step
    return dataclasses.replace(result, collectives=lowered.collectives, compute_breakdown=parts, fabric=fabric,
                               stage_compute_breakdowns=stage_parts, link_rates=rates,
                               labels={**result.labels, **scenario_labels(model, training, cluster, prof)})


def scenario_labels(model: ModelSpec, training: TrainingSpec, cluster: Cluster, prof: CalibrationProfile) -> dict[str, Any]:
    """What a reader needs to know was simulated: model size and shape, batch, sequence, precision,
    cluster, fabric, memory capacity, the calibration profile and its fit date."""
    return {
        "model_params": model.num_params(), "num_layers": model.num_layers, "hidden_size": model.hidden_size,
        "precision": training.precision, "gpus_per_node": cluster.gpus_per_node, "fabric": cluster.fabric,
        "nic_bandwidth_gbps": cluster.nic_bandwidth * 8 / 1e9, "nvlink_domain_size": cluster.nvlink_domain_size,
        "hbm_capacity_gib": cluster.accelerator.hbm_capacity / 2**30, "profile": prof.name,
        "profile_fit_date": prof.fit_date or "not recorded",
    }


def _check_inputs(model: object, training: object, cluster: object, plan: object, mode: object) -> None:
    """The arguments have the right types, and a user-built Cluster keeps the graph contract
    (positive finite capacities, every GPU connected): a TopologyError, never a NaN or KeyError."""
    for name, value, kind in (("model", model, ModelSpec), ("training", training, TrainingSpec),
                              ("cluster", cluster, Cluster), ("plan", plan, ParallelPlan)):
        if not isinstance(value, kind):
            raise PlanError(f"simulate: {name} must be a {kind.__name__}, got {type(value).__name__}")
    if mode not in ("symmetric", "full"):
        raise PlanError(f"simulate: mode = {mode!r}; use symmetric or full")
    if isinstance(cluster, Cluster):  # the loop above raised for anything else
        ensure_valid(cluster)


def _check_sharing(sharing: object, load: FabricLoad | None, mode: Mode, fidelity: Fidelity) -> None:
    """Flows over time need the symmetric engine and the flow-level pricing."""
    if sharing not in ("static", "flows"):
        raise PlanError(f"simulate: fabric_sharing = {sharing!r}; use static or flows")
    if sharing == "flows" and mode != "symmetric":
        raise PlanError("simulate: fabric_sharing = 'flows' runs the representative pipeline; use mode = 'symmetric'")
    if sharing == "flows" and fidelity != "flow":
        raise PlanError("simulate: fabric_sharing = 'flows' needs fidelity = 'flow' (the flows cross the priced links)")
    if load is not None and sharing != "flows":
        raise PlanError("simulate: fabric_load (background load, degraded links) needs fabric_sharing = 'flows'")


def _sync_wait(plan: ParallelPlan, prof: CalibrationProfile) -> float:
    """Seconds each pass waits per second of its compute: for the slowest of the dp x cp ranks it
    synchronises with (per-pass jitter), then for the job's slowest GPU (static variability, every
    GPU of the job: TP, PP and DP couple them all each step); the two multiply."""
    jitter = sync_wait_fraction(plan.dp * plan.cp, prof.sync_jitter_cv)
    static = variability_wait_fraction(plan.world_size, prof.gpu_variability_cv)
    if static == 0.0:
        return jitter  # bit for bit the jitter alone (every profile without the variability)
    return (1.0 + jitter) * (1.0 + static) - 1.0


def _pass_law(plan: ParallelPlan, prof: CalibrationProfile) -> Callable[[float], float] | None:
    """The wait fraction per pass length under ``sync_jitter_law = pass_length`` (None: one
    fraction for every pass, ``_sync_wait``); the static variability multiplies as there."""
    if prof.sync_jitter_law == "constant" or prof.sync_jitter_cv == 0.0:
        return None
    static = variability_wait_fraction(plan.world_size, prof.gpu_variability_cv)
    return functools.partial(_pass_wait, plan.dp * plan.cp, prof.sync_jitter_cv, static)


def _pass_wait(n: int, cv_ref: float, static: float, seconds: float) -> float:
    return (1.0 + pass_wait_fraction(n, cv_ref, seconds)) * (1.0 + static) - 1.0


def _rank_scale(plan: ParallelPlan, mode: Mode, compute_scale: Sequence[float] | np.ndarray | None) -> np.ndarray:
    if compute_scale is None:
        return np.ones(plan.world_size)
    if mode != "full":
        raise ValueError("compute_scale needs mode='full' (symmetric mode has one representative rank)")
    arr = np.asarray(compute_scale, dtype=float)
    if arr.shape != (plan.world_size,) or np.any(arr <= 0):
        raise ValueError(f"compute_scale must be {plan.world_size} positive numbers, one per rank; got shape {arr.shape}")
    return arr


def unit_ranks(placement: Placement) -> np.ndarray:
    """Ranks of each engine unit: shape (dp, pp, tp*cp)."""
    plan = placement.plan
    groups = placement.groups("tp+cp")  # one per (dp, pp), ordered by those coordinates
    out = np.empty((plan.dp, plan.pp, plan.tp * plan.cp), dtype=int)
    for g in groups:
        c = placement.coords(int(g[0]))
        out[c["dp"], c["pp"]] = g
    return out


def _unit_scale(placement: Placement, rank_scale: np.ndarray) -> np.ndarray:
    """A unit (a TP/CP group at one stage of one replica) runs at its slowest rank's pace."""
    slowest: np.ndarray = rank_scale[unit_ranks(placement)].max(axis=2)
    return slowest


def _rank_waits(placement: Placement, intervals: list[Interval], rank_scale: np.ndarray, unit_scale: np.ndarray) -> tuple[float, ...]:
    """Seconds each rank spends waiting: its unit's waits plus waiting for slower TP/CP peers."""
    waits = np.zeros(placement.plan.world_size)
    compute = np.zeros(unit_scale.shape)
    idle = np.zeros(unit_scale.shape)
    for iv in intervals:
        if iv.stream != "compute":
            continue
        if iv.category == "compute":
            compute[iv.replica, iv.stage] += iv.end - iv.start
        elif iv.category in ("bubble", "exposed_pp", "exposed_dp"):
            idle[iv.replica, iv.stage] += iv.end - iv.start
    ranks = unit_ranks(placement)
    base = compute / unit_scale
    for r in range(ranks.shape[0]):
        for s in range(ranks.shape[1]):
            members = ranks[r, s]
            waits[members] = idle[r, s] + base[r, s] * (unit_scale[r, s] - rank_scale[members])
    return tuple(float(w) for w in waits)


def _inputs_doc(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan,
                prof: CalibrationProfile, mode: str, seed: int, fidelity: str, scale: np.ndarray) -> dict[str, Any]:
    return {
        "model": asdict(model), "training": asdict(training), "plan": asdict(plan),
        "cluster": {"name": cluster.name, "num_gpus": cluster.num_gpus, "gpus_per_node": cluster.gpus_per_node,
                    "fabric": cluster.fabric, "params": {k: str(v) for k, v in cluster.params.items()},
                    "accelerator": asdict(cluster.accelerator), "nic_bandwidth": cluster.nic_bandwidth,
                    "nvlink_domain_size": cluster.nvlink_domain_size},
        "profile": prof.model_dump(mode="json"), "mode": mode, "seed": seed, "fidelity": fidelity,
        "compute_scale_sha": hashlib.sha256(scale.tobytes()).hexdigest()[:16],
    }


def input_hash(doc: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the inputs."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _summarise(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan,
               stages: tuple[StageCost, ...], memory: tuple[StageMemory, ...], intervals: list[Interval], step: float,
               m: int, inputs: dict[str, Any], waits: tuple[float, ...] | None) -> Result:
    per_stage_devices = plan.dp * plan.tp * plan.cp
    device = sum(c.flops for st in stages for c in st.chunks) * m * per_stage_devices
    recomputed = sum(c.recompute_flops for st in stages for c in st.chunks) * m * per_stage_devices
    model_flops = model_flops_per_step(model, training)
    crit = critical_unit(intervals)
    units = breakdowns(intervals, step)
    return Result(
        step_time=step, tokens_per_step=training.tokens_per_step, num_gpus=cluster.num_gpus,
        model_flops=model_flops, hardware_flops=model_flops + recomputed, device_flops=device,
        peak_flops=peak_for(cluster.accelerator, training.precision, True),
        breakdown=units[crit],
        stage_breakdowns=tuple(units[(crit[0], s)] for s in range(plan.pp)),
        memory=memory, plan=asdict(plan),
        checkpoint_bytes=float(model.num_params()) * (training.param_bytes + training.master_param_bytes
                                                     + training.optimizer_state_bytes),
        labels={"model": model.name, "cluster": cluster.name, "accelerator": cluster.accelerator.name,
                "cost_per_gpu_hour": cluster.cost_per_gpu_hour,
                "global_batch_size": training.global_batch_size, "seq_len": training.seq_len},
        provenance={"input_hash": input_hash(inputs), "version": __version__, "seed": inputs["seed"],
                    "mode": inputs["mode"], "fidelity": inputs["fidelity"]},
        rank_wait_time=waits, intervals=tuple(intervals),
    )
