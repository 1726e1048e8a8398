#!/usr/bin/env bash
# The GPU check: one script for a session that is lent one H100 or H200.
#
#   bash benchmarks/gpu_check.sh              # on the GPU: under 8 minutes
#   bash benchmarks/gpu_check.sh --dry-run    # on a CPU: every part, tiny sizes
#
# Prints one table: training tokens/s of the `base` preset in float32,
# mixed_float16 and mixed_bfloat16, without and with XLA, and each one's share
# of the GPU's dense peak FLOP/s (datasheet figures by the name nvidia-smi
# gives; the line above the table says which peak); one device against two
# logical GPUs under MirroredStrategy after 20 updates (passed or FAILED);
# cached greedy and beam-4 decoding in sentences/s; the SavedModel export
# against CTranslate2 (device "cuda") on the same weights. On a GPU it writes
# the results record docs/results/gpu_check.json (--record NAME,
# --record-dir DIR) naming the GPU; a dry run writes one only into a
# --record-dir it is given. Exit status 1 when the two-device check fails,
# 2 without a GPU (and without --dry-run). Details: benchmarks/gpu_check.py.
#
# Python: $PYTHON, else the checkout's .venv, else python3 on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}" KERAS_BACKEND=tensorflow
exec "$PYTHON" benchmarks/gpu_check.py "$@"
