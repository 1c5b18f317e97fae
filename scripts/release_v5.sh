#!/usr/bin/env bash
# Release 5 (shipped): a 5-layer default model. Release 4 (6-layer MiniLM) with
# its last transformer layer dropped, distilled from release 4 itself for one epoch
# (training/configs/release_v5.toml). Five layers cost five sixths of six per token, but the tuned
# streaming window is 5 tokens longer, so streaming costs what release 4's does.
# 2 CPU cores (AVX2): ~15 min of labelling, ~55 min of training (fp32), ~12 min to build, tune and
# compare, ~20 min to score.
# Needs nothing but the repository (release 4 is models/default as shipped at 1d21ec1). Each step
# can be re-run; training continues an interrupted run (--resume).
#   bash scripts/release_v5.sh            # all steps
#   bash scripts/release_v5.sh build      # the int8 graph of the candidate (build/v5)
#   bash scripts/release_v5.sh tune       # offline and streaming window tuning on build/v5
#   bash scripts/release_v5.sh compare    # validation only: the candidate against release 4
#   bash scripts/release_v5.sh ship       # after the validation decision: build/v5 into models/default
#   bash scripts/release_v5.sh score      # then, once: the test sets through models/default
# Validation (dev2010, SwDA validation) decides; the test sets are scored once, after that
# decision (docs/training.md, "Release 5").
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/release_v5
mkdir -p $out
py=.venv/bin/python
step="${1:-all}"
. scripts/release_lib.sh
# Release 4, the model to match, as shipped at 1d21ec1.
v4=build/v4_shipped
pinned_model 1d21ec1 $v4
if [[ "$step" == all ]]; then
  # 1. release 4's int8 graph back as a checkpoint, cut to its first five layers
  [[ -d cache/v4_fp32 ]] || $py -m training.onnx_import $v4 cache/v4_fp32
  [[ -d cache/v4_l5 ]] || $py -m training.drop_layers cache/v4_fp32 cache/v4_l5 --keep 0 1 2 3 4
  # 2. release 4 (its int8 graph, both heads) labels 2.4M of the student's 3.2M labelled words
  #    (same sources, seed and order) and 0.4M words of TEDx captions
  [[ -f cache/soft/v5_r4.npz ]] || $py -m training.distill label --teacher $v4 \
      --labelled ted dev2012 swda --max-labelled-words 2400000 --seed 15 \
      --unlabeled tedx --max-unlabeled-words 400000 --out cache/soft/v5_r4.npz
  # 3. one epoch of KD + CE (resumes an interrupted run)
  $py -m training.cli --config training/configs/release_v5.toml --base-model cache/v4_l5 --resume
  $py -m training.learning_curve checkpoints/release_v5 --out $out/learning_curve
  $py -m training.checkpoint_report checkpoints/release_v5/best --data dev2010 swda_val \
      --json $out/report_release_v5.json
fi
# 4-8. the int8 graph; the offline window and the streaming left context, tuned on validation;
# the candidate against release 4 on validation; after that decision, ship; then score once
candidate_steps "$step" "${CANDIDATE:-checkpoints/release_v5/best}" build/v5 $v4 $out 15 20 25
