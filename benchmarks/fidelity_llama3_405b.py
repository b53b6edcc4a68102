"""Out-of-sample fidelity check: the Llama 3 405B pre-training configurations of the Llama 3 paper.

Source ("The Llama 3 Herd of Models", arXiv 2407.21783, Table 4; also Balaji, SC'24): H100 80GB,
16M tokens per batch, TP 8, PP 16, and
- 8,192 GPUs, CP 1, sequence 8,192: 430 TFLOP/s per GPU (43 % BF16 MFU);
- 16,384 GPUs, CP 1, sequence 8,192: 400 TFLOP/s per GPU (41 %);
- 16,384 GPUs, CP 16, sequence 131,072: 380 TFLOP/s per GPU (38 %).
These runs are not in workloads/data/published_runs.csv, so the default profiles were not fitted
on them. The schedule is interleaved (the paper's Fig. 6: virtual stages, rank 0 runs stages 0 and
4 of 8 on 4 ranks); micro-batch and VPP are not published: as in ``clustersim validate``, the fastest
candidate is taken (micro-batch 1 or 2, 2 to 9 interleaved chunks, uneven stages allowed), one that
fits first. Our memory model puts every interleaved candidate above 80 GiB (the chosen VPP 4 plans
97 GiB at sequence 8,192, 84 GiB with CP 16; Meta's implementation is leaner, and plain 1F1B, which
the paper does not run, would fit at 80.0 GiB), so the fit check is lifted and said. The TFLOP/s figure is clustersim's model FLOPs
(PaLM convention, full attention) per second per GPU; the paper does not state its convention.
Run: ``python benchmarks/fidelity_llama3_405b.py`` (~1 minute).
"""

from __future__ import annotations

from dataclasses import replace

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.errors import OutOfMemoryError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.result import Result
from clustersim.topologies import Cluster, get_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model

CASES: tuple[tuple[int, int, int, int, int, float], ...] = (
    (8192, 8, 1, 16, 8192, 430.0),
    (16384, 8, 1, 16, 8192, 400.0),
    (16384, 8, 16, 16, 131072, 380.0),
)
"""(GPUs, tp, cp, pp, sequence length, published TFLOP/s per GPU)."""
BATCH_TOKENS = 16 * 2**20
"""Tokens per step (16M, the paper's batch)."""


def _best(model: ModelSpec, training: TrainingSpec, cluster: Cluster, base: ParallelPlan) -> tuple[ParallelPlan, Result, bool]:
    """The fastest plan over micro-batch and VPP, preferring plans that fit in memory."""
    roomy = replace(cluster, accelerator=replace(cluster.accelerator, hbm_capacity=1e18))
    best: tuple[tuple[bool, float], ParallelPlan, Result, bool] | None = None
    for mb in (1, 2):
        per_pipeline = training.global_batch_size // base.dp // mb
        for vpp in range(2, 10):  # interleaved, as the paper ran (module docstring)
            if base.pp * vpp > model.num_layers or per_pipeline % base.pp:
                continue
            plan = replace(base, micro_batch=mb, vpp=vpp, schedule="interleaved")
            try:
                res, fits = simulate(model, training, cluster, plan, fidelity="analytic"), True
            except OutOfMemoryError:
                res, fits = simulate(model, training, roomy, plan, fidelity="analytic"), False
            key = (not fits, res.step_time)
            if best is None or key < best[0]:
                best = (key, plan, res, fits)
    assert best is not None
    return best[1], best[2], best[3]


def main() -> int:
    model = get_model("llama3-405b")
    print(f"{'configuration':<44s} {'chosen plan':<40s} {'step s':>7s} {'TFLOP/s':>8s} {'paper':>6s} {'error':>7s}")
    for n, tp, cp, pp, seq, published in CASES:
        training = TrainingSpec(seq_len=seq, global_batch_size=BATCH_TOKENS // seq)
        base = ParallelPlan(tp=tp, cp=cp, pp=pp, dp=n // (tp * cp * pp), sp=True, zero=1, tp_comm_overlap=0.5)
        plan, res, fits = _best(model, training, get_cluster("h100", n), base)
        tflops = res.model_flops / res.step_time / n / 1e12
        label = f"{n} H100, TP{tp} CP{cp} PP{pp}, seq {seq}"
        print(f"{label:<44s} {plan.describe() + ('' if fits else ' (mem lifted)'):<40s} {res.step_time:7.2f} "
              f"{tflops:8.0f} {published:6.0f} {(tflops / published - 1) * 100:+6.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
