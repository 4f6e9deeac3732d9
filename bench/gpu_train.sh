#!/usr/bin/env bash
# Training on an NVIDIA GPU without TensorFlow: the demo and the summarization recipe under
# JAX for a fixed number of steps each, timed (bench.gpu_train), model.keras saved for export on
# a CPU machine. For a machine with JAX's CUDA build and no package registry: Keras and what it
# needs beyond JAX come from a folder of wheels when they are missing.
#
#   bash bench/gpu_train.sh WHEELS_DIR [STEPS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${1:?usage: bash bench/gpu_train.sh WHEELS_DIR [STEPS] [OUT]}
steps=${2:-300}
out=${3:-runs/gpu}
python=${PYTHON:-python3}
if ! "$python" -c "import keras, optree, namex" 2>/dev/null; then
  if [ ! -d "$wheels" ]; then
    echo "error: Keras is not installed and $wheels is not a folder of wheels (keras, optree, namex)" >&2
    exit 2
  fi
  "$python" -m pip install --quiet --no-index --find-links "$wheels" keras optree namex
fi
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=2
"$python" -m bench.gpu_train --require-gpu --config train/configs/demo.yaml --steps "$steps" \
  --out "$out/demo" --overwrite
if [ -f ../shared/data/vietnews/train.tsv.gz ] || [ -n "${KT_DATA_DIR:-}" ]; then
  "$python" -m bench.gpu_train --require-gpu --config train/configs/vietnews_summarization.yaml \
    --steps "$steps" --out "$out/vietnews_summarization" --overwrite
else
  echo "vietnews_summarization skipped: its data (../shared/data or KT_DATA_DIR) is absent" >&2
fi
