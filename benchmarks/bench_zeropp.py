"""ZeRO++ against ZeRO-3: what each switch buys as the network narrows (``step/zeropp.py``).

Llama 3 70B, ZeRO-3 (tp 1, pp 1, full recompute, micro-batch 1, GBS 512 x 4096) on 64 and 256
DGX H100 GPUs with the datasheet NICs (400 Gb/s per GPU) and with 100 Gb/s per node (12.5 Gb/s
per GPU, the low-bandwidth setting ZeRO++ was built for), static pricing, default profile; for
ZeRO-3 and each of qwZ, hpZ (a node's 8 ranks), qgZ and all three: the step, the exposed DP time,
the peak memory per GPU and the simulate wall time. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/bench_zeropp.py
"""

from __future__ import annotations

import os
import time

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.units import GBIT, GIB
from clustersim.workloads import TrainingSpec, get_model

VARIANTS: dict[str, dict[str, object]] = {
    "ZeRO-3": {}, "+qwZ": {"zero_quantized_weights": True}, "+hpZ8": {"zero_hpz_partition_size": 8},
    "+qgZ": {"zero_quantized_gradients": True},
    "ZeRO++": {"zero_quantized_weights": True, "zero_hpz_partition_size": 8, "zero_quantized_gradients": True},
}


def main() -> None:
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    model = get_model("llama3-70b")
    training = TrainingSpec(seq_len=4096, global_batch_size=512, precision="bf16")
    print(f"{'gpus':>5} {'NIC/GPU':>8} {'variant':>7} {'step_s':>8} {'exposed_dp_s':>12} {'vs ZeRO-3':>9} "
          f"{'mem_GiB':>8} {'wall_s':>7}")
    for gpus in (64, 256):
        for nic_gbps in (400.0, 12.5):
            cluster = get_cluster("dgx-h100", gpus, nic_bandwidth=nic_gbps * GBIT)
            base = None
            for name, extra in VARIANTS.items():
                plan = ParallelPlan(tp=1, pp=1, dp=gpus, zero=3, micro_batch=1, recompute="full", **extra)  # type: ignore[arg-type]
                t0 = time.perf_counter()
                r = simulate(model, training, cluster, plan)
                wall = time.perf_counter() - t0
                base = base or r.step_time
                print(f"{gpus:>5} {nic_gbps:>8g} {name:>7} {r.step_time:>8.3f} {r.breakdown['exposed_dp']:>12.3f} "
                      f"{r.step_time / base:>9.3f} {r.peak_memory / GIB:>8.1f} {wall:>7.2f}")


if __name__ == "__main__":
    main()
