#!/usr/bin/env bash
# Issue 8 capabilities, one small real run each at one matched budget: all-MiniLM-L6-v2,
# 296k words of TED talks (cased, so the case head has labels; the same talks for every
# run: data.max_train_words with seed 13), 2 epochs of batch 16 x 128 tokens, one thread
# per run, two queues side by side (one per core); validated on dev2010 (offline, W=126 L=30 R=15).
#
#   bash scripts/capabilities.sh          # train the six runs (resumable: rerun to continue)
#   bash scripts/capabilities.sh report   # dev2010 + SwDA val offline; streaming rc 0/1/2/4 (base, cut)
#
# Runs: cap_base (CE), cap_cut (30% of the spans cut at a random word), cap_noise
# (fillers/repetitions/restarts/ASR errors on 30% of the talks), cap_swda (SwDA train in
# the mix, same number of words), cap_case (truecasing head), cap_distill (soft labels
# of the shipped model on the same talks plus 150k TEDx caption words, KD + 0.5 CE).
# Logs: logs/cap_*.log; checkpoints: checkpoints/cap_*/; reports: benchmarks/results/capabilities/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p logs benchmarks/results/capabilities
py=.venv/bin/python
common=(--config training/configs/ce.toml --set 'data.train=["ted"]' --set data.max_train_words=296000
        --set optim.epochs=2 --set optim.threads=1 --set eval.window_left=30 --set eval.window_right=15
        --set eval.tune_windows=false --set optim.checkpoint_minutes=10)

train() {  # name [--set ...]
  local name=$1; shift
  if [ -f "checkpoints/$name/DONE" ]; then echo "skip $name (done)"; return; fi
  echo "train $name"
  $py -m training.cli "${common[@]}" "$@" --out "checkpoints/$name" --resume \
    >> "logs/$name.log" 2>&1
  touch "checkpoints/$name/DONE"
}

soft() {
  [ -f cache/soft/cap_default.npz ] && return
  $py -m training.distill label --teacher models/default --labelled ted --max-labelled-words 296000 \
    --unlabeled tedx --max-unlabeled-words 150000 --out cache/soft/cap_default.npz >> logs/cap_soft.log 2>&1
}

queue_a() {
  train cap_base
  train cap_noise --set data.noise.share=0.3
  train cap_case --set model.case_head=true
}

queue_b() {
  train cap_cut --set data.stream_cut_share=0.3
  soft
  # the same talks with the teacher's probabilities attached, plus the TEDx captions, for the
  # step count of cap_base (two epochs over the talks alone: 340 steps).
  train cap_distill --set 'data.soft_labels=["cache/soft/cap_default.npz"]' --set optim.max_steps=340
  train cap_swda --set 'data.train=["ted", "swda"]'
}

report() {
  for name in cap_base cap_cut cap_noise cap_swda cap_case cap_distill; do
    [ -f "checkpoints/$name/DONE" ] || { echo "skip $name (not trained)"; continue; }
    out=benchmarks/results/capabilities/$name.json
    [ -f "$out" ] && continue
    # Streaming (one window per word and right context: the costly part, ~10 min a run on
    # 2 cores) on dev2010 for the runs it compares: cuts against the baseline.
    stream=()
    case $name in cap_base|cap_cut) stream=(--right-context 0 1 2 4 --stream-data dev2010) ;; esac
    $py -m training.checkpoint_report "checkpoints/$name/best" --data dev2010 swda_val \
      "${stream[@]}" --json "$out"
  done
}

case "${1:-train}" in
  train) queue_a & queue_b; wait ;;
  report) report ;;
  *) echo "usage: $0 [train|report]" >&2; exit 2 ;;
esac
