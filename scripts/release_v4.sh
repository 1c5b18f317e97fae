#!/usr/bin/env bash
# Release 4 (shipped): release 3 (6-layer MiniLM) trained for two more epochs with
# release 3's sources and the MPNet teacher's soft labels (training/configs/release_v4.toml), the
# recipe that lifted the 4-layer student by 2.3 dev2010 points. Same architecture as release 3,
# so the same cost per window. 2 CPU cores: ~85 min of training, ~20 min to build, compare and
# tune. Needs release 3's inputs (checkpoints/release_v3/best, cache/soft/v3_teacher.npz):
# scripts/release_v3.sh makes them. Each step can be re-run; training continues an interrupted
# run (--resume).
#   bash scripts/release_v4.sh            # all steps
#   bash scripts/release_v4.sh build      # the int8 graph of the candidate (build/v4)
#   bash scripts/release_v4.sh tune       # offline and streaming window tuning on build/v4
#   bash scripts/release_v4.sh compare    # validation only: the candidate against release 3
#   bash scripts/release_v4.sh ship       # after the validation decision: build/v4 into models/default
#   bash scripts/release_v4.sh score      # then, once: the test sets through models/default
# Validation (dev2010, SwDA validation) decides; the test sets are scored once, after that
# decision, with the commands in docs/training.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/release_v4
mkdir -p $out
py=.venv/bin/python
sp=.venv/bin/streampunct
step="${1:-all}"
. scripts/release_lib.sh
# Release 3, the model to beat, as shipped at 0f97950.
v3=build/v3_shipped
pinned_model 0f97950 $v3
if [[ "$step" == all ]]; then
  for need in checkpoints/release_v3/best cache/soft/v3_teacher.npz; do
    [[ -e $need ]] || { echo "missing $need: run scripts/release_v3.sh first" >&2; exit 1; }
  done
  # 1. two more epochs at a lower rate; seed 15 draws another 3.2M labelled words, and the
  #    teacher file's other documents are added (resumes an interrupted run)
  $py -m training.cli --config training/configs/release_v4.toml \
      --base-model checkpoints/release_v3/best --resume
  $py -m training.learning_curve checkpoints/release_v4 --out $out/learning_curve
  $py -m training.checkpoint_report checkpoints/release_v4/best --data dev2010 swda_val \
      --json $out/report_release_v4.json
fi
# 2-6. the int8 graph (7-bit weights, quantized embeddings); the offline window, then the
# streaming left context (fewer tokens per window is cheaper streaming), tuned on validation;
# the candidate against release 3 on validation; after that decision, ship; then score once
# (the test sets, learned case, live streams) and the load at the defaults
candidate_steps "$step" "${CANDIDATE:-checkpoints/release_v4/best}" build/v4 $v3 $out 15 20 25
if [[ "$step" == score ]]; then
  $sp bench load --sessions 250 325 400 --out-dir $out --name load
fi
