#!/usr/bin/env bash
# Method ablation at one matched budget: every method trains all-MiniLM-L6-v2
# from the same pretrained weights on TED dev2012 (296k words) for 320
# punctuation steps (2 epochs x 160 batches of 16 x 128 tokens; the
# adversarial / POS runs add 320 POS batches), seed 13, validated on TED
# dev2010 with the offline decoder at W=126 L=30 R=15 (the window tuned on
# validation for the shipped model). Then every checkpoint is scored once on
# test2011 / test2011asr by benchmarks.ablation.
#
#   bash scripts/ablation.sh            # train (two queues, one thread per run) + score
#   bash scripts/ablation.sh extra      # the two runs of extra() below
#   bash scripts/ablation.sh score      # score all nine checkpoints (+ the shipped model)
#
# About 90 minutes on 2 CPU cores. Two one-thread runs side by side train faster in all
# than one two-thread run here (3.15 s/batch each vs 2.2 s/batch: 1.4x the throughput).
# Logs: logs/abl_*.log; checkpoints: checkpoints/abl_*/ (git-ignored); results:
# benchmarks/results/ablation.json.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p logs
py=.venv/bin/python
common=(--set optim.epochs=2 --set optim.threads=1 --set eval.window_left=30 --set eval.window_right=15
        --set eval.tune_windows=false)

train() {  # name config [--set ...]
  local name=$1 config=$2; shift 2
  if [ -f "checkpoints/$name/ABLATION_DONE" ]; then
    echo "skip $name (done)"; return
  fi
  echo "train $name"
  $py -m training.cli --config "$config" "${common[@]}" "$@" \
    --out "checkpoints/$name" > "logs/$name.log" 2>&1
  touch "checkpoints/$name/ABLATION_DONE"
}

# Disc-ST students: dev2012 + 150k pseudo-labelled TEDx words (ASR captions), stopped at
# 320 steps, the budget of the CE run (step-matched), one round.
st=(--set method.self_training.max_iterations=1 --set data.max_unlabeled_words=150000
    --set optim.max_steps=320)

queue_a() {
  train abl_ce training/configs/ce.toml
  train abl_scl_paper training/configs/scl.toml
  train abl_scl_clean training/configs/scl.toml --set 'method.scl.mode="clean"'
  train abl_focal training/configs/focal.toml
}

queue_b() {
  train abl_adversarial training/configs/adversarial.toml
  train abl_blstm_crf training/configs/ce.toml --set 'model.head="blstm_crf"' --set optim.head_lr=1e-3
  # teacher: abl_ce (same size and budget as the student: the paper's self-training loop)
  while [ ! -f checkpoints/abl_ce/ABLATION_DONE ]; do sleep 30; done
  train abl_disc_st_self training/configs/disc_st.toml "${st[@]}" \
    --set 'method.self_training.teacher="checkpoints/abl_ce/best"'
}

# Two more rows, run after the two queues (about 40 + 20 minutes): POS multi-task without
# the discriminator, and Disc-ST with the shipped int8 model as the (stronger) teacher.
#   bash scripts/ablation.sh extra
extra() {
  train abl_pos_mtl training/configs/adversarial.toml --set method.adversarial.use_discriminator=false
  train abl_disc_st_shipped training/configs/disc_st.toml "${st[@]}" \
    --set 'method.self_training.teacher="models/default"'
}

case "${1:-}" in
  score) ;;
  extra) extra; exit 0 ;;
  *) queue_a & a=$!; queue_b & b=$!; wait $a $b; extra ;;
esac

$py -m benchmarks.ablation \
  abl_ce=checkpoints/abl_ce/best abl_focal=checkpoints/abl_focal/best \
  abl_scl_paper=checkpoints/abl_scl_paper/best abl_scl_clean=checkpoints/abl_scl_clean/best \
  abl_blstm_crf=checkpoints/abl_blstm_crf/best abl_pos_mtl=checkpoints/abl_pos_mtl/best \
  abl_adversarial=checkpoints/abl_adversarial/best \
  abl_disc_st_self=checkpoints/abl_disc_st_self/student_1/best \
  abl_disc_st_shipped=checkpoints/abl_disc_st_shipped/student_1/best \
  shipped=models/default \
  --json benchmarks/results/ablation.json
