#!/usr/bin/env bash
# A 4-layer student (not shipped; docs/training.md, "A 4-layer student, trained longer"): release
# 2's first four transformer layers, distilled from the MPNet teacher's soft labels with release
# 3's data (training/configs/release_v3_l4b.toml). 2 CPU cores: ~20 + ~52 min of training, ~15 min
# to build, compare and tune. Needs release 3's inputs (cache/default_v2_fp32,
# cache/soft/v3_teacher.npz): scripts/release_v3.sh makes them. Each step can be re-run; the
# training steps continue an interrupted run (--resume).
#   bash scripts/release_fast.sh            # all steps
#   bash scripts/release_fast.sh build      # the int8 graph of the student (build/fast)
#   bash scripts/release_fast.sh compare    # validation only: the student against release 3
#   bash scripts/release_fast.sh tune       # offline and streaming window tuning on build/fast
# Validation (dev2010, SwDA validation) compares; the test-set figures in docs/training.md
# come from the commands listed there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results/release_fast
py=.venv/bin/python
step="${1:-all}"
. scripts/release_lib.sh
# Release 3, the model the student had to match, as shipped at 0f97950.
v3=build/v3_shipped
pinned_model 0f97950 $v3
if [[ "$step" == all ]]; then
  for need in cache/default_v2_fp32 cache/soft/v3_teacher.npz; do
    [[ -e $need ]] || { echo "missing $need: run scripts/release_v3.sh first" >&2; exit 1; }
  done
  # 1. release 2 cut to its first four transformer layers (weights, order and heads kept)
  [[ -d cache/default_v2_l4 ]] || $py -m training.drop_layers cache/default_v2_fp32 cache/default_v2_l4 --keep 0 1 2 3
  # 2. stage 1: release 3's recipe on the 4-layer start
  $py -m training.cli --config training/configs/release_v3.toml --base-model cache/default_v2_l4 \
      --set name=release_v3_l4 --resume
  # 3. stage 2: two more epochs at a lower rate; seed 14 draws another 3.2M labelled words,
  #    and the teacher file's other documents are added
  $py -m training.cli --config training/configs/release_v3_l4b.toml \
      --base-model checkpoints/release_v3_l4/best --resume
  $py -m training.checkpoint_report checkpoints/release_v3_l4b/best --data dev2010 swda_val \
      --json benchmarks/results/release_fast/report_release_v3_l4b.json
fi
cand="${CANDIDATE:-checkpoints/release_v3_l4b/best}"
if [[ "$step" == all || "$step" == build ]]; then
  # 4. the int8 graph, as the default's (7-bit weights, quantized embeddings)
  build_int8 "$cand" build/fast
fi
if [[ "$step" != tune ]]; then
  # 5. the student against release 3, on validation only
  compare_on_validation $v3 build/fast benchmarks/results/release_fast
fi
if [[ "$step" == all || "$step" == tune ]]; then
  # 6. the offline window, then the streaming left context, tuned on validation and written
  #    into build/fast/streampunct.json
  tune_geometry build/fast 20 25 30
fi
