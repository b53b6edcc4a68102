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
#   K of 7 plans measured outside the profile's own interval ...  <- the predictions with each
#                                                     microbenchmark pass's fit (3 passes by default)
# and a final table: every round, then per model the worst round of each figure and whether every
# round met the bounds (also written to OUT_DIR/summary.json; the script exits 1 when one missed).
# The microbenchmarks run one pass per step pass (PLACEMENT=first: 3 passes before the steps,
# MEASURE_ARGS="--micro-passes N" changes it): at load 8 three of the small GPT's compute passes
# took ~50 s (1 rank) and ~80 s with the sweep (2 ranks), so a round takes longer interleaved.
# A drift probe (a few ms) is sampled between the microbenchmarks and after every timed step;
# each table is followed by the line "host drift by the probes ...": the compute and latency
# factors the check moved each plan's profile by (the default `--drift compute`: rates only; `--drift both`: rates and
# per-call latencies; `--drift none`: as fitted). `benchmarks/torch_drift_variants.py OUT RUNS` prints every round all three ways.
# Run it on a quiet machine (the load is printed before and after, and per plan in the tables).
set -euo pipefail
OUT=${1:-/tmp/clustersim-torch-check}
RUNS=${RUNS:-1}
CS=${CLUSTERSIM:-.venv/bin/clustersim}
# the 2-rank plans timed in interleaved passes (round-robin, order rotated each pass, one untimed
# step before each block): >= 5 passes of 2 timed steps each, more passes until every plan's median
# has a 5 % wide 95 % interval, <= 20 steps a plan or 10 s a plan; each plan's figure is the median
# of its passes' medians (TIMING_ARGS overrides, e.g. TIMING_ARGS="--repeats 2 --repeats-max 2
# --budget 1 --step-passes 2" for a smoke test; --step-passes 1: the plans one after the other)
read -r -a TIMING <<< "${TIMING_ARGS:---repeats 10 --repeats-max 20 --budget 10 --ci-width 0.05 --step-passes 5}"
read -r -a MEASURE <<< "${MEASURE_ARGS:-}"
# where the microbenchmarks the profile is fitted on run (issue 21): "interleaved" (the default) runs
# one pass of them as one more block of every step pass, in the launch, threads and time windows of
# the steps; "first" (PLACEMENT=first) runs 3 passes back to back before any step, the protocol of
# the quiet rounds that predicted every plan fast. Recorded in OUT/protocol.txt and each meta.json.
PLACEMENT=${PLACEMENT:-interleaved}
# the operands of the GEMM/attention/memory microbenchmarks (issue 21): "both" (the default) times
# every shape hot (one operand set, in cache) then cold (cycled through the bytes a rank touches in
# one step of the launch's largest plan) in the same passes; the round is checked with the profile
# fitted on each (OPERANDS_CHECK, cold first: calibrate check's default), the first one's JSON at
# {model}-check.json (what the final table reads), the other's at {model}-check-hot.json: an A/B
# on the same steps.
OPERANDS=${OPERANDS:-both}
read -r -a CHECK_OPERANDS <<< "${OPERANDS_CHECK:-$([ "$OPERANDS" = both ] && echo "cold hot" || echo "$OPERANDS")}"
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
printf 'micro_placement %s\nmicro_operands %s (checked with %s)\ntiming %s\nmeasure %s\n' "$PLACEMENT" "$OPERANDS" \
  "${CHECK_OPERANDS[*]}" "${TIMING[*]}" "${MEASURE[*]:-}" | tee "$OUT/protocol.txt"
echo "load before: $(uptime)"
for run in $(seq 1 "$RUNS"); do
  R="$OUT/run$run"
  rm -rf "$R"
  echo "round $run: $(uptime)"
  "$CS" calibrate measure --out "$R/small" --model small --ranks 1,2 --micro-placement "$PLACEMENT" \
    --micro-operands "$OPERANDS" "${TIMING[@]}" "${MEASURE[@]}"
  "$CS" calibrate measure --out "$R/holdout" --model holdout --ranks 1,2 --quick --micro-placement "$PLACEMENT" \
    --micro-operands "$OPERANDS" "${TIMING[@]}" "${MEASURE[@]}"
  suffix=""
  for ops in "${CHECK_OPERANDS[@]}"; do
    [ "$ops" = "${CHECK_OPERANDS[0]}" ] || suffix="-$ops"
    "$CS" calibrate check "$R/small" --micro-operands "$ops" --json "$R/small-check$suffix.json"
    "$CS" calibrate check "$R/holdout" --micro "$R/small" --micro-operands "$ops" --json "$R/holdout-check$suffix.json"
  done
done
echo "load after: $(uptime)"
# every round predicted with each drift correction (both / compute / none), seconds
"$PY" benchmarks/torch_drift_variants.py "$OUT" "$RUNS" | tee "$OUT/drift_variants.txt" || echo "drift variants: failed (the rounds below are unaffected)"
# per round and overall (the worst round of each figure); exit 1 when a round missed a bound
"$PY" -m clustersim.simulator.calibration.torch_backend.rounds "$OUT" "$RUNS"
