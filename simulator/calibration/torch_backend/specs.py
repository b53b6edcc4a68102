"""Torch-free descriptions of what the backend runs: the GPT shape, the plan, the timing recipe.

Owns the frozen specs that travel (as JSON) from the launcher to every rank and back into the
records written under ``calibrate measure --out DIR``. It does not import torch and does not run
anything; ``runners`` turns these specs into modules and steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Mapping

from clustersim.simulator.calibration.torch_backend import stats
from clustersim.simulator.errors import CalibrationError

Schedule = Literal["gpipe", "1f1b"]
DataParallel = Literal["none", "ddp", "fsdp"]


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """A small decoder-only GPT (pre-norm, GELU MLP, untied head, no positional embedding)."""

    num_layers: int = 2
    """Transformer blocks."""
    hidden_size: int = 128
    """Model width h."""
    num_heads: int = 4
    """Attention heads (head_dim = hidden_size / num_heads)."""
    seq_len: int = 64
    """Tokens per sequence."""
    vocab_size: int = 512
    """Vocabulary (embedding rows and output columns)."""
    ffn_mult: int = 4
    """MLP width as a multiple of hidden_size."""

    @property
    def ffn_hidden_size(self) -> int:
        """MLP inner width."""
        return self.ffn_mult * self.hidden_size

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise CalibrationError(
                f"GPTConfig.hidden_size {self.hidden_size} is not divisible by num_heads "
                f"{self.num_heads}; pick heads that divide the width"
            )


@dataclass(frozen=True, kw_only=True)
class BackendPlan:
    """One parallel plan the backend runs for real; degrees multiply to the world size."""

    name: str
    """Label used in tables and file names."""
    dp: int = 1
    """Data-parallel degree."""
    tp: int = 1
    """Tensor-parallel degree (torch.distributed.tensor.parallel)."""
    pp: int = 1
    """Pipeline stages (torch.distributed.pipelining)."""
    sp: bool = False
    """Sequence parallel on the norms (needs tp > 1)."""
    data_parallel: DataParallel = "ddp"
    """How the dp axis is run: DDP or FSDP2 ``fully_shard`` ("none" only when dp == 1)."""
    schedule: Schedule = "gpipe"
    """Pipeline schedule when pp > 1."""
    global_batch: int = 8
    """Sequences per optimizer step, over all replicas."""
    micro_batches: int = 1
    """Micro-batches per replica per step (pipeline micro-batching when pp > 1)."""

    @property
    def world_size(self) -> int:
        """Ranks the plan needs."""
        return self.dp * self.tp * self.pp

    @property
    def micro_batch(self) -> int:
        """Sequences per micro-batch on one replica."""
        return self.global_batch // (self.dp * self.micro_batches)

    def __post_init__(self) -> None:
        per = self.dp * self.micro_batches
        if self.global_batch % per:
            raise CalibrationError(
                f"plan {self.name}: global_batch {self.global_batch} is not divisible by "
                f"dp({self.dp}) * micro_batches({self.micro_batches}) = {per}"
            )
        if self.sp and self.tp < 2:
            raise CalibrationError(f"plan {self.name}: sp=True needs tp >= 2, got tp={self.tp}")
        if self.pp > 1 and self.micro_batches < self.pp and self.schedule == "1f1b":
            raise CalibrationError(
                f"plan {self.name}: 1f1b needs micro_batches >= pp, got {self.micro_batches} < {self.pp}"
            )


@dataclass(frozen=True, kw_only=True)
class TimingRecipe:
    """How steps and microbenchmarks are timed: warm up until settled, repeat until the median is known.

    Warm-up runs at least ``warmup`` untimed steps and stops once the last ``settle_window`` lie
    within ``settle_tolerance`` of their median (or at ``warmup_max``). Timed repeats run at least
    ``repeats`` and stop once the 95 % interval of the median is within ``ci_width`` of it (or at
    ``repeats_max``, or after ``budget_s`` seconds of timed steps). Every decision is taken on
    figures all-reduced over the ranks, so all ranks stop together.
    """

    warmup: int = 2
    """Minimum untimed steps first (allocator, autograd graph, gloo connections); the losses of
    these first steps are recorded for the cross-plan loss check."""
    warmup_max: int = 10
    """Cap on warm-up steps when the step time does not settle."""
    settle_window: int = 3
    """Warm-up steps that must agree for the warm-up to count as settled."""
    settle_tolerance: float = 0.10
    """Relative distance from their median within which those steps must lie."""
    repeats: int = 5
    """Minimum timed steps (and samples per microbenchmark)."""
    repeats_max: int = 30
    """Cap on timed steps (and samples per microbenchmark)."""
    ci_width: float = 0.05
    """Target (upper - lower) / median of the median's 95 % interval (distribution-free)."""
    budget_s: float = 60.0
    """Seconds of timed steps per plan after which repeating stops (past the minimum)."""
    threads_per_rank: int = 0
    """torch intra-op threads per rank; 0: the host's cores split evenly over the ranks
    (1 rank: every core; 2 ranks on 2 cores: one each)."""
    interop_threads: int = 1
    """torch inter-op threads per rank (1: no second pool competing for the rank's cores)."""
    pin_cores: bool = True
    """Bind each rank to its own cores (``os.sched_setaffinity``, Linux) so ranks do not migrate."""
    profile_dir: str = ""
    """When set, one extra step per plan is traced with torch.profiler into this folder."""
    step_passes: int = 3
    """Interleaved passes over the plans of one launch (``runners.time_interleaved``): every plan
    is built and warmed up, then each pass times ``stats.pass_steps(repeats, step_passes)`` steps
    of every plan in turn (the order rotated each pass), at least ``step_passes`` passes and until
    the stop rule holds for every plan; each plan's step time is the median of its passes' medians,
    so a host state that lasts a while slows every plan alike instead of the plans that ran
    during it. 1: the plans one after the other, each timed in one block (the protocol before)."""
    rewarm: int = 1
    """Untimed steps of a plan before each of its interleaved blocks (the plan's first step after
    other plans ran pays for its memory and gloo's threads going cold; the steady state does not)."""

    def __post_init__(self) -> None:
        checks = {"warmup": self.warmup >= 1, "warmup_max": self.warmup_max >= self.warmup,
                  "settle_window": self.settle_window >= 1, "settle_tolerance": self.settle_tolerance > 0,
                  "repeats": self.repeats >= 1, "repeats_max": self.repeats_max >= self.repeats,
                  "ci_width": self.ci_width > 0, "budget_s": self.budget_s > 0,
                  "threads_per_rank": self.threads_per_rank >= 0, "interop_threads": self.interop_threads >= 1,
                  "step_passes": 1 <= self.step_passes <= self.repeats_max, "rewarm": self.rewarm >= 0}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise CalibrationError(f"timing {bad[0]} = {getattr(self, bad[0])!r} is out of range: warmup >= 1, "
                                   "warmup_max >= warmup, repeats >= 1, repeats_max >= repeats, widths, "
                                   "tolerances and budgets > 0, threads >= 0, 1 <= step_passes <= repeats_max, "
                                   "rewarm >= 0")

    def for_world(self, world_size: int, cores: int) -> "TimingRecipe":
        """This recipe with ``threads_per_rank`` resolved for ``world_size`` ranks on ``cores``."""
        if self.threads_per_rank:
            return self
        return replace(self, threads_per_rank=max(1, cores // world_size))


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """The measured step time of one plan (what ``calibrate check`` compares against)."""

    plan: BackendPlan
    """The plan that ran."""
    model: GPTConfig
    """The GPT it trained."""
    world_size: int
    """Ranks that ran it."""
    backend: str
    """torch.distributed backend (gloo or nccl)."""
    device: str
    """cpu or cuda."""
    step_times: tuple[float, ...] = field(default_factory=tuple)
    """Seconds per timed step, the slowest rank of each step."""
    run_delays: tuple[float, ...] = field(default_factory=tuple)
    """Seconds of each timed step the most delayed rank waited for a CPU (Linux schedstat)."""
    warmup_losses: tuple[float, ...] = field(default_factory=tuple)
    """Global mean training loss of each warm-up step (same init and data for every plan, so
    every plan's losses must match the 1-rank baseline's: a check that the sharding is right)."""
    warmup_steps: int = 0
    """Untimed steps run before timing began (until the step time settled); 0 when not recorded."""
    threads_per_rank: int = 0
    """torch intra-op threads each rank ran with; 0 when not recorded."""
    load_average: float = -1.0
    """The host's 1-minute load average when the plan started (-1 when not recorded): other
    processes' demand on the cores, to judge the figures by."""
    probes: tuple[Mapping[str, float], ...] = field(default_factory=tuple)
    """The host's drift probe (``microbench.probe_sample``: ``gemm_s``, ``allreduce_s``), one sample
    after each timed step; empty when not recorded."""
    pass_index: tuple[int, ...] = field(default_factory=tuple)
    """The interleaved pass (0-based) each timed step ran in; empty for a plan timed in one block."""

    @property
    def pass_medians(self) -> list[float]:
        """Median step time of each interleaved pass (seconds); the one block's median without passes."""
        if len(self.pass_index) != len(self.step_times) or not self.pass_index:
            return [stats.median(self.step_times)]
        return stats.pass_medians(self.step_times, self.pass_index)

    @property
    def pass_spread(self) -> float:
        """(max - min) / median of the passes' medians: how far the host moved this plan between
        passes (0 with one pass)."""
        meds = self.pass_medians
        return (max(meds) - min(meds)) / stats.median(meds)

    @property
    def median(self) -> float:
        """Median step time in seconds: the median of the interleaved passes' medians (so a pass
        that one host state slowed moves it no more than one pass), else of the timed steps."""
        return stats.median(self.pass_medians)

    @property
    def ci(self) -> tuple[float, float]:
        """95 % distribution-free interval of the median step time (seconds)."""
        return stats.median_ci(self.step_times)

    @property
    def ci_width(self) -> float:
        """(upper - lower) / median of that interval."""
        return stats.ci_relative_width(self.step_times)

    @property
    def best(self) -> float:
        """Fastest timed step in seconds (the least disturbed by other processes on the host)."""
        return min(self.step_times)

    @property
    def uncontended(self) -> float:
        """Median over steps of (step time - run delay): the step with other processes' CPU time taken out."""
        if len(self.run_delays) != len(self.step_times):
            return self.median
        return stats.median([t - d for t, d in zip(self.step_times, self.run_delays)])

    @property
    def contention(self) -> float:
        """Median run delay / median step time: the share of the step the OS withheld a CPU."""
        if not self.run_delays:
            return 0.0
        return stats.median(self.run_delays) / self.median

    @property
    def spread(self) -> float:
        """(max - min) / median over the timed steps."""
        return (max(self.step_times) - min(self.step_times)) / self.median

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        lo, hi = self.ci
        return {**asdict(self), "median_s": self.median, "best_s": self.best, "spread": self.spread,
                "ci_low_s": lo, "ci_high_s": hi, "uncontended_s": self.uncontended, "contention": self.contention,
                "pass_medians_s": self.pass_medians, "pass_spread": self.pass_spread}


def record_from_dict(data: Mapping[str, Any]) -> StepRecord:
    """Inverse of ``StepRecord.to_dict`` (derived keys ignored)."""
    return StepRecord(
        plan=BackendPlan(**data["plan"]),
        model=GPTConfig(**data["model"]),
        world_size=int(data["world_size"]),
        backend=str(data["backend"]),
        device=str(data["device"]),
        step_times=tuple(float(t) for t in data["step_times"]),
        run_delays=tuple(float(t) for t in data.get("run_delays", ())),
        warmup_losses=tuple(float(t) for t in data.get("warmup_losses", ())),
        warmup_steps=int(data.get("warmup_steps", 0)),
        threads_per_rank=int(data.get("threads_per_rank", 0)),
        load_average=float(data.get("load_average", -1.0)),
        probes=tuple({str(k): float(v) for k, v in pr.items()} for pr in data.get("probes", ())),
        pass_index=tuple(int(k) for k in data.get("pass_index", ())),
    )
