#!/usr/bin/env bash
# Release 2 default model, end to end (2 CPU cores: ~5 min to import and label,
# ~45 min to train, ~15 min to build, compare and score). Each step can be re-run;
# the training step continues an interrupted run (--resume).
#   bash scripts/release_v2.sh            # all steps
#   bash scripts/release_v2.sh compare    # only the validation comparison with release 1
#   bash scripts/release_v2.sh live       # after shipping: live figures through the server, case on test2011
# Validation (dev2010, SwDA validation) decides whether the candidate replaces
# models/default; the test sets are scored once, after that decision, by ship_model.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results/release_v2
py=.venv/bin/python
step="${1:-all}"
. scripts/release_lib.sh
# Release 1 (release_disc_st), the start of this recipe, as it was shipped at fb7ea14.
v1=build/v1
pinned_model fb7ea14 $v1
if [[ "$step" == live ]]; then
  # 7. after shipping: live through the server (test sets for the final report only)
  $py -c "
from streampunct.convert import text_to_word_labels
from streampunct.labels import LABELS
w, l = text_to_word_labels(open('../shared/data/cased_spoken/swda_val_cased.txt').read())
open('cache/swda_val.tsv', 'w').write(''.join(f'{a}\t{LABELS[b]}\n' for a, b in zip(w, l)))"
  .venv/bin/streampunct bench live --name live_test2011
  .venv/bin/streampunct bench live --data data/iwslt2011/test2011asr --name live_test2011asr
  .venv/bin/streampunct bench live --data cache/swda_val.tsv --name live_swda_val
  $py -m streampunct.case_eval --data data/iwslt2011/test2011_cased.txt \
      --json benchmarks/results/release_v2/case_test2011.json
  exit 0
fi
if [[ "$step" == all ]]; then
  # 1. the shipped int8 graph back into a training checkpoint (de-quantized weights)
  [[ -d cache/default_fp32 ]] || $py -m training.onnx_import $v1 cache/default_fp32
  # 2. its soft labels on 0.5M words of TEDx automatic captions (real ASR text)
  [[ -f cache/soft/v2_tedx.npz ]] || $py -m training.distill label --teacher cache/default_fp32 \
      --unlabeled tedx --max-unlabeled-words 500000 --seed 13 --out cache/soft/v2_tedx.npz
  # 3. continue training it: TED + dev2012 + SwDA, noise, case head, soft labels
  $py -m training.cli --config training/configs/release_v2.toml --base-model cache/default_fp32 --resume
  # 4. weight-space interpolation with the start (WiSE-FT): t chosen on validation
  #    (benchmarks/results/release_v2/report_*.json; docs/training.md, "Release 2")
  for t in 0.5 0.7 0.85; do
    n=$($py -c "print(round($t * 100))")
    $py -m training.interpolate cache/default_fp32 checkpoints/release_v2/best --t "$t" \
        --out "checkpoints/release_v2_t$n"
  done
  for c in release_v2/best release_v2_t50 release_v2_t70 release_v2_t85; do
    $py -m training.checkpoint_report "checkpoints/$c" --data dev2010 swda_val --right-context \
        --json "benchmarks/results/release_v2/report_${c%/best}.json"
  done
  $py -m training.checkpoint_report cache/default_fp32 --data dev2010 swda_val --right-context \
      --json benchmarks/results/release_v2/report_default_fp32.json
  # 5. the int8 candidate (7-bit weights, quantized embeddings, as shipped today)
  build_int8 checkpoints/release_v2_t70 build/v2
fi
# 6. candidate vs release 1 on validation only
compare_on_validation $v1 build/v2 benchmarks/results/release_v2 ted_iwslt_dev2010 swda_val
echo "if the candidate wins on validation: bash scripts/ship_model.sh checkpoints/release_v2_t70"
