#!/usr/bin/env bash
# The noise fix on case, a validation-only probe (training/configs/probe_filler_case.toml says
# what and why; docs/training.md, "Noise"): release 6 trained one more pass with the fixed
# augmentation (checkpoints/probe_filler_case) and with the one before the fix
# (checkpoints/probe_filler_case_old, trained from a worktree of commit 7cb9ddf, see below);
# both built int8 at release 6's windows and scored on validation: case after fillers
# (scripts/probe_filler_case.py), case and punctuation on dev2010 and SwDA validation.
#   bash scripts/probe_filler_case.sh train   # both runs, one thread each, side by side
#   bash scripts/probe_filler_case.sh score
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cfg=training/configs/probe_filler_case.toml
out=benchmarks/results/probe_filler_case
case "${1:?usage: probe_filler_case.sh train|score}" in
train)
  [[ -d ../wt_old ]] || { git worktree add ../wt_old 7cb9ddf && ln -s "$root/.venv" ../wt_old/.venv \
      && ln -s "$root/cache" ../wt_old/cache; }
  OMP_NUM_THREADS=1 .venv/bin/python -m training.cli --config $cfg \
      --base-model checkpoints/release_v6_repair/best --resume > logs/probe_filler_case.log 2>&1 &
  (cd ../wt_old && OMP_NUM_THREADS=1 .venv/bin/python -m training.cli --config "$root/$cfg" \
      --base-model "$root/checkpoints/release_v6_repair/best" --out "$root/checkpoints/probe_filler_case_old" \
      --resume > "$root/logs/probe_filler_case_old.log" 2>&1) &
  wait
  ;;
score)
  . scripts/release_lib.sh
  mkdir -p $out
  for n in probe_filler_case probe_filler_case_old; do
    build_int8 checkpoints/$n/best build/$n
    use_shipped_windows build/$n
  done
  .venv/bin/python scripts/probe_filler_case.py models/default build/probe_filler_case_old build/probe_filler_case \
      --json $out/filler_case_swda_val.json
  for n in probe_filler_case probe_filler_case_old; do
    for data in ted_iwslt_dev2010 swda_val; do
      .venv/bin/python -m streampunct.case_eval --model build/$n \
          --data ../shared/data/cased_spoken/${data}_cased.txt --json $out/case_${data}_$n.json
    done
  done
  for valid in dev2010 swda_val; do
    .venv/bin/python -m benchmarks.compare_models build/probe_filler_case_old build/probe_filler_case \
        --valid $valid --json $out/compare_$valid.json
  done
  ;;
esac
