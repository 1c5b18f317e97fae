#!/usr/bin/env bash
# A 4-layer MPNet student (768 wide): the first 4 of models/base's 12 layers, fine-tuned on 2 CPU
# cores with models/base's recipe plus release 6's caption soft labels
# (training/configs/release_mpnet4.toml; ~70 min of training, ~20 min to build, tune, compare).
#   bash scripts/release_mpnet4.sh            # train (resumes), build, compare with release 6 at its windows
#   bash scripts/release_mpnet4.sh tune       # then, if dev2010 is within reach: tune, compare again
#   bash scripts/release_mpnet4.sh kd         # stage 2: distilled from models/base (release_mpnet4_kd.toml)
#                                             # into build/mpnet4_kd, compared the same way; the same rule
#   bash scripts/release_mpnet4.sh load       # real-time sessions at the server's defaults
#   bash scripts/release_mpnet4.sh ship       # after the decision: build/mpnet4 into models/default
#   bash scripts/release_mpnet4.sh score      # then, once: the test sets (release_lib score_test_sets)
# Decision rule, written down before the run finished (int8 against release 6 as shipped at
# 91d9b97, streaming graph included; one sitting, validation only): ship if dev2010 offline F1
# rises by at least 0.3, live dev2010 falls by at most 0.2, SwDA validation (offline and live) by
# at most 1.0, learned case on dev2010 by at most 0.5, the marks per 100 words of held-out TEDx
# captions (benchmarks.mark_rate) are at least 95% of release 6's, and `bench load` carries 150
# real-time sessions at the server's defaults (p95 finalize margin <= 100 ms). Scored once after
# shipping, it stays only if live test2011 at the defaults stays within 0.5 of release 6's 70.59
# and test2011asr offline within 0.5 of its 63.54; otherwise release 6 goes back.
# Start: cache/frontier/mpnet_l4, the 4-layer cut of models/base imported to torch:
#   bash scripts/probe_import_dither.sh   (cache/import_dither/base_0)
#   python -m training.drop_layers cache/import_dither/base_0 cache/frontier/mpnet_l4 --keep 0 1 2 3
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/release_mpnet4
mkdir -p $out
. scripts/release_lib.sh
v6=build/v6_now
pinned_model 91d9b97 $v6
# gate CKPT DIR NAME: CKPT's int8 graph into DIR and, at release 6's own windows (offline and
# streaming), against release 6 on dev2010 and SwDA validation ($out/compare_NAME<set>_shipped_windows.json).
# The window grid moves dev2010 by about a point, so a candidate more than 1.5 under release 6
# here cannot gain the rule's 0.3 by tuning (this stop was added after the first run, before
# anything else was measured).
gate() {
  local valid
  build_int8 "$1" "$2"
  use_shipped_windows "$2"
  for valid in dev2010 swda_val; do
    .venv/bin/python -m benchmarks.compare_models $v6 "$2" --valid $valid \
        --json "$out/compare_$3${valid}_shipped_windows.json"
  done
}
step="${1:-all}"
case "$step" in
all)
  [[ -f cache/frontier/mpnet_l4/config.json ]] || .venv/bin/python -m training.drop_layers \
      cache/import_dither/base_0 cache/frontier/mpnet_l4 --keep 0 1 2 3
  .venv/bin/python -m training.cli --config training/configs/release_mpnet4.toml \
      --base-model cache/frontier/mpnet_l4 --resume
  .venv/bin/python -m training.learning_curve checkpoints/release_mpnet4 --out "$out/learning_curve" \
      --compare benchmarks/results/release_base/learning_curve.json --compare-label "models/base (12 layers)"
  gate checkpoints/release_mpnet4/best build/mpnet4 ""
  ;;
kd)
  [[ -f cache/soft/mpnet4_kd_base_1m2.npz ]] || .venv/bin/python -m training.distill label \
      --teacher cache/import_dither/base_0 --labelled ted dev2012 swda --max-labelled-words 1200000 \
      --seed 17 --bf16 --batch-size 64 --out cache/soft/mpnet4_kd_base_1m2.npz
  .venv/bin/python -m training.cli --config training/configs/release_mpnet4_kd.toml \
      --base-model checkpoints/release_mpnet4/best --resume
  .venv/bin/python -m training.learning_curve checkpoints/release_mpnet4_kd --out "$out/learning_curve_kd" \
      --compare "$out/learning_curve.json" --compare-label "stage 1 (CE, 4.7M words)"
  gate checkpoints/release_mpnet4_kd/best build/mpnet4_kd kd_
  ;;
tune)
  tune_short_grid build/mpnet4 20 25 30
  compare_on_validation $v6 build/mpnet4 "$out" ted_iwslt_dev2010 swda_val
  ;;
load)
  .venv/bin/streampunct bench load --model build/mpnet4 --sessions 150 200 --refine 0 \
      --out-dir "$out" --name load_mpnet4 ;;
ship)
  ship_candidate build/mpnet4 ;;
score)
  score_test_sets "$out" ;;
*)
  echo "usage: release_mpnet4.sh [all|kd|tune|load|ship|score]" >&2; exit 2 ;;
esac
