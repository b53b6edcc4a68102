"""The acceptance figures of ``benchmarks/torch_backend_check.sh``: per round and over all rounds.

Owns reading each round's ``calibrate check --json`` summaries (``OUT/run{N}/{model}-check.json``),
the issue-21 bounds (median |error| <= 10 %, max <= 20 %, Spearman >= 0.8, the predicted-fastest
plan within 5 % of the measured fastest), the per-round table and the overall verdict: every round
of every model within the bounds (the worst figure of each over the rounds printed). It measures
nothing and imports no torch.

    python -m clustersim.simulator.calibration.torch_backend.rounds OUT RUNS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from clustersim.files import write_json

MODELS: tuple[str, ...] = ("small", "holdout")
"""The model sizes each round measures (the second predicted with the first's profile)."""

BOUNDS: Mapping[str, float] = {"median_abs_error": 0.10, "max_abs_error": 0.20, "rank_correlation": 0.8,
                               "fastest_gap": 0.05}
"""Issue 21's acceptance: upper bounds on the errors and the fastest-plan gap, lower on Spearman."""


def met(summary: Mapping[str, float]) -> bool:
    """Whether one model-round is within every bound (a nan Spearman is not)."""
    return (summary["median_abs_error"] <= BOUNDS["median_abs_error"]
            and summary["max_abs_error"] <= BOUNDS["max_abs_error"]
            and summary["rank_correlation"] >= BOUNDS["rank_correlation"]
            and summary["fastest_gap"] <= BOUNDS["fastest_gap"])


def load_rounds(out: Path, runs: int) -> list[dict[str, object]]:
    """One row per (round, model): its ``calibrate check`` summary and whether it met the bounds."""
    rows: list[dict[str, object]] = []
    for run in range(1, runs + 1):
        for model in MODELS:
            path = out / f"run{run}" / f"{model}-check.json"
            if not path.exists():
                raise FileNotFoundError(f"round {run}: {path} missing; did `calibrate check --json` run?")
            s = {k: float(v) for k, v in json.loads(path.read_text())["summary"].items()}
            rows.append({"round": run, "model": model, **s, "met": met(s)})
    return rows


def overall(rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Per model over all rounds: the worst of each figure and whether every round met the bounds."""
    out = []
    for model in MODELS:
        mine = [r for r in rows if r["model"] == model]
        if not mine:
            continue

        def col(key: str) -> list[float]:
            return [float(r[key]) for r in mine]  # type: ignore[arg-type]  # figures stored as floats by load_rounds

        out.append({"model": model, "rounds": len(mine), "median_abs_error": max(col("median_abs_error")),
                    "max_abs_error": max(col("max_abs_error")), "rank_correlation": min(col("rank_correlation")),
                    "fastest_gap": max(col("fastest_gap")), "misordered_pairs": max(col("misordered_pairs")),
                    "outside_interval": max(float(r.get("outside_interval", 0.0)) for r in mine),  # type: ignore[arg-type]
                    "met_every_round": all(bool(r["met"]) for r in mine)})
    return out


def table(rows: Sequence[Mapping[str, object]], totals: Sequence[Mapping[str, object]]) -> str:
    """The per-round rows, then one overall row per model (worst figure over the rounds)."""
    head = (f"{'round':>7} {'model':>8} {'median|err|%':>13} {'max|err|%':>10} {'spearman':>9} "
            f"{'fastest gap %':>14} {'misordered':>11} {'outside':>8}  issue-21 bounds")
    lines = [head]
    for r in [*rows, *({**t, "round": "all"} for t in totals)]:
        ok = r.get("met", r.get("met_every_round"))
        lines.append(f"{r['round']!s:>7} {r['model']!s:>8} {float(r['median_abs_error']) * 100:>13.1f} "  # type: ignore[arg-type]
                     f"{float(r['max_abs_error']) * 100:>10.1f} {float(r['rank_correlation']):>9.2f} "  # type: ignore[arg-type]
                     f"{float(r['fastest_gap']) * 100:>14.1f} {int(float(r['misordered_pairs'])):>11} "  # type: ignore[arg-type]
                     f"{int(float(r.get('outside_interval', 0.0))):>8}  "  # type: ignore[arg-type]
                     + ("met" if ok else "NOT met"))
    verdict = all(bool(t["met_every_round"]) for t in totals) and bool(totals)
    n = max((int(t["rounds"]) for t in totals), default=0)  # type: ignore[call-overload]
    lines.append("bounds: median |error| <= 10 %, max <= 20 %, Spearman >= 0.8, predicted-fastest plan "
                 "within 5 % of the measured fastest; outside: plans measured outside the profile's own interval "
                 "(the predictions with each compute pass's fit; not a bound)")
    lines.append(f"overall ({n} rounds, 'all' rows: the worst round of each figure): "
                 + ("every round of every model met the bounds" if verdict else "NOT met"))
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Print the table of ``OUT`` (``RUNS`` rounds) and write ``OUT/summary.json``; exit 0 when met."""
    if len(argv) != 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        print("usage: python -m clustersim.simulator.calibration.torch_backend.rounds OUT RUNS (RUNS >= 1)",
              file=sys.stderr)
        return 2
    out, runs = Path(argv[0]), int(argv[1])
    try:
        rows = load_rounds(out, runs)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    totals = overall(rows)
    print(table(rows, totals))
    write_json(out / "summary.json", {"rounds": rows, "overall": totals})
    return 0 if all(bool(t["met_every_round"]) for t in totals) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
