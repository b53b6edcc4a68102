"""GEMM, expert-GEMM and attention rates by shape on one CUDA GPU (issues 12, 13 and 21).

The simulator prices a GEMM call at ``peak x gemm_eff(FLOP per call)`` (``step/compute.py``) and
a routed expert's grouped GEMM as one GEMM per local expert of the tokens it receives. This
measures both on the GPU the device tool lends (an NVIDIA H200 here), so the one-variable curve
and the per-expert reading can be checked against a real part, shape by shape:

- ``dense``: one bf16 GEMM ``(m x k) @ (k x n)``;
- ``experts_loop``: ``groups`` GEMMs of ``(m x k) @ (k x n)`` issued back to back, as Transformer
  Engine's ``GroupedLinear`` does (one cuBLAS call per expert);
- ``experts_grouped``: the same work in one ``torch._grouped_mm`` call where torch has it;
- ``fp8``: one ``torch._scaled_mm`` e4m3 GEMM (per-tensor scales);
- ``attention``: ``scaled_dot_product_attention`` causal, forward and backward.

Each figure is the median of 7 timed batches of CUDA events after 3 warm-up batches; a batch
repeats the call until it lasts about 20 ms. FLOP: 2 m n k per GEMM; attention 4 b h s^2 d x 0.5
(causal) forward, 3.5x that forward and backward (backward 2.5x forward, FlashAttention-2's count). Usage::

    python3 benchmarks/gpu_gemm_shapes.py OUT.csv

It writes one CSV row per shape as it goes, so a run stopped early keeps what it measured.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F


def _time(fn: Callable[[], object]) -> float:
    """Median seconds per call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, min(2000, int(0.02 / once)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(7):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / inner)
    return statistics.median(samples)


DEV, BF = "cuda", torch.bfloat16
Put = Callable[[str, int, int, int, int, str, float, float], None]
"""Writes one measured shape: (kind, m, n, k, groups, dtype, seconds per call, FLOP of the call)."""


def dense(put: Put) -> None:
    """bf16 GEMMs of the tokens x hidden shapes of transformer layers."""
    for m in (256, 1024, 2048, 4096, 8192, 16384):
        for n, k in ((1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336),
                     (16384, 16384), (28672, 8192), (8192, 28672), (53248, 16384)):
            a, b = torch.randn(m, k, device=DEV, dtype=BF), torch.randn(k, n, device=DEV, dtype=BF)
            put("dense", m, n, k, 1, "bf16", _time(lambda: a @ b), 2.0 * m * n * k)


EXPERTS: dict[str, tuple[int, int, int]] = {
    "qwen3-30b": (2048, 768, 16), "qwen3-235b": (4096, 1536, 16), "gpt-oss": (2880, 2880, 16),
    "deepseek-v3": (7168, 2048, 16), "mixtral": (4096, 14336, 4)}
"""(hidden, expert ffn, experts timed) of Qwen3-30B-A3B, Qwen3-235B-A22B, GPT-OSS-120B, DeepSeek-V3
and Mixtral 8x7B (their config.json); each expert's up GEMM (gate and up fused: 2 x ffn wide)."""


def experts(put: Put) -> None:
    """The routed experts' up GEMMs by tokens per expert: one call per expert, and one grouped call."""
    for name, (hidden, ffn, groups) in EXPERTS.items():
        for m in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
            n, k = 2 * ffn, hidden
            xs = [torch.randn(m, k, device=DEV, dtype=BF) for _ in range(groups)]
            ws = [torch.randn(k, n, device=DEV, dtype=BF) for _ in range(groups)]

            def loop() -> None:
                for x, wt in zip(xs, ws):
                    x @ wt
            put("experts_loop", m, n, k, groups, "bf16", _time(loop), 2.0 * m * n * k * groups)
            if hasattr(torch, "_grouped_mm"):
                try:
                    x = torch.cat(xs)
                    wg = torch.stack([wt.t() for wt in ws]).transpose(1, 2)  # (groups, k, n), column-major
                    offs = torch.arange(1, groups + 1, device=DEV, dtype=torch.int32) * m
                    put("experts_grouped", m, n, k, groups, "bf16",
                        _time(lambda: torch._grouped_mm(x, wg, offs=offs)), 2.0 * m * n * k * groups)
                except Exception as e:  # noqa: BLE001 (a torch without this kernel for the part)
                    print("grouped_mm", name, m, type(e).__name__, e, flush=True)


def fp8(put: Put) -> None:
    """fp8 e4m3 GEMMs with per-tensor scales (``torch._scaled_mm``), where torch has it."""
    if not hasattr(torch, "_scaled_mm"):
        return
    one = torch.tensor(1.0, device=DEV)
    for m in (1024, 4096, 16384):
        for n, k in ((4096, 4096), (8192, 8192), (28672, 8192), (16384, 16384)):
            try:
                a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn).t()
                put("fp8", m, n, k, 1, "fp8_e4m3",
                    _time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=BF)), 2.0 * m * n * k)
            except Exception as e:  # noqa: BLE001
                print("scaled_mm", m, n, k, type(e).__name__, e, flush=True)


def attention(put: Put) -> None:
    """Causal flash attention (SDPA), head dim 128, forward and backward, 16k tokens a call."""
    for s in (1024, 2048, 4096, 8192):
        for heads in (8, 32, 64):
            b = max(1, 16384 // s)
            q, kk, v = (torch.randn(b, heads, s, 128, device=DEV, dtype=BF, requires_grad=True) for _ in range(3))
            g = torch.randn(b, heads, s, 128, device=DEV, dtype=BF)

            def fb() -> None:
                o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
                o.backward(g)
            fwd_flop = 4.0 * b * heads * s * s * 128 * 0.5
            put("attention_fwd_bwd", b * s, heads, s, 1, "bf16", _time(fb), 3.5 * fwd_flop)


def main(out: str) -> None:
    with open(out, "w", newline="") as rows:
        w = csv.writer(rows)
        w.writerow(["kind", "m", "n", "k", "groups", "dtype", "seconds", "flop_per_call", "tflops"])

        def put(kind: str, m: int, n: int, k: int, groups: int, dtype: str, sec: float, flop: float) -> None:
            w.writerow([kind, m, n, k, groups, dtype, f"{sec:.6e}", f"{flop / groups:.6e}", f"{flop / sec / 1e12:.2f}"])
            rows.flush()
            print(kind, m, n, k, groups, dtype, f"{flop / sec / 1e12:.1f} TF/s", flush=True)

        for suite in (dense, experts, fp8, attention):
            suite(put)


if __name__ == "__main__":
    main(sys.argv[1])
