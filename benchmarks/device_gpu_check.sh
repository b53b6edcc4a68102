#!/usr/bin/env bash
# The device tool's one prepared GPU check (issues 21 and 13): run from the repository root on a
# lent GPU machine whose python3 has torch with CUDA but not this project's other dependencies.
# The wheels they need, this project's among them, travel in .whl (the README's "On a GPU" paragraph):
#
#   bash benchmarks/device_gpu_check.sh OUT_DIR
#
# 1. GEMM, expert-GEMM, fp8 and attention rates by shape (benchmarks/gpu_gemm_shapes.py; GEMM_LIMIT=0 skips);
# 2. the pass-to-pass jitter of one GPU's compute (benchmarks/gpu_step_jitter.py);
# 3. the torch backend on one GPU (benchmarks/torch_backend_gpu.sh): calibrate measure + check.
# Each part has its own time limit and log, so a failure of one keeps the other's figures.
set -uo pipefail
OUT=${1:?OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SITE=/tmp/clustersim-site
# .whl holds this project's own wheel too (`pip wheel --no-deps -w .whl .` here, before the call):
# the machine's setuptools may be older than pyproject.toml's build requirement.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
  > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=$SITE
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/gpu.txt"
if [ "${GEMM_LIMIT:-150}" != 0 ]; then
  timeout "${GEMM_LIMIT:-150}" python3 benchmarks/gpu_gemm_shapes.py "$OUT/gemm_shapes.csv" > "$OUT/gemm_shapes.log" 2>&1
  echo "gemm shapes rc=$? rows=$(($(wc -l < "$OUT/gemm_shapes.csv") - 1))"
  tail -3 "$OUT/gemm_shapes.log"
fi
timeout "${JITTER_LIMIT:-90}" python3 benchmarks/gpu_step_jitter.py "$OUT/step_jitter.csv" 2>&1 | tee "$OUT/step_jitter.log"
# from /tmp: in the repository root, its clustersim/ folder would shadow the installed namespace
REPO=$PWD
(cd /tmp && CLUSTERSIM=$SITE/bin/clustersim timeout "${TORCH_LIMIT:-330}" bash "$REPO/benchmarks/torch_backend_gpu.sh" \
  /tmp/clustersim-torch-gpu) > "$OUT/torch_gpu.log" 2>&1
echo "torch backend rc=$?"
tar czf "$OUT/torch.tgz" -C /tmp clustersim-torch-gpu 2>/dev/null  # the files come back as one (8 at most)
tail -40 "$OUT/torch_gpu.log"
