#!/usr/bin/env bash
# A/B of the torch backend's timing protocols in one session (issue 21), rounds alternating so a
# host that drifts over the session hits both alike: A = the defaults (microbenchmarks interleaved
# with the steps' passes, `--micro-placement interleaved`), B = the protocol of the quiet rounds
# before (microbenchmarks first, PLACEMENT=first), and with BLOCKS=1 also C = the block protocol of
# the stop before that (microbenchmarks first, each plan timed in one block: --step-passes 1).
#
#   PAIRS=2 bash benchmarks/torch_protocol_ab.sh /tmp/tbab     # ~4 rounds; each as torch_backend_check.sh
#
# Each round is one `torch_backend_check.sh` round in OUT/{A,B,C}{N}; at the end each variant's
# rounds are printed by the check script's own summary (rounds.py) and the sign of every plan's
# error (the bias the A placement should remove: every plan predicted fast under B).
set -euo pipefail
OUT=${1:-/tmp/clustersim-torch-ab}
PAIRS=${PAIRS:-1}
PY=${PYTHON:-.venv/bin/python}
BASE="--repeats 10 --repeats-max 20 --budget 10 --ci-width 0.05"
variants=(A B)
[ "${BLOCKS:-0}" = 1 ] && variants+=(C)
mkdir -p "$OUT"
for n in $(seq 1 "$PAIRS"); do
  for v in "${variants[@]}"; do
    case $v in
      A) placement=interleaved; timing="$BASE --step-passes 5" ;;
      B) placement=first; timing="$BASE --step-passes 5" ;;
      C) placement=first; timing="$BASE --step-passes 1" ;;
    esac
    # each round into OUT/V{n}/run1 (the check script's layout, so rounds.py reads it)
    PLACEMENT=$placement TIMING_ARGS="$timing" RUNS=1 bash benchmarks/torch_backend_check.sh "$OUT/$v$n" \
      > "$OUT/$v$n.log" 2>&1 || true
    echo "round $v$n ($placement, $timing): $(tail -n 4 "$OUT/$v$n.log" | tr '\n' ' ')"
  done
done
for v in "${variants[@]}"; do
  echo "== variant $v"
  for n in $(seq 1 "$PAIRS"); do
    "$PY" -m clustersim.simulator.calibration.torch_backend.rounds "$OUT/$v$n" 1 || true
    "$PY" - "$OUT/$v$n/run1" <<'PYEOF'
import json, sys
from pathlib import Path
for model in ("small", "holdout"):
    rows = json.loads((Path(sys.argv[1]) / f"{model}-check.json").read_text())["rows"]
    fast = sum(r["predicted"] < r["measured"] for r in rows)
    print(f"{model}: {fast} of {len(rows)} plans predicted fast; errors %: "
          + " ".join(f"{r['plan']} {100 * (r['predicted'] / r['measured'] - 1):+.1f}" for r in rows))
PYEOF
  done
done
