"""Many plans at once as numpy columns, and ``check_plan``'s rules over them.

Owns ``PlanColumns`` (the fields a plan search varies: degrees, micro-batch, schedule, recompute,
ZeRO/FSDP, one integer array each; every other field of ``ParallelPlan`` at its default) and
``columns_valid``, the array form of ``checks.check_plan`` for such plans: one boolean per plan,
True exactly where ``check_plan`` raises nothing (a test holds the two equal over search grids
and over a product of good and bad values of every column). Rules about fields held at their
defaults (types, buckets, overlaps, offloading, recompute modules and layers, layer splits, the
rank order, dp_shard) pass for every such plan and are not repeated here. It builds a
``ParallelPlan`` only when asked for one row (``plan``); it prices nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from clustersim.simulator.plan.checks import tp_split_sizes
from clustersim.simulator.plan.plan import RECOMPUTES, SCHEDULES, ParallelPlan
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec

FSDPS: tuple[str, ...] = ("none", "full", "hybrid")
"""``ParallelPlan.fsdp`` spellings, in the order of their codes in ``PlanColumns.fsdp``."""
_DEFAULT = ParallelPlan()


@dataclass(frozen=True)
class PlanColumns:
    """Plans as columns, one row per plan; a plan's other fields hold ``ParallelPlan``'s defaults."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    micro_batch: np.ndarray
    sp: np.ndarray
    """Sequence parallelism (bool)."""
    schedule: np.ndarray
    """Index into ``plan.SCHEDULES``."""
    recompute: np.ndarray
    """Index into ``plan.RECOMPUTES``."""
    zero: np.ndarray
    fsdp: np.ndarray
    """Index into ``FSDPS``."""

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, rows: np.ndarray) -> PlanColumns:
        """The plans at ``rows`` (indices or a boolean mask), in that order."""
        return PlanColumns(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def plan(self, i: int) -> ParallelPlan:
        """Row ``i`` as a ``ParallelPlan``."""
        return ParallelPlan(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), cp=int(self.cp[i]), ep=int(self.ep[i]),
            vpp=int(self.vpp[i]), micro_batch=int(self.micro_batch[i]), sp=bool(self.sp[i]),
            schedule=SCHEDULES[int(self.schedule[i])], recompute=RECOMPUTES[int(self.recompute[i])],  # type: ignore[arg-type]
            zero=int(self.zero[i]), fsdp=FSDPS[int(self.fsdp[i])])  # type: ignore[arg-type]

    def plans(self) -> list[ParallelPlan]:
        """Every row as a ``ParallelPlan``, in order."""
        return [self.plan(i) for i in range(len(self))]


def plan_columns(rows: Sequence[tuple[int, ...]]) -> PlanColumns:
    """Columns from rows of (tp, pp, dp, cp, ep, vpp, micro_batch, sp, schedule, recompute, zero, fsdp) codes."""
    table = np.array(rows, dtype=np.int64).reshape(-1, 12)
    (tp, pp, dp, cp, ep, vpp, mb, sp, schedule, recompute, zero, fsdp) = table.T
    return PlanColumns(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=mb, sp=sp.astype(bool),
                       schedule=schedule, recompute=recompute, zero=zero, fsdp=fsdp)


def columns_valid(model: ModelSpec, training: TrainingSpec, cluster: Cluster, c: PlanColumns) -> np.ndarray:
    """True for each plan that ``check_plan`` accepts, rule by rule as ``checks`` states them."""
    ok: np.ndarray = _values(c) & (c.dp * c.tp * c.pp * c.cp == cluster.num_gpus)
    for rule in (_tp(model, c), _pp(model, c), _batch(training, c), _cp(training, c), _ep(model, c), _sharding(c)):
        ok &= rule
    return ok


def _code(names: tuple[str, ...], name: str) -> int:
    return names.index(name)


def _values(c: PlanColumns) -> np.ndarray:
    """``checks._check_values`` on the columns: positive degrees, known codes, ZeRO 0..3."""
    ok: np.ndarray = np.ones(len(c), dtype=bool)
    for x in (c.tp, c.pp, c.dp, c.cp, c.ep, c.vpp, c.micro_batch):
        ok &= x >= 1
    for x, names in ((c.schedule, SCHEDULES), (c.recompute, RECOMPUTES), (c.fsdp, FSDPS)):
        ok &= (x >= 0) & (x < len(names))
    return ok & (c.zero >= 0) & (c.zero <= 3)


def _tp(model: ModelSpec, c: PlanColumns) -> np.ndarray:
    """``checks._check_tp``: tp divides the heads, the FFN and ``checks.tp_split_sizes``; tp and the KV heads
    divide one another."""
    tp, kv = np.maximum(c.tp, 1), model.num_kv_heads
    ok: np.ndarray = (model.num_heads % tp == 0) & ((kv % tp == 0) | (tp % kv == 0)) & (model.ffn_hidden_size % tp == 0)
    for _, value in tp_split_sizes(model):
        ok &= value % tp == 0
    return ok


def _pp(model: ModelSpec, c: PlanColumns) -> np.ndarray:
    """``checks._check_pp`` (no layer split): chunks within the layers, vpp with interleaved only, even pp for DualPipe."""
    dualpipe, interleaved = c.schedule == _code(SCHEDULES, "dualpipe"), c.schedule == _code(SCHEDULES, "interleaved")
    chunks = np.where(dualpipe, c.pp, c.pp * c.vpp)  # schedules.num_model_chunks
    ok: np.ndarray = ((chunks <= model.num_layers) & ((c.vpp <= 1) | interleaved) & (~interleaved | (c.vpp >= 2))
                      & (~dualpipe | (c.pp % 2 == 0)))
    return ok


def _batch(training: TrainingSpec, c: PlanColumns) -> np.ndarray:
    """``checks._check_batch``: whole micro-batches; interleaved needs a multiple of pp, DualPipe an even m >= 2pp."""
    per_step = np.maximum(c.dp * c.micro_batch, 1)
    m = training.global_batch_size // per_step
    interleaved, dualpipe = c.schedule == _code(SCHEDULES, "interleaved"), c.schedule == _code(SCHEDULES, "dualpipe")
    ok: np.ndarray = ((training.global_batch_size % per_step == 0) & (~interleaved | (m % np.maximum(c.pp, 1) == 0))
                      & (~dualpipe | ((m >= 2 * c.pp) & (m % 2 == 0))))
    return ok


def _cp(training: TrainingSpec, c: PlanColumns) -> np.ndarray:
    """``checks._check_cp``: load-balanced causal chunks, seq_len divisible by 2 cp."""
    ok: np.ndarray = (c.cp <= 1) | (training.seq_len % np.maximum(2 * c.cp, 1) == 0)
    return ok


def _ep(model: ModelSpec, c: PlanColumns) -> np.ndarray:
    """``checks._check_ep`` with etp 1 and the default order (pp last): experts only in MoE models, ep
    dividing the experts and tp * cp * dp."""
    etp = _DEFAULT.etp
    if not model.is_moe:
        dense_only: np.ndarray = (c.ep == 1) & (etp == 1)
        return dense_only
    ep = np.maximum(c.ep, 1)
    ffn = model.moe_ffn_hidden_size
    ok: np.ndarray = ((model.num_experts % ep == 0) & ((c.tp * c.cp * c.dp) % (ep * etp) == 0)
                      & (not ffn or ffn % etp == 0))
    ok |= (c.ep == 1) & (etp == 1)
    return ok


def _sharding(c: PlanColumns) -> np.ndarray:
    """``checks._check_sharding`` (dp_shard unset): FSDP already shards like ZeRO-3, so only ZeRO 0 or 3 with it."""
    ok: np.ndarray = (c.fsdp == _code(FSDPS, "none")) | (c.zero == 0) | (c.zero == 3)
    return ok
