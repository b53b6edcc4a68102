#!/usr/bin/env bash
# The torch backend on one CUDA GPU (issue 21, item 5): NCCL backend, single-rank plan and the
# compute microbenchmarks, fitted and predicted, in a few minutes. Run it on a machine with a GPU
# and torch with CUDA (`pip install torch==2.13.0` from the CUDA index, then `pip install -e '.[torch]'`):
#
#   bash benchmarks/torch_backend_gpu.sh [OUT_DIR]
#
# With one GPU only 1-rank plans run (collectives need 2 ranks); the model is widened so the GPU
# is not all launch overhead. The check prints the same error/ranking lines as on CPU. Two sizes
# besides the one the profile is fitted on are predicted with its profile (out of sample): the
# holdout GPT and a wider, deeper one whose step is ~10x the small one's.
set -euo pipefail
OUT=${1:-/tmp/clustersim-torch-gpu}
CS=${CLUSTERSIM:-.venv/bin/clustersim}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
rm -rf "$OUT"
"$CS" calibrate measure --out "$OUT/small" --model small --ranks 1 --hidden 1024 --heads 16 --seq 512 --timeout 500
"$CS" calibrate check "$OUT/small" --json "$OUT/small-check.json"
"$CS" calibrate measure --out "$OUT/holdout" --model holdout --ranks 1 --hidden 1280 --heads 20 --seq 384 --quick --timeout 500
"$CS" calibrate check "$OUT/holdout" --micro "$OUT/small" --json "$OUT/holdout-check.json"
"$CS" calibrate measure --out "$OUT/wide" --model holdout --ranks 1 --layers 6 --hidden 2048 --heads 16 --seq 1024 --quick --timeout 500
"$CS" calibrate check "$OUT/wide" --micro "$OUT/small" --json "$OUT/wide-check.json"
