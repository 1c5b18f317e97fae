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
# not in git). base (release 3) is made in three steps from GPU run 5's MPNet teacher
# (scripts/gpu_release.sh prepare, a, b, c 0-3, unpack-teacher: checkpoints/gpu_teacher/best;
# not in git): `train` continues it on the CPU to the step-150 validation of
# training/configs/release3_teacher.toml (optim.stop_step=150: the first 150 steps of that
# 6,000-step run), repairs that with training/configs/release3_teacher_repair.toml (best:
# step 100), and mixes the repair half and half with release 2's models/base graph
# (git: RELEASE2, extracted into build/release2 or RELEASE2_DIR) by training.interpolate
# --dither 0.5 --seed 16.
# `build` exports the mix to 4-bit and keeps release 2's windows; `tune` sets the case margin.
# Overrides: CONFIG, START, BUILD (default build/MODEL), OUT (default
# benchmarks/results/release_MODEL). Validation data come from $STREAMPUNCT_DATA (default
# ../shared/data), the test sets from data/iwslt2011. compare names each model's figures by
# role (_shipped, _candidate).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: release.sh default|base train|build|tune|compare|ship|score|all"
model="${1:-}"
step="${2:-}"
case "$model" in
default) config="${CONFIG:-training/configs/release_v6_repair.toml}"; start="${START:-checkpoints/gpu_student/best}" ;;
base) config="${CONFIG:-training/configs/release3_teacher_repair.toml}"; start="${START:-checkpoints/gpu_teacher/best}" ;;
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
# base: release 2's models/base (the mix's other half; its windows stay) and the mix
release2="${RELEASE2:-00a5239}" r2dir="${RELEASE2_DIR:-build/release2}"
[[ $model == base ]] && ckpt=checkpoints/release3_base

release2_base() {  # $r2dir/models/base: release 2's folder, from git
  [[ -f $r2dir/models/base/streampunct.json ]] && return 0
  mkdir -p "$r2dir"
  git archive "$release2" models/base | tar -x -C "$r2dir"
}

train() {
  compgen -G "$start/model*.safetensors" >/dev/null || {
    echo "no checkpoint $start: run scripts/gpu_release.sh on a GPU, or on the CPU start from the shipped" \
         "graph (python -m training.onnx_import models/$model OUT, then START=OUT; models/$model/MODEL_CARD.md," \
         "\"What a clone can rebuild\")" >&2
    exit 3
  }
  if [[ $model == default ]]; then
    # the repair's soft labels: models/base (the CPU teacher) on 200k words of TEDx captions
    [[ -f cache/soft/v6_captions_base.npz ]] || _py -m training.distill label --teacher models/base \
        --unlabeled tedx --max-unlabeled-words 200000 --seed 15 --out cache/soft/v6_captions_base.npz
  else
    # GPU run 5's teacher (scripts/gpu_release.sh on a lent GPU), continued on the CPU to the
    # step-150 validation of the background run's schedule, then repaired (the config's header)
    _py -m training.cli --config training/configs/release3_teacher.toml --base-model "$start" \
        --out checkpoints/release3_teacher_150 --set optim.stop_step=150 --resume
    start=checkpoints/release3_teacher_150/best
  fi
  _py -m training.cli --config "$config" --base-model "$start" --resume
  _py -m training.learning_curve "checkpoints/$name" --out "$out/learning_curve"
  if [[ $model == base ]]; then
    release2_base
    _py -m training.interpolate "$r2dir/models/base" "checkpoints/$name/best" --t 0.5 \
        --dither 0.5 --seed 16 --out "$ckpt"
  fi
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
  release2_base
  _py - "$build" "$r2dir/models/base" <<'PY'
import json, sys
from pathlib import Path
folder, release2 = Path(sys.argv[1]), Path(sys.argv[2])
meta = json.loads((folder / "streampunct.json").read_text())
plain, meta["artifact"] = meta["artifact"], meta["stream_artifact"]
if plain != meta["artifact"]:
    for p in (folder / plain, folder / f"{plain}.json"):
        p.unlink(missing_ok=True)
# the same encoder and task as release 2: its windows, tuned on validation, stay
old = json.loads((release2 / "streampunct.json").read_text())
for key in ("base_model", "window", "window_tuning", "stream_window", "stream_window_tuning",
            "stream_cache_tokens", "stream_cache_tuning"):
    meta[key] = old[key]
meta["windows_from"] = "release 2's models/base (same encoder; tuned on validation there)"
meta["name"] = "release3_base"  # /healthz and the logs name the model by it
(folder / "streampunct.json").write_text(json.dumps(meta, indent=2))
tok = folder / "tokenizer.json"  # written compact, as shipped (the exporter indents it)
tok.write_text(json.dumps(json.loads(tok.read_text()), ensure_ascii=False, separators=(",", ":")))
PY
}

tune() {
  if [[ $model == default ]]; then
    _py -m training.window_tuning "$build" --sizes 126 --lefts 20 40 --rights 10 --tolerance 0.5
    _py -m training.window_tuning "$build" --stream-lefts 20 25 30 40
    tune_stream_cache "$build" 25 40 60 80 100
  fi  # base keeps release 2's windows (build)
  _py -m training.case_margin "$build" --data "$DATA/cased_spoken/ted_iwslt_dev2010_cased.txt" \
    "$DATA/cased_spoken/swda_val_cased.txt" --write
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
