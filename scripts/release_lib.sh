# Steps shared by the release scripts (scripts/release_v2.sh, release_v3.sh, release_fast.sh,
# release_v4.sh, release_v5.sh).
# Source it from the repository root: . scripts/release_lib.sh

# pinned_model COMMIT DIR: the default model as shipped at COMMIT (int8 graph, sidecar,
# tokenizer, streampunct.json, and the streaming graph where it names one), written into DIR once.
pinned_model() {
  local commit=$1 dir=$2 f
  [[ -f $dir/streampunct.json ]] && return 0
  mkdir -p "$dir"
  for f in model.int8.onnx model.int8.onnx.json tokenizer.json streampunct.json; do
    git show "$commit:models/default/$f" > "$dir/$f"
  done
  f=$(stream_artifact "$dir")
  if [[ -n $f ]]; then
    git show "$commit:models/default/$f" > "$dir/$f"
    git show "$commit:models/default/$f.json" > "$dir/$f.json"
  fi
}

# stream_artifact DIR: the streaming graph DIR's streampunct.json names (cached left context;
# build-engine adds one to onnxruntime int8 and int4 folders), or nothing.
stream_artifact() {
  .venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("stream_artifact") or "")' \
      "$1/streampunct.json"
}

# compare_on_validation OLD NEW OUT [LIVE_SET...]: two runtime model folders on validation
# only: offline F1 and label agreement on dev2010 and SwDA validation, punctuation density on
# held-out ASR captions (benchmarks.mark_rate), learned case on
# dev2010, and a live stream at the server's defaults of each LIVE_SET (cased validation
# texts in ../shared/data/cased_spoken; default ted_iwslt_dev2010). JSON into OUT.
compare_on_validation() {
  local old=$1 new=$2 out=$3 valid m n
  shift 3
  local live=("$@")
  (( ${#live[@]} )) || live=(ted_iwslt_dev2010)
  for valid in dev2010 swda_val; do
    .venv/bin/python -m benchmarks.compare_models "$old" "$new" --valid "$valid" \
        --json "$out/compare_$valid.json"
  done
  # no validation set is ASR output: how densely each model punctuates held-out TEDx captions
  # (label-free; release 6's candidate fell to 0.81 of its dev2010 rate, release 5 kept 1.05)
  .venv/bin/python -m benchmarks.mark_rate "$old" "$new" --json "$out/mark_rate.json"
  for m in "$old" "$new"; do
    n=$(basename "$m")
    .venv/bin/python -m streampunct.case_eval --model "$m" \
        --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt --json "$out/case_dev2010_$n.json"
    for valid in "${live[@]}"; do
      .venv/bin/streampunct evaluate --model "$m" --text --data "../shared/data/cased_spoken/${valid}_cased.txt" \
          --live --json "$out/live_${valid}_$n.json"
    done
  done
}

# build_int8 MODEL OUT: the int8 graph of a training checkpoint as the default model ships it
# (7-bit weights, quantized embeddings) in a fresh OUT.
build_int8() {
  rm -rf "$2"
  .venv/bin/streampunct build-engine --model "$1" --backend onnxruntime --precision int8 \
      --quantize-embeddings --out "$2"
}

# tune_geometry DIR STREAM_LEFT...: on validation, the offline window (grid W 94/126, L 20/30/40,
# R 10/15/20, the cheapest within 0.5 of the best), then the streaming left context among
# STREAM_LEFT (a live dev2010 stream at the server's defaults), then, where DIR has a streaming
# graph, the length of its cached left context (tune_stream_cache, its default grid); all into
# DIR/streampunct.json.
tune_geometry() {
  local dir=$1
  shift
  .venv/bin/python -m training.window_tuning "$dir" --sizes 94 126 --lefts 20 30 40 --rights 10 15 20 \
      --tolerance 0.5
  .venv/bin/python -m training.window_tuning "$dir" --stream-lefts "$@"
  if [[ -n $(stream_artifact "$dir") ]]; then tune_stream_cache "$dir"; fi
}

# tune_short_grid DIR STREAM_LEFT...: the short offline grid of the release 6 candidates (W=126,
# L 20/40, R 10: release 5's window and a longer left context, the cheapest within 0.5 of the
# best), then the streaming left context among STREAM_LEFT, then, where DIR has a streaming
# graph, the length of its cached left context (tune_stream_cache); all into DIR/streampunct.json.
tune_short_grid() {
  local dir=$1
  shift
  .venv/bin/python -m training.window_tuning "$dir" --sizes 126 --lefts 20 40 --rights 10 --tolerance 0.5
  .venv/bin/python -m training.window_tuning "$dir" --stream-lefts "$@"
  if [[ -n $(stream_artifact "$dir") ]]; then tune_stream_cache "$dir"; fi
}

# tune_stream_cache DIR [TOKENS...]: on validation, the length of DIR's cached left context
# (stream_cache_tokens) among TOKENS (default 25 40 60 80 100, release 6's grid): dev2010 and
# SwDA validation, each one live stream at the server's defaults, without the cache and with each
# length; the highest mean F1, the fewest tokens within 0.1 of it. If that length falls more than
# 0.3 under whole windows on either set it is written with "stream_cache": false, so serve's
# --stream-cache auto serves whole windows (benchmarks/results/kv_cache/RULE.md). Into
# DIR/streampunct.json with the grid (stream_cache_tuning). DIR must have a streaming graph (exit
# 2 otherwise); run it after the streaming left context, whose windows the cache serves.
tune_stream_cache() {
  local dir=$1
  shift
  local tokens=("$@")
  (( ${#tokens[@]} )) || tokens=(25 40 60 80 100)
  .venv/bin/python -m training.window_tuning "$dir" --stream-cache-tokens "${tokens[@]}"
}

# repair_candidate NAME DIR OLD OUT STREAM_LEFT...: release 6's repair recipe on the GPU student
# (checkpoints/gpu_student/best): models/base's soft labels on 200k caption words (labelled once,
# cache/soft/v6_captions_base.npz), training/configs/NAME.toml (resumes), its learning curve into
# OUT, the int8 graph in DIR, the short window grid with the streaming left contexts STREAM_LEFT,
# and the comparison with OLD on validation (JSON into OUT).
repair_candidate() {
  local name=$1 dir=$2 old=$3 out=$4
  shift 4
  [[ -f cache/soft/v6_captions_base.npz ]] || .venv/bin/python -m training.distill label --teacher models/base \
      --unlabeled tedx --max-unlabeled-words 200000 --seed 15 --out cache/soft/v6_captions_base.npz
  .venv/bin/python -m training.cli --config "training/configs/$name.toml" \
      --base-model checkpoints/gpu_student/best --resume
  .venv/bin/python -m training.learning_curve "checkpoints/$name" --out "$out/learning_curve"
  build_int8 "checkpoints/$name/best" "$dir"
  tune_short_grid "$dir" "$@"
  compare_on_validation "$old" "$dir" "$out" ted_iwslt_dev2010 swda_val
}

# use_shipped_windows DIR: DIR's offline window and streaming geometry set to models/default's,
# and its cached left context's length where both have a streaming graph (a probe compared at
# the shipped model's windows)
use_shipped_windows() {
  .venv/bin/python - "$1" <<'PY'
import json, sys
src = json.load(open("models/default/streampunct.json"))
p = f"{sys.argv[1]}/streampunct.json"
d = json.load(open(p))
d["window"], d["stream_window"] = src["window"], src["stream_window"]
if d.get("stream_artifact") and src.get("stream_cache_tokens"):
    d["stream_cache_tokens"] = src["stream_cache_tokens"]
json.dump(d, open(p, "w"), indent=2)
PY
}

# ship_candidate DIR: a candidate's runtime files (int8 graph, sidecar, tokenizer,
# streampunct.json, and its streaming graph where it names one: a graph left from the shipped
# model would serve the old weights) into models/default, after the validation decision.
ship_candidate() {
  local stream
  cp "$1"/{model.int8.onnx,model.int8.onnx.json,tokenizer.json,streampunct.json} models/default/
  stream=$(stream_artifact "$1")
  if [[ -n $stream ]]; then cp "$1/$stream" "$1/$stream.json" models/default/; fi
}

# score_test_sets OUT: the test sets, scored once with the candidate in models/default: offline
# and simulated streaming, learned case, live streams through the server at its defaults (and
# SwDA validation live, for comparison). JSON into OUT.
score_test_sets() {
  local out=$1 set
  for set in test2011 test2011asr; do
    .venv/bin/streampunct evaluate --data "data/iwslt2011/$set" --right-context 0 1 2 4 8 --json "$out/$set.json"
  done
  .venv/bin/python -m streampunct.case_eval --data data/iwslt2011/test2011_cased.txt --json "$out/case_test2011.json"
  .venv/bin/streampunct bench live --out-dir "$out" --name live_test2011
  .venv/bin/streampunct bench live --data data/iwslt2011/test2011asr --out-dir "$out" --name live_test2011asr
  .venv/bin/streampunct bench live --text --data ../shared/data/cased_spoken/swda_val_cased.txt --out-dir "$out" \
      --name live_swda_val
}

# candidate_steps STEP CAND DIR OLD OUT STREAM_LEFT...: what every release does after training.
# build: CAND's int8 graph (and streaming graph) into DIR; tune: its offline window, the streaming
# left context among STREAM_LEFT and the cache's length (tune_geometry); compare: DIR against the shipped OLD on validation (JSON into OUT); ship:
# DIR into models/default; score: the test sets, once. STEP "all" is build, tune and compare.
candidate_steps() {
  local step=$1 cand=$2 dir=$3 old=$4 out=$5
  shift 5
  [[ "$step" == all || "$step" == build ]] && build_int8 "$cand" "$dir"
  [[ "$step" == all || "$step" == tune ]] && tune_geometry "$dir" "$@"
  [[ "$step" == all || "$step" == compare ]] && compare_on_validation "$old" "$dir" "$out" ted_iwslt_dev2010 swda_val
  [[ "$step" == ship ]] && ship_candidate "$dir"
  [[ "$step" == score ]] && score_test_sets "$out"
  return 0
}

# minilm_config DIR LAYERS: a config-only encoder folder (config.json + tokenizer.json) of the
# MiniLM base cut to LAYERS layers, for importing a cut model's graph (training.onnx_import
# --base-model DIR; every weight comes from the graph).
minilm_config() {
  [[ -f $1/config.json ]] && return 0
  .venv/bin/python - "$1" "$2" <<'PY'
import json, shutil, sys
from pathlib import Path
from training.model import default_base_model
src, dest, layers = default_base_model(), Path(sys.argv[1]), int(sys.argv[2])
dest.mkdir(parents=True, exist_ok=True)
cfg = json.loads((src / "config.json").read_text())
cfg["num_hidden_layers"] = layers
(dest / "config.json").write_text(json.dumps(cfg, indent=1))
shutil.copy(src / "tokenizer.json", dest / "tokenizer.json")
PY
}

# mpnet_config DIR TOKENIZER: all-mpnet-base-v2's config.json and a tokenizer in DIR (the weights
# come from an imported graph)
mpnet_config() {
  mkdir -p "$1"
  .venv/bin/python - "$1" "$2" <<'PY'
import json, shutil, sys
mpnet = {"architectures": ["MPNetForMaskedLM"], "attention_probs_dropout_prob": 0.1, "bos_token_id": 0,
         "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
         "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
         "max_position_embeddings": 514, "model_type": "mpnet", "num_attention_heads": 12,
         "num_hidden_layers": 12, "pad_token_id": 1, "relative_attention_num_buckets": 32, "vocab_size": 30527}
json.dump(mpnet, open(f"{sys.argv[1]}/config.json", "w"), indent=1)  # all-mpnet-base-v2's config
shutil.copy(sys.argv[2], sys.argv[1])
PY
}
