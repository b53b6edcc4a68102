"""Which drift correction to trust (issue 21): every round of the check script predicted three ways.

`calibrate check --drift both|compute|none` moves each plan's profile by the drift probes (both:
compute rates and per-call latencies; compute: rates only; none: as fitted). This prints, for
every round and model of a `benchmarks/torch_backend_check.sh OUT` folder, the median and max
|error|, Spearman and the fastest-plan gap of each variant, the bounds met per variant over all
rounds, and the per-plan factors the probes gave (their range over the plans of a round: a host
drift that the interleaved passes spread over every plan should move all plans alike, so a wide
range there is the probe's own noise). Nothing is measured; seconds per round.

    .venv/bin/python benchmarks/torch_drift_variants.py OUT [RUNS]
"""

from __future__ import annotations

import sys
from pathlib import Path

from clustersim.simulator.calibration.fit import fit_profiles
from clustersim.simulator.calibration.torch_backend.check import check, summary
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.calibration.torch_backend.rounds import MODELS, met

VARIANTS = ("both", "compute", "none")


def predict_round(folder: Path, micro: Path, variant: str) -> tuple[dict[str, float], list[tuple[str, float, float, float]]]:
    """(summary, [(plan, error, compute factor, latency factor)]) of one model-round, one variant."""
    reports = fit_profiles(micro)
    refs = {n: {**r.probe, **({"allreduce_s": 0.0} if variant == "compute" else {})}
            for n, r in reports.items() if r.probe} if variant != "none" else {}
    rows = check(load_steps(folder), {n: r.profile for n, r in reports.items()}, references=refs or None)
    return summary(rows), [(r.plan, r.error, r.drift_compute, r.drift_latency) for r in rows]


def main(out: Path, runs: int) -> None:
    verdict = {v: 0 for v in VARIANTS}
    for run in range(1, runs + 1):
        for model in MODELS:
            folder = out / f"run{run}" / model
            micro = out / f"run{run}" / MODELS[0]  # the holdout is predicted with the small GPT's profile
            print(f"round {run} {model}:")
            for v in VARIANTS:
                s, per = predict_round(folder, micro, v)
                verdict[v] += met(s)
                print(f"  --drift {v:7s} median {s['median_abs_error'] * 100:5.1f}%  max {s['max_abs_error'] * 100:5.1f}%  "
                      f"Spearman {s['rank_correlation']:.2f}  fastest gap {s['fastest_gap'] * 100:4.1f}%  "
                      f"{'met' if met(s) else 'not met'}")
                print("      " + ", ".join(f"{p} {e * 100:+.1f}" for p, e, _, _ in per))
                if v == "both":
                    two = [x for x in per if x[0] != "single"]
                    lat = [x[3] for x in two]
                    comp = [x[2] for x in per]
                    print(f"      factors: compute {min(comp):.2f}-{max(comp):.2f}, latency {min(lat):.2f}-{max(lat):.2f} "
                          "(2-rank plans)")
    total = runs * len(MODELS)
    print("bounds met: " + ", ".join(f"--drift {v} {n} of {total}" for v, n in verdict.items()))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
