"""Torch-free descriptions of what the backend runs: the GPT shape, the plan, the timing recipe.

Owns the frozen specs that travel (as JSON) from the launcher to every rank and back into the
records written under ``calibrate measure --out DIR``. It does not import torch and does not run
anything; ``runners`` turns these specs into modules and steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

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
    """How steps are timed: warm-up steps are run and dropped, then ``repeats`` are timed."""

    warmup: int = 2
    """Untimed steps first (allocator, autograd graph, gloo connections)."""
    repeats: int = 5
    """Timed steps; the step time is the median over them of the slowest rank."""
    threads_per_rank: int = 1
    """torch intra-op threads per rank (1 when ranks share the cores)."""
    profile_dir: str = ""
    """When set, one extra step per plan is traced with torch.profiler into this folder."""


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

    @property
    def median(self) -> float:
        """Median step time in seconds."""
        s = sorted(self.step_times)
        n = len(s)
        return 0.5 * (s[(n - 1) // 2] + s[n // 2])

    @property
    def best(self) -> float:
        """Fastest timed step in seconds (the least disturbed by other processes on the host)."""
        return min(self.step_times)

    @property
    def uncontended(self) -> float:
        """Median over steps of (step time - run delay): the step with other processes' CPU time taken out."""
        if len(self.run_delays) != len(self.step_times):
            return self.median
        s = sorted(t - d for t, d in zip(self.step_times, self.run_delays))
        return 0.5 * (s[(len(s) - 1) // 2] + s[len(s) // 2])

    @property
    def contention(self) -> float:
        """Median run delay / median step time: the share of the step the OS withheld a CPU."""
        if not self.run_delays:
            return 0.0
        d = sorted(self.run_delays)
        return 0.5 * (d[(len(d) - 1) // 2] + d[len(d) // 2]) / self.median

    @property
    def spread(self) -> float:
        """(max - min) / median over the timed steps."""
        return (max(self.step_times) - min(self.step_times)) / self.median

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {**asdict(self), "median_s": self.median, "best_s": self.best, "spread": self.spread,
                "uncontended_s": self.uncontended, "contention": self.contention}


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
    )
