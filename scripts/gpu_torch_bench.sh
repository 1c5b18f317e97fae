#!/usr/bin/env bash
# The torch serving backend on a lent GPU (issue 37, item 5): its GPU tests, its tokens/s, and
# `bench load` (real-time sessions at p95 finalize margin <= 100 ms) for models/default and
# models/base, each result with the device's name. Nothing downloads there (its image has torch,
# transformers, onnx, onnxruntime, tokenizers, prometheus-client, psutil; websockets travels as a
# wheel) and at most 64 MiB travel per call, while models/ alone is ~107 MiB (models/base's int4
# graph 65.4 MiB). So, as scripts/gpu_release.sh does:
#
#   bash scripts/gpu_torch_bench.sh prepare   # here: .gpuS1/ (models/default, its graphs gzipped;
#                                             # the first part of models/base's graph; the wheel)
#                                             # and .gpuS2/ (the rest of models/base); models/ is
#                                             # moved aside to /tmp/models_hold_torch so that the
#                                             # working tree travels under the limit
#   device run, carry [".gpuS1"], timeout_s 600: bash scripts/gpu_torch_bench.sh a
#       GPU tests of the backend (fp16 on CUDA against ONNX Runtime fp32), tokens/s and bench load
#       of models/default; keeps models/base's first part on the machine
#   device run at once (the machine stays warm 30 s), carry [".gpuS2"], timeout_s 600:
#       bash scripts/gpu_torch_bench.sh b      # models/base: tokens/s and bench load
#   bash scripts/gpu_torch_bench.sh unpack DIR_A DIR_B   # here: models/ back; the results into
#                                             # benchmarks/results/torch_gpu/
#   bash scripts/gpu_torch_bench.sh restore   # here: models/ back without results (a run failed)
#
# Each device call runs about 5 minutes (LOAD_S seconds of load steps + load and warm-up); with two
# starts that is ~12 of a session's 15 minutes. Settings (environment): LOAD_S (default 200),
# SESSIONS_DEFAULT, SESSIONS_BASE (the ramps, up to issue 56's 5,000 real-time sessions),
# DURATION (seconds per step, 20), MAX_BATCH (64), ENGINE_ARGS (more benchmarks.torch_engine_bench
# options), WORKERS (serve --workers: server processes sharing the GPU, default 6: one event loop
# topped out at about 1,300 sessions on the 16-core host, so 5,000 needs more than 4 with room to
# spare; 6 loops and ~6 load-generator processes at a quarter core each fit its 16 cores), CLIENT_PROCESSES (bench load
# --client-processes, default 0: one load-generator process per thousand sessions of a step),
# STREAM_CACHE (auto: cached left context, as the server runs on torch since 2026-11-29; off:
# whole windows, as the 2026-11-27 figures were taken). DEVICE=cpu PY=.venv/bin/python OUT=DIR
# runs a stage here on the CPU with small settings (sessions 5 10, base 2 4, 2 workers, 5 s
# steps, 90 s of load; each still overridable), to check the script, after `KEEP_MODELS=1
# bash scripts/gpu_torch_bench.sh prepare` (it downloads the websockets wheel); KEEP_MODELS=1 prepare
# packs without moving models/ aside (to look at the sizes). The engine's cached calls are also
# timed by benchmarks.torch_engine_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/release_lib.sh  # tree_bytes
G="${GPU_WORK:-/tmp/tb}"  # the device's work folder
PY="${PY:-python3}"
HOLD="${MODELS_HOLD:-/tmp/models_hold_torch}"
LIMIT=$(( 62 * 1024 * 1024 ))  # bytes per call, under the 64 MiB limit
stage="${1:?usage: gpu_torch_bench.sh prepare|a|b|unpack DIR_A DIR_B|restore}"
DEVICE="${DEVICE:-cuda}"
if [[ $DEVICE == cpu ]]; then  # a check of the script here: small settings unless given
  LOAD_S="${LOAD_S:-90}" DURATION="${DURATION:-5}" WORKERS="${WORKERS:-2}"
  SESSIONS_DEFAULT="${SESSIONS_DEFAULT:-5 10}" SESSIONS_BASE="${SESSIONS_BASE:-2 4}"
fi
LOAD_S="${LOAD_S:-200}"
DURATION="${DURATION:-20}"
MAX_BATCH="${MAX_BATCH:-64}"
SESSIONS_DEFAULT="${SESSIONS_DEFAULT:-500 1000 2000 3000 4000 5000 6000}"
SESSIONS_BASE="${SESSIONS_BASE:-200 500 1000 1500 2000 3000}"
WORKERS="${WORKERS:-6}"
CLIENT_PROCESSES="${CLIENT_PROCESSES:-0}"
STREAM_CACHE="${STREAM_CACHE:-auto}"

setup_device() {  # the wheel where websockets is missing, PYTHONPATH; the device's python holds torch
  export PYTHONUNBUFFERED=1
  if ! $PY -c "import websockets" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$1"/whl/*.whl
  fi
  export PYTHONPATH="/tmp/site:$PWD"
  nvidia-smi -L || true
  $PY -c "import torch, transformers, onnx, onnxruntime; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
}

measure() {  # measure NAME MODEL_DIR SESSIONS: tokens/s, then bench load, each with the device record
  # shellcheck disable=SC2086
  $PY -m benchmarks.torch_engine_bench --model "$2" --device "$DEVICE" --out "$OUT/engine_$1.json" ${ENGINE_ARGS:-} \
      || echo "the engine benchmark of $1 ended with rc $?"
  # shellcheck disable=SC2086
  $PY -m benchmarks.load_bench --model "$2" --engine torch --engine-option "device=$DEVICE" \
      --stream-cache "$STREAM_CACHE" --sessions $3 --duration "$DURATION" --max-batch "$MAX_BATCH" \
      --max-total-s "$LOAD_S" --refine 1 --workers "$WORKERS" --client-processes "$CLIENT_PROCESSES" \
      --out-dir "$OUT" --name "load_$1" || echo "bench load of $1 ended with rc $?"
  if [[ -f $OUT/load_$1.json ]]; then
    $PY -m benchmarks.torch_engine_bench --device "$DEVICE" --annotate "$OUT/load_$1.json"
  fi
}

case $stage in
prepare)
  [[ -d models ]] || { echo "models/ is not here (moved to $HOLD by an earlier prepare? bash $0 restore)" >&2; exit 2; }
  rm -rf .gpuS1 .gpuS2
  mkdir -p .gpuS1/default .gpuS1/whl .gpuS2/base .gpuS2/whl
  for f in models/default/*; do
    case $f in
      *.onnx) gzip -1 -c "$f" > ".gpuS1/default/$(basename "$f").gz" ;;
      *.md) ;;
      *) cp "$f" .gpuS1/default/ ;;
    esac
  done
  ws=$(.venv/bin/python -c 'import websockets; print(websockets.__version__)')
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .gpuS1/whl "websockets==$ws"
  cp .gpuS1/whl/* .gpuS2/whl/
  bg=$(.venv/bin/python -c 'import json; print(json.load(open("models/base/streampunct.json"))["artifact"])')
  echo "$bg" > .gpuS2/base_graph
  for f in models/base/*; do
    [[ $f == "models/base/$bg" || $f == *.md ]] || cp "$f" .gpuS2/base/
  done
  tree=$(tree_bytes)
  room=$(( LIMIT - tree - $(du -sb .gpuS1 | cut -f1) ))
  size=$(stat -c %s "models/base/$bg")
  rest=$(( size - room ))
  if (( room < 0 || rest + tree + $(du -sb .gpuS2 | cut -f1) > LIMIT )); then
    echo "cannot cut models/base/$bg ($size bytes) into two calls: the tree is $tree bytes, .gpuS1 leaves $room" >&2
    exit 3
  fi
  head -c "$room" "models/base/$bg" > .gpuS1/base.part1
  tail -c +$(( room + 1 )) "models/base/$bg" > .gpuS2/base.part2
  [[ ${KEEP_MODELS:-0} == 1 ]] || mv models "$HOLD"
  du -sb .gpuS1 .gpuS2
  echo "tree $tree bytes; models/ is in $HOLD until: bash $0 unpack DIR_A DIR_B (or: bash $0 restore)"
  ;;
a)
  setup_device .gpuS1
  rm -rf "$G" && mkdir -p "$G/default"
  cp .gpuS1/default/* "$G/default/" && gunzip "$G"/default/*.gz
  cp .gpuS1/base.part1 "$G/"
  set -o pipefail
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/engines/test_torch_backend.py -k cuda -rs 2>&1 \
      | tee "$OUT/gpu_tests.log" || echo "GPU tests ended with rc $?"
  measure default "$G/default" "$SESSIONS_DEFAULT"
  ;;
b)
  [[ -f $G/base.part1 ]] || { echo "no $G/base.part1: run stage a on this machine first" >&2; exit 3; }
  setup_device .gpuS2
  mkdir -p "$G/base"
  cat "$G/base.part1" .gpuS2/base.part2 > "$G/base/$(cat .gpuS2/base_graph)"
  cp .gpuS2/base/* "$G/base/"  # the graph's sidecar: the engine checks the assembled graph's sha256
  measure base "$G/base" "$SESSIONS_BASE"
  ;;
unpack)
  a="${2:?usage: gpu_torch_bench.sh unpack DIR_A DIR_B}" b="${3:?usage: gpu_torch_bench.sh unpack DIR_A DIR_B}"
  [[ -d models ]] || mv "$HOLD" models
  out=benchmarks/results/torch_gpu
  mkdir -p "$out"
  cp "$a"/* "$b"/* "$out/"
  rm -rf .gpuS1 .gpuS2
  ls -la "$out"
  ;;
restore)
  [[ -d models ]] || mv "$HOLD" models
  rm -rf .gpuS1 .gpuS2
  ;;
*)
  echo "usage: gpu_torch_bench.sh prepare|a|b|unpack DIR_A DIR_B|restore" >&2; exit 2 ;;
esac
