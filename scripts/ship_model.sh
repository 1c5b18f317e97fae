#!/usr/bin/env bash
# Turn a training checkpoint into the shipped default model (models/default) and
# score it once on the IWSLT2011 test sets. Usage:
#   bash scripts/ship_model.sh checkpoints/release_minilm/best [models/default [TAG]]
# Steps: build-engine (ONNX Runtime int8, parity vs torch on dev2012) into
# build/ship/, copy only what serving needs (int8 graph + sidecar, tokenizer,
# streampunct.json) into the model folder, then evaluate on test2011 and
# test2011asr (offline + streaming at right context 0 1 2 4 8), writing
# benchmarks/results/TAG_test2011*.json (TAG: release for models/default, the folder's
# name otherwise, e.g. base_test2011.json). The test sets are never used to
# train, select or tune: this is the final report only.
set -euo pipefail
cd "$(dirname "$0")/.."
ckpt="${1:?usage: ship_model.sh CHECKPOINT [MODEL_DIR]}"
dest="${2:-models/default}"
if [[ "$dest" == models/default ]]; then tag="${3:-release}"; else tag="${3:-$(basename "$dest")}"; fi
sp=.venv/bin/streampunct
build=build/ship
rm -rf "$build"; mkdir -p build
$sp build-engine --model "$ckpt" --backend onnxruntime --precision int8 --quantize-embeddings --out "$build" \
  | tee "$build.log"
mkdir -p "$dest"
rm -f "$dest"/model*.onnx "$dest"/model*.onnx.json
cp "$build/model.int8.onnx" "$build/model.int8.onnx.json" "$build/tokenizer.json" \
   "$build/streampunct.json" "$dest/"
du -sh "$dest"
for set in test2011 test2011asr; do
  $sp evaluate --model "$dest" --data "data/iwslt2011/$set" --right-context 0 1 2 4 8 \
    --json "benchmarks/results/${tag}_$set.json"
done
