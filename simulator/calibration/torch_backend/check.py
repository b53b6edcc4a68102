"""Predicted vs measured: simulate the plans the backend ran, with a microbenchmark-only profile.

Owns translating the backend's records into simulator inputs (the GPT as a ``ModelSpec``, its
batch as a ``TrainingSpec``, the ``BackendPlan`` as a ``ParallelPlan``, "this machine" as a
``cpu_loopback`` cluster built from the profile's measured figures, each plan priced with the
measured laws of the collectives and the per-call cost of the frameworks it runs), the per-plan
error table and the ranking figures (Spearman correlation, misordered pairs, fastest plan). The profile must come from ``clustersim.simulator.calibration.fit.fit_profile`` (microbenchmarks only): the step
times are only ever compared against, never fitted. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence, TypeVar

import numpy as np

from clustersim.simulator.step import simulate_step as simulate
from clustersim.simulator.profile import CalibrationProfile, machine_cluster
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord
from clustersim.workloads import ModelSpec, TrainingSpec

T = TypeVar("T")
Statistic = Literal["median", "best", "uncontended"]
STATISTICS: tuple[Statistic, ...] = ("median", "best", "uncontended")

DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default gradient bucket (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel docs)."""

DDP_FIRST_BUCKET_BYTES = 2**20
"""torch DDP's first gradient bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB):
the gradients ready first are reduced alone, the rest in ``DDP_BUCKET_BYTES`` buckets."""


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
    ci_width: float = 0.0
    """(upper - lower) / median of the measured median's 95 % interval."""
    pass_spread: float = 0.0
    """(max - min) / median of the plan's interleaved passes' medians (``StepRecord.pass_spread``)."""
    predicted_low: float | None = None
    """Fastest prediction over the profiles of the compute microbenchmarks' passes and their
    median (seconds); None without passes: the profile's own interval (``fit.pass_reports``)."""
    predicted_high: float | None = None
    """Slowest such prediction (seconds); None without passes."""
    drift_compute: float = 1.0
    """The plan's drift probe GEMM time over the profile's (``drift``): > 1, the host computed
    slower while the plan ran than while the microbenchmarks did; 1 without probes."""
    drift_latency: float = 1.0
    """The same for the probe's back-to-back all-reduce (per-call latency); 1 without probes."""

    @property
    def error(self) -> float:
        """Signed relative error predicted / measured - 1."""
        return self.predicted / self.measured - 1.0

    @property
    def outside(self) -> float:
        """How far the measurement lies outside the profile's own interval, relative: measured /
        high - 1 above it (> 0), measured / low - 1 below it (< 0), 0 inside or without one."""
        if self.predicted_low is None or self.predicted_high is None:
            return 0.0
        if self.measured > self.predicted_high:
            return self.measured / self.predicted_high - 1.0
        if self.measured < self.predicted_low:
            return self.measured / self.predicted_low - 1.0
        return 0.0


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
        bucket_size=float(DDP_BUCKET_BYTES), first_bucket_size=float(DDP_FIRST_BUCKET_BYTES), grad_dtype_bytes=4,
        overlap_grad_reduce=overlap, overlap_param_gather=overlap,
    )


def plan_collectives(plan: BackendPlan) -> tuple[str, ...]:
    """The collective kinds a plan runs: DDP and TP all-reduce, FSDP2 and SP all-gather and
    reduce-scatter, pipelining sends and receives."""
    kinds: set[str] = set()
    if plan.dp > 1:
        kinds |= {"all_gather", "reduce_scatter"} if plan.data_parallel == "fsdp" else {"all_reduce"}
    if plan.tp > 1:
        kinds |= {"all_gather", "reduce_scatter"} if plan.sp else {"all_reduce"}
    if plan.pp > 1:
        kinds.add("send_recv")
    return tuple(sorted(kinds))


def plan_frameworks(plan: BackendPlan) -> tuple[str, ...]:
    """The torch frameworks issuing a plan's collectives (keys of ``framework_overhead``)."""
    out = []
    if plan.dp > 1:
        out.append("fsdp" if plan.data_parallel == "fsdp" else "ddp")
    if plan.tp > 1:
        out.append("tp-sp" if plan.sp else "tp")
    return tuple(out)


def plan_profile(plan: BackendPlan, profile: CalibrationProfile) -> CalibrationProfile:
    """``profile`` with the measured costs of what this plan runs: the per-call overhead of its
    frameworks (DTensor, FSDP2, DDP), the send/recv alpha, and the bus bandwidth of its
    collective kinds (harmonic mean: equal bytes through each). Unchanged without measured laws."""
    laws = profile.collective_laws
    kinds = [k for k in plan_collectives(plan) if k in laws and k != "send_recv"]
    changes: dict[str, object] = {}
    per_call = [profile.framework_overhead[f] for f in plan_frameworks(plan) if f in profile.framework_overhead]
    if per_call:
        changes["collective_overhead"] = float(np.mean(per_call))
    elif kinds:
        changes["collective_overhead"] = float(np.mean([laws[k][0] for k in kinds]))
    if "send_recv" in laws:
        changes["p2p_overhead"] = laws["send_recv"][0]
    used = kinds or [k for k in plan_collectives(plan) if k in laws]
    if used:
        bw = len(used) / sum(1.0 / laws[k][1] for k in used)
        changes["machine"] = {**profile.machine, "link_bandwidth": bw}
    return profile.replace(**changes) if changes else profile


DRIFT_RANGE: tuple[float, float] = (0.5, 2.0)
"""Drift factors are clipped into this range: a probe twice as slow (or fast) as the profile's
says the host changed under the plan, not by how much its steps moved."""


@dataclass(frozen=True, kw_only=True)
class Drift:
    """How the host drifted between the microbenchmarks and one plan, by the drift probe."""

    compute: float = 1.0
    """Probe GEMM time around the plan / with the microbenchmarks."""
    latency: float = 1.0
    """Probe back-to-back all-reduce time around the plan / with the microbenchmarks."""


def _ratio(mine: float, reference: float) -> float:
    if mine <= 0 or reference <= 0:
        return 1.0
    return float(np.clip(mine / reference, *DRIFT_RANGE))


def drift(record: StepRecord, reference: Mapping[str, float] | None) -> Drift:
    """The plan's drift factors: the median of its probe samples (one after each timed step, so
    over the same window as the median step) over the ``reference`` probe (``fit.probe_reference``:
    the median of the samples taken between the microbenchmarks), each clipped to ``DRIFT_RANGE``;
    1 where either side has no probe (or the figure is 0: one rank has no all-reduce)."""
    if not reference or not record.probes:
        return Drift()
    med = {k: float(np.median([p.get(k, 0.0) for p in record.probes])) for k in ("gemm_s", "allreduce_s")}
    return Drift(compute=_ratio(med["gemm_s"], reference.get("gemm_s", 0.0)),
                 latency=_ratio(med["allreduce_s"], reference.get("allreduce_s", 0.0)))


def drifted(profile: CalibrationProfile, d: Drift) -> CalibrationProfile:
    """``profile`` as the host ran during the plan: the measured compute rates (peak FLOP/s and
    memory bandwidth) divided by ``d.compute`` and the per-op, per-backward and eager per-layer
    overheads times it;
    every per-call latency (collective and p2p overhead, each framework's per-call cost, the TP
    call's wait after compute, each law's alpha) times ``d.latency``. Bandwidths of the collective laws are left as measured.

    On a GPU (``kernels_async``) the probe's 256 x 256 GEMMs finish before the host launches the
    next one: it times the host, so it moves the host's overheads only, not the device's rates."""
    if d == Drift():
        return profile
    c, lat = d.compute, d.latency
    machine = {**profile.machine}
    for key in ("peak_flops", "memory_bandwidth"):
        if key in machine and not profile.kernels_async:
            machine[key] = machine[key] / c
    return profile.replace(
        machine=machine, kernel_overhead=profile.kernel_overhead * c, step_overhead=profile.step_overhead * c,
        eager_layer_overhead={k: v * c for k, v in profile.eager_layer_overhead.items()},
        collective_overhead=profile.collective_overhead * lat, p2p_overhead=profile.p2p_overhead * lat,
        framework_overhead={k: v * lat for k, v in profile.framework_overhead.items()},
        blocking_call_wait=profile.blocking_call_wait * lat,
        collective_laws={k: (a * lat, bw) for k, (a, bw) in profile.collective_laws.items()})


def predict(record: StepRecord, profile: CalibrationProfile, *, time_shared: bool = True,
            reference: Mapping[str, float] | None = None) -> float:
    """Simulated step time in seconds of one measured plan (with ``reference``: the profile moved
    by the host's drift between its microbenchmarks and the plan, ``drifted``)."""
    prof = plan_profile(record.plan, drifted(profile, drift(record, reference)))
    result = simulate(model_spec(record.model), training_spec(record.model, record.plan),
                      machine_cluster(prof, record.world_size, time_shared=time_shared),
                      parallel_plan(record.plan, overlap=record.device != "cpu"), profile=prof)
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
          statistic: Statistic = "median",
          passes: Mapping[int, Sequence[CalibrationProfile]] | None = None,
          references: Mapping[int, Mapping[str, float]] | None = None) -> list[CheckRow]:
    """Predicted vs measured for every record; ``profiles`` maps a world size to its profile
    (the microbenchmarks run on that many concurrent ranks) or is one profile for all.

    ``passes`` maps a world size to the profiles fitted on each pass of its compute
    microbenchmarks alone: each plan's prediction with every one of them and the median profile
    gives its interval (``CheckRow.predicted_low``/``predicted_high``). ``references`` maps a
    world size to the drift probe measured with its microbenchmarks (``FitReport.probe``): each
    plan is predicted with the profile moved by the host's drift since (``drift``, ``drifted``);
    without it, or for records without probes, the profile as fitted."""
    rows = []
    shared = statistic != "uncontended"  # run delay removed: no sharing
    for r in records:
        prof = profiles if isinstance(profiles, CalibrationProfile) else _for_world(profiles, r.world_size)
        ref = _for_world(references, r.world_size) if references else None
        pred = predict(r, prof, time_shared=shared, reference=ref)
        each = [predict(r, p, time_shared=shared, reference=ref)
                for p in (_for_world(passes, r.world_size) if passes else ())]
        d = drift(r, ref)
        rows.append(CheckRow(plan=r.plan.name, world_size=r.world_size, predicted=pred,
                             measured=measured(r, statistic), spread=r.spread, ci_width=r.ci_width,
                             pass_spread=r.pass_spread,
                             predicted_low=min([pred, *each]) if each else None,
                             predicted_high=max([pred, *each]) if each else None,
                             drift_compute=d.compute, drift_latency=d.latency))
    return rows


def _for_world(profiles: Mapping[int, T], world: int) -> T:
    """The profile of ``world`` ranks, else of the nearest larger (then smaller) world measured."""
    larger = sorted(w for w in profiles if w >= world)
    return profiles[larger[0]] if larger else profiles[max(profiles)]


def _ranks(xs: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of ``xs``, ties sharing their average rank (Spearman's convention)."""
    a = np.asarray(xs, dtype=float)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(1, len(a) + 1)
    for v in np.unique(a):
        tie = a == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def rank_correlation(rows: Sequence[CheckRow]) -> float:
    """Spearman's rank correlation of predicted and measured step times (1: same order).

    The Pearson correlation of the two rank vectors; nan with fewer than 2 rows or when either
    side is all ties."""
    if len(rows) < 2:
        return float("nan")
    p, m = _ranks([r.predicted for r in rows]), _ranks([r.measured for r in rows])
    if p.std() == 0 or m.std() == 0:
        return float("nan")
    return float(np.corrcoef(p, m)[0, 1])


@dataclass(frozen=True, kw_only=True)
class Misorder:
    """Two plans the simulator orders the other way round from the measurement."""

    faster: str
    """The plan measured faster."""
    slower: str
    """The plan measured slower (predicted faster or equal)."""
    measured_gap: float
    """measured(slower) / measured(faster) - 1."""
    within_noise: bool
    """True when that gap is inside the two medians' 95 % intervals (half their widths added)."""


def misordered(rows: Sequence[CheckRow]) -> list[Misorder]:
    """Every pair whose predicted order differs from the measured one (a predicted tie counts)."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            fast, slow = (a, b) if a.measured <= b.measured else (b, a)
            if slow.predicted <= fast.predicted and slow.measured > fast.measured:
                gap = slow.measured / fast.measured - 1.0
                out.append(Misorder(faster=fast.plan, slower=slow.plan, measured_gap=gap,
                                    within_noise=gap <= 0.5 * (fast.ci_width + slow.ci_width)))
    return sorted(out, key=lambda m: -m.measured_gap)


def fastest_gap(rows: Sequence[CheckRow]) -> tuple[str, str, float]:
    """(plan predicted fastest, plan measured fastest, how much slower the first was measured)."""
    pred = min(rows, key=lambda r: r.predicted)
    meas = min(rows, key=lambda r: r.measured)
    return pred.plan, meas.plan, pred.measured / meas.measured - 1.0


def summary(rows: Sequence[CheckRow]) -> dict[str, float]:
    """Median and max |error|, the signed mean error, the rank correlation, the misordered
    pairs and how much slower the predicted-fastest plan was measured than the fastest."""
    errs = np.array([r.error for r in rows])
    return {"median_abs_error": float(np.median(np.abs(errs))), "max_abs_error": float(np.max(np.abs(errs))),
            "mean_error": float(np.mean(errs)), "plans": float(len(rows)),
            "rank_correlation": rank_correlation(rows), "misordered_pairs": float(len(misordered(rows))),
            "fastest_gap": fastest_gap(rows)[2],
            "outside_interval": float(sum(r.outside != 0.0 for r in rows)),
            "with_interval": float(sum(r.predicted_low is not None for r in rows))}
