# Steps shared by scripts/release.sh (the shipped models' recipe), scripts/gpu_release.sh and
# scripts/gpu_torch_bench.sh.
# Source it from the repository root: . scripts/release_lib.sh
# LPY / LSP name this machine's python and streampunct (default: the .venv's); the tests set
# them to stand-ins that record the commands.

_py() { "${LPY:-.venv/bin/python}" "$@"; }
_sp() { "${LSP:-.venv/bin/streampunct}" "$@"; }

# The data folder: $STREAMPUNCT_DATA, as the Python tools read it, or ../shared/data.
DATA="${STREAMPUNCT_DATA:-../shared/data}"

# tree_bytes: what travels to a device call besides its carried folders, tracked and
# untracked-not-ignored files (models/ left out: the GPU scripts' prepare moves it aside)
tree_bytes() {
  { git ls-files -z; git ls-files -z --others --exclude-standard; } \
    | { grep -zv '^models/' || true; } | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

# stream_artifact DIR: the streaming graph DIR's streampunct.json names (cached left context;
# build-engine adds one to onnxruntime int8 and int4 folders), or nothing.
stream_artifact() {
  _py -c 'import json, sys; print(json.load(open(sys.argv[1])).get("stream_artifact") or "")' \
      "$1/streampunct.json"
}

# compare_on_validation OLD NEW OUT [LIVE_SET...]: two runtime model folders on validation
# only: offline F1 and label agreement on dev2010 and SwDA validation, punctuation density on
# held-out ASR captions (benchmarks.mark_rate), learned case on dev2010, and a live stream at
# the server's defaults of each LIVE_SET (cased validation texts in $DATA/cased_spoken;
# default ted_iwslt_dev2010). JSON into OUT, each model's files named by its role (OLD:
# shipped, NEW: candidate), as training.recipe names them.
compare_on_validation() {
  local old=$1 new=$2 out=$3 valid role m
  shift 3
  local live=("$@")
  (( ${#live[@]} )) || live=(ted_iwslt_dev2010)
  for valid in dev2010 swda_val; do
    _py -m benchmarks.compare_models "$old" "$new" --valid "$valid" --json "$out/compare_$valid.json"
  done
  # no validation set is ASR output: how densely each model punctuates held-out TEDx captions
  _py -m benchmarks.mark_rate "$old" "$new" --json "$out/mark_rate.json"
  for role in shipped candidate; do
    if [[ $role == shipped ]]; then m=$old; else m=$new; fi
    _py -m streampunct.evaluation.case --model "$m" \
        --data "$DATA/cased_spoken/ted_iwslt_dev2010_cased.txt" --json "$out/case_dev2010_$role.json"
    for valid in "${live[@]}"; do
      _sp evaluate --model "$m" --text --data "$DATA/cased_spoken/${valid}_cased.txt" \
          --live --json "$out/live_${valid}_$role.json"
    done
  done
}

# build_int8 MODEL OUT: the int8 graph of a training checkpoint as the default model ships it
# (7-bit weights, quantized embeddings, and the streaming graph with static activation scales
# calibrated on TED dev2012, a labelled training set) in a fresh OUT.
build_int8() {
  rm -rf "$2"
  _sp build-engine --model "$1" --backend onnxruntime --precision int8 --quantize-embeddings --out "$2"
  _py -m training.static_scales "$2" --data "$DATA/iwslt2011_che/dev2012"
}

# tune_stream_cache DIR [TOKENS...]: on validation, the length of DIR's cached left context
# (stream_cache_tokens) among TOKENS (default 25 40 60 80 100): dev2010 and SwDA validation,
# each one live stream at the server's defaults, without the cache and with each length; the
# highest mean F1, the fewest tokens within 0.1 of it. If that length falls more than 0.3 under
# whole windows on either set it is written with "stream_cache": false, so serve's
# --stream-cache auto serves whole windows. Into DIR/streampunct.json with the grid
# (stream_cache_tuning). Run it after the streaming left context, whose windows the cache serves.
tune_stream_cache() {
  local dir=$1
  shift
  local tokens=("$@")
  (( ${#tokens[@]} )) || tokens=(25 40 60 80 100)
  _py -m training.window_tuning "$dir" --stream-cache-tokens "${tokens[@]}"
}

# ship_candidate DIR DEST: a candidate's runtime files (its graph and sidecar, its streaming
# graph where it names one, tokenizer, streampunct.json) into DEST, after the validation
# decision; the graphs DEST held before go (a graph left from the shipped model would serve the
# old weights).
ship_candidate() {
  local dir=$1 dest=$2 artifact stream
  artifact=$(_py -c 'import json, sys; print(json.load(open(sys.argv[1]))["artifact"])' "$dir/streampunct.json")
  stream=$(stream_artifact "$dir")
  mkdir -p "$dest"
  rm -f "$dest"/model*.onnx "$dest"/model*.onnx.json
  cp "$dir/$artifact" "$dir/$artifact.json" "$dir/tokenizer.json" "$dir/streampunct.json" "$dest/"
  if [[ -n $stream && $stream != "$artifact" ]]; then cp "$dir/$stream" "$dir/$stream.json" "$dest/"; fi
}

# score_test_sets OUT MODEL: the test sets, scored once with the shipped MODEL folder: offline
# and simulated streaming, learned case, live streams through the server at its defaults (and
# SwDA validation live, for comparison). JSON into OUT.
score_test_sets() {
  local out=$1 model=$2 set
  for set in test2011 test2011asr; do
    _sp evaluate --model "$model" --data "data/iwslt2011/$set" --right-context 0 1 2 4 8 --json "$out/$set.json"
  done
  _py -m streampunct.evaluation.case --model "$model" --data data/iwslt2011/test2011_cased.txt \
      --json "$out/case_test2011.json"
  _sp bench live --model "$model" --out-dir "$out" --name live_test2011
  _sp bench live --model "$model" --data data/iwslt2011/test2011asr --out-dir "$out" --name live_test2011asr
  _sp bench live --model "$model" --text --data "$DATA/cased_spoken/swda_val_cased.txt" \
      --out-dir "$out" --name live_swda_val
}

# minilm_config DIR LAYERS: a config-only encoder folder (config.json + tokenizer.json) of the
# MiniLM base cut to LAYERS layers, for importing a cut model's graph (training.onnx_import
# --base-model DIR; every weight comes from the graph).
minilm_config() {
  [[ -f $1/config.json ]] && return 0
  _py - "$1" "$2" <<'PY'
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
  _py - "$1" "$2" <<'PY'
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
