#!/usr/bin/env bash
# The torch backend's headline figure (issue 21): measure every 1- and 2-rank plan of the small
# GPT with real PyTorch (gloo, the cores split over the ranks), fit a profile on its
# microbenchmarks only, predict every plan; then measure a second model size (holdout GPT: 3
# layers, h=320, seq 96) and predict it with the same profile (out of sample). Repeated RUNS times.
#
#   bash benchmarks/torch_backend_check.sh [OUT_DIR]         # one round: 11 min at load 10.5, a few on 2 quiet cores
#   RUNS=3 bash benchmarks/torch_backend_check.sh /tmp/tb     # the acceptance: three rounds in a row
#
# Output per round: the `calibrate check` tables; each ends with the lines
#   median |error| X%, max |error| Y%, ...        <- the error figures
#   rank correlation (Spearman) R; predicted fastest P, measured fastest M (+G% slower than it)
#   N of 21 pairs ordered wrongly: ...
# and a final summary table of every round (also written to OUT_DIR/summary.json).
# Run it on a quiet machine (the load is printed before and after, and per plan in the tables).
set -euo pipefail
OUT=${1:-/tmp/clustersim-torch-check}
RUNS=${RUNS:-1}
CS=${CLUSTERSIM:-.venv/bin/clustersim}
# each plan: >= 10 timed steps, stop at a 5 % wide 95 % interval of the median, <= 30 steps or 10 s
TIMING=(--repeats 10 --repeats-max 30 --budget 10 --ci-width 0.05)
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
echo "load before: $(uptime)"
for run in $(seq 1 "$RUNS"); do
  R="$OUT/run$run"
  rm -rf "$R"
  echo "round $run: $(uptime)"
  "$CS" calibrate measure --out "$R/small" --model small --ranks 1,2 "${TIMING[@]}"
  "$CS" calibrate check "$R/small" --json "$R/small-check.json"
  "$CS" calibrate measure --out "$R/holdout" --model holdout --ranks 1,2 --quick "${TIMING[@]}"
  "$CS" calibrate check "$R/holdout" --micro "$R/small" --json "$R/holdout-check.json"
done
echo "load after: $(uptime)"
"$PY" - "$OUT" "$RUNS" <<'PYEOF'
import json, sys
from pathlib import Path
out, runs = Path(sys.argv[1]), int(sys.argv[2])
rows = []
print(f"{'round':>5} {'model':>8} {'median|err|%':>13} {'max|err|%':>10} {'spearman':>9} {'fastest gap %':>14} {'misordered':>11}  issue-21 bounds")
for run in range(1, runs + 1):
    for model in ("small", "holdout"):
        s = json.loads((out / f"run{run}" / f"{model}-check.json").read_text())["summary"]
        rows.append({"round": run, "model": model, **s})
        print(f"{run:>5} {model:>8} {s['median_abs_error'] * 100:>13.1f} {s['max_abs_error'] * 100:>10.1f} "
              f"{s['rank_correlation']:>9.2f} {s['fastest_gap'] * 100:>14.1f} {int(s['misordered_pairs']):>11}  "
              + ("met" if s["median_abs_error"] <= 0.10 and s["max_abs_error"] <= 0.20 and s["rank_correlation"] >= 0.8
                 and s["fastest_gap"] <= 0.05 else "NOT met"))
print("bounds: median |error| <= 10 %, max <= 20 %, Spearman >= 0.8, predicted-fastest plan within 5 % of the measured fastest")
(out / "summary.json").write_text(json.dumps(rows, indent=1))
PYEOF
