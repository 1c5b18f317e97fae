#!/usr/bin/env bash
# The recipe of the shipped models: rebuild models/default or models/base from its training
# config, choose on validation, ship, then score the test sets once (docs/training.md,
# "Releasing a model").
#
#   bash scripts/release.sh MODEL STEP        MODEL: default | base
#
#   train     train the config (resumable: the same command continues a stopped run)
#   build     the checkpoint's ONNX graphs into BUILD (default: int8 + its streaming graph;
#             base: 4-bit weights, its streaming graph as the folder's one graph)
#   tune      on validation only: the offline window, the streaming left context, then the
#             length of the cached left context (training.window_tuning), and the case head's
#             margin for capitals (training.case_margin), into BUILD
#   compare   validation only: BUILD against the shipped models/MODEL (JSON into OUT)
#   ship      after the decision: BUILD into models/MODEL
#   score     once, after shipping: the test sets through models/MODEL (JSON into OUT)
#   all       train, build, tune, compare
#
# The shipped configs: default = training/configs/release_v6_repair.toml, started from
# checkpoints/gpu_student/best (the student distilled on a GPU by scripts/gpu_release.sh;
# not in git); base (release 3) = training/configs/gpu_teacher.toml: the MPNet teacher trained
# on a GPU by scripts/gpu_release.sh (prepare, a, b, c 0-3, unpack-teacher), which leaves its
# checkpoint in checkpoints/gpu_teacher/best; `train` for base does not run on a GPU machine by
# itself: it continues that teacher on the CPU (training/configs/release3_teacher.toml, resumable),
# and CONFIG=training/configs/release3_teacher.toml builds from that run's best instead. Overrides: CONFIG, START, BUILD (default
# build/MODEL), OUT (default benchmarks/results/release_MODEL). Validation and test data come
# from ../shared/data ($STREAMPUNCT_DATA) and data/iwslt2011.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: release.sh default|base train|build|tune|compare|ship|score|all"
model="${1:-}"
step="${2:-}"
case "$model" in
default) config="${CONFIG:-training/configs/release_v6_repair.toml}"; start="${START:-checkpoints/gpu_student/best}" ;;
base) config="${CONFIG:-training/configs/gpu_teacher.toml}"; start="${START:-checkpoints/gpu_teacher/best}" ;;
*) echo "$usage" >&2; exit 2 ;;
esac
case "$step" in
train|build|tune|compare|ship|score|all) ;;
*) echo "$usage" >&2; exit 2 ;;
esac
[[ -f $config ]] || { echo "no config $config" >&2; exit 2; }
. scripts/release_lib.sh
build="${BUILD:-build/$model}"
out="${OUT:-benchmarks/results/release_$model}"
shipped="models/$model"
name=$(_py -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["name"])' "$config")
ckpt="checkpoints/$name/best"

train() {
  if [[ $model == default ]]; then
    # the repair's soft labels: models/base (the CPU teacher) on 200k words of TEDx captions
    [[ -f cache/soft/v6_captions_base.npz ]] || _py -m training.distill label --teacher models/base \
        --unlabeled tedx --max-unlabeled-words 200000 --seed 15 --out cache/soft/v6_captions_base.npz
  elif [[ $config == training/configs/gpu_teacher.toml ]]; then
    # the GPU recipe runs on a lent GPU (scripts/gpu_release.sh); here the teacher continues on the CPU
    [[ -f $start/model.safetensors ]] || { echo "no $start: run scripts/gpu_release.sh (docs/training.md)" >&2; exit 3; }
    config=training/configs/release3_teacher.toml
    name=release3_teacher
  fi
  _py -m training.cli --config "$config" --base-model "$start" --resume
  _py -m training.learning_curve "checkpoints/$name" --out "$out/learning_curve"
}

build() {
  if [[ $model == default ]]; then
    build_int8 "$ckpt" "$build"
    return
  fi
  rm -rf "$build"
  # 4-bit weights in blocks of 32: dynamic int8 loses ~8 points on MPNet (activation outliers)
  _sp build-engine --model "$ckpt" --backend onnxruntime --precision int4 --quantize-embeddings --out "$build"
  # the streaming graph runs whole windows too (with no cache): the folder's one graph
  _py - "$build" <<'PY'
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])
meta = json.loads((folder / "streampunct.json").read_text())
plain, meta["artifact"] = meta["artifact"], meta["stream_artifact"]
if plain != meta["artifact"]:
    for p in (folder / plain, folder / f"{plain}.json"):
        p.unlink(missing_ok=True)
(folder / "streampunct.json").write_text(json.dumps(meta, indent=2))
PY
}

tune() {
  if [[ $model == default ]]; then
    _py -m training.window_tuning "$build" --sizes 126 --lefts 20 40 --rights 10 --tolerance 0.5
    _py -m training.window_tuning "$build" --stream-lefts 20 25 30 40
    tune_stream_cache "$build" 25 40 60 80 100
  else
    _py -m training.window_tuning "$build" --sizes 126 254 --lefts 40 60 --rights 20 30 --tolerance 0.5
    _py -m training.window_tuning "$build" --stream-lefts 20 30 40 --tolerance 0.5
    tune_stream_cache "$build" 40 60 80
  fi
  _py -m training.case_margin "$build" --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt \
    ../shared/data/cased_spoken/swda_val_cased.txt --write
}

mkdir -p "$out"
case "$step" in
train) train ;;
build) build ;;
tune) tune ;;
compare) compare_on_validation "$shipped" "$build" "$out" ted_iwslt_dev2010 swda_val ;;
ship) ship_candidate "$build" "$shipped" ;;
score)
  score_test_sets "$out" "$shipped"
  if [[ $model == default ]]; then
    _sp bench load --model "$shipped" --sessions 300 400 500 --refine 0 --out-dir "$out" --name load_default
  else
    _sp bench load --model "$shipped" --sessions 10 20 30 40 --refine 0 --out-dir "$out" --name load_base
  fi
  ;;
all) train; build; tune; compare_on_validation "$shipped" "$build" "$out" ted_iwslt_dev2010 swda_val ;;
esac
