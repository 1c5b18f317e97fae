#!/usr/bin/env bash
# The environment that runs a Triton Inference Server here (python -m engines.build.triton_pytriton):
# NVIDIA's PyTriton, which bundles tritonserver, plus ONNX Runtime, in cache/triton-server.
#
# Its own environment because PyTriton 0.7 needs numpy < 2 (its Python backend stub reads
# numpy 2 arrays as empty), while the project's .venv has numpy 2. The front end's client
# (tritonclient[grpc], the 'triton' extra) lives in .venv. Tests and 'bench triton' find this
# environment by itself (or take $STREAMPUNCT_TRITON_PYTHON) and skip without it.
#   bash scripts/setup_triton_server.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x cache/triton-server/bin/python ]; then
  mkdir -p cache
  "$PY" -m venv cache/triton-server
fi
stamp=cache/triton-server/.streampunct-setup  # as in setup_env.sh: a finished install is not redone
want="$(sha256sum < scripts/setup_triton_server.sh | cut -d' ' -f1)"
if [ -z "${SETUP_FORCE:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup_triton_server: cache/triton-server is ready (SETUP_FORCE=1 installs again)" >&2
  exit 0
fi
rm -f "$stamp"
cache/triton-server/bin/python -m pip install -q --upgrade pip
cache/triton-server/bin/python -m pip install -q "numpy<2" "onnxruntime>=1.18" "nvidia-pytriton==0.7.0"
cache/triton-server/bin/python -c "import numpy, onnxruntime, pytriton; print('triton server env:', 'numpy', numpy.__version__, 'onnxruntime', onnxruntime.__version__)"
echo "$want" > "$stamp"
