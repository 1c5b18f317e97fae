#!/usr/bin/env bash
# Release 3 default model candidate: release 2 (models/default) continued with the MPNet
# teacher's per-word soft labels (training/configs/release_v3.toml). 2 CPU cores: ~55 min to
# label with the fp32 teacher checkpoint in bf16 (~1.6 h with the shipped int4 models/base),
# ~30 min to train, ~15 min to build, compare and score. Each step can be re-run; the
# training step continues an interrupted run (--resume).
#   bash scripts/release_v3.sh            # all steps
#   bash scripts/release_v3.sh compare    # only the validation comparison with release 2
#   bash scripts/release_v3.sh ship       # offline and streaming window tuning on build/v3 (then copy)
# Validation (dev2010, SwDA validation) decides whether the candidate replaces
# models/default; the test sets are scored once, after that decision, by ship_model.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results/release_v3 cache/soft
py=.venv/bin/python
step="${1:-all}"
. scripts/release_lib.sh
# Release 2, the start of this recipe, as shipped at 8acdd6a.
v2=build/v2_shipped
pinned_model 8acdd6a $v2
# The teacher: the fp32 checkpoint where the work tree still has it (bf16 autocast), else
# the shipped int4 graph (slower, same model).
teacher="${TEACHER:-checkpoints/release_base/best}"
teacher_args=(--teacher "$teacher" --bf16)
[[ -f $teacher/config.toml || -f $teacher/streampunct.json ]] || teacher_args=(--teacher models/base)
if [[ "$step" == all ]]; then
  # 1. release 2 back into a training checkpoint (de-quantized weights)
  [[ -d cache/default_v2_fp32 ]] || $py -m training.onnx_import $v2 cache/default_v2_fp32
  # 2. the teacher's soft labels: 2.0M of the student's 3.2M labelled words (the same
  #    documents: same sources, seed and order, shorter cap) and 0.4M words of TEDx captions
  [[ -f cache/soft/v3_teacher.npz ]] || $py -m training.distill label "${teacher_args[@]}" \
      --labelled ted dev2012 swda --max-labelled-words 2000000 --seed 13 \
      --unlabeled tedx --max-unlabeled-words 400000 --out cache/soft/v3_teacher.npz
  # 3. continue training release 2 with KD + CE (resumes an interrupted run)
  $py -m training.cli --config training/configs/release_v3.toml --base-model cache/default_v2_fp32 --resume
  # 4. WiSE-FT with the start, t chosen on validation
  for t in 0.5 0.75; do
    n=$($py -c "print(round($t * 100))")
    $py -m training.interpolate cache/default_v2_fp32 checkpoints/release_v3/best --t "$t" \
        --out "checkpoints/release_v3_t$n"
  done
  for c in release_v3/best release_v3_t50 release_v3_t75; do
    $py -m training.checkpoint_report "checkpoints/$c" --data dev2010 swda_val \
        --json "benchmarks/results/release_v3/report_${c%/best}.json"
  done
  $py -m training.checkpoint_report cache/default_v2_fp32 --data dev2010 swda_val \
      --json benchmarks/results/release_v3/report_default_v2_fp32.json
fi
cand="${CANDIDATE:-checkpoints/release_v3/best}"
if [[ "$step" == all || "$step" == build ]]; then
  # 5. the int8 candidate (7-bit weights, quantized embeddings, as shipped today)
  build_int8 "$cand" build/v3
fi
if [[ "$step" != ship ]]; then
  # 6. candidate vs release 2 on validation only
  compare_on_validation $v2 build/v3 benchmarks/results/release_v3
fi
if [[ "$step" == all || "$step" == ship ]]; then
  # 7. the offline window re-tuned on validation, then the streaming left context (a live
  #    dev2010 stream at the server's defaults), both written into build/v3/streampunct.json
  tune_geometry build/v3 20 30
  echo "to ship: copy build/v3/{model.int8.onnx,model.int8.onnx.json,tokenizer.json,streampunct.json}"
  echo "into models/default, then score the test sets once (models/default/MODEL_CARD.md, Figures)"
fi
