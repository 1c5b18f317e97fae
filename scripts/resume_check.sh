#!/usr/bin/env bash
# Resume on a real run: the same small training run (all-MiniLM-L6-v2, TED talks, 60 steps)
# once straight through, and once stopped by SIGTERM part-way and continued with --resume.
# Prints both runs' validation F1 and the largest weight difference (0 when resume is exact).
#   bash scripts/resume_check.sh        # ~6 min on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
common=(--config training/configs/ce.toml --set 'data.train=["ted"]' --set data.max_train_words=296000
        --set optim.max_steps=60 --set optim.threads=1 --set eval.window_left=30 --set eval.window_right=15
        --set eval.tune_windows=false --set data.noise.share=0.3 --set data.stream_cut_share=0.3
        --set optim.log_every=5)
rm -rf checkpoints/resume_a checkpoints/resume_b
mkdir -p logs
$py -m training.cli "${common[@]}" --out checkpoints/resume_a > logs/resume_a.log 2>&1
$py -m training.cli "${common[@]}" --out checkpoints/resume_b > logs/resume_b.log 2>&1 &
pid=$!
# stop it once it has trained a while (the state is written on SIGTERM after the step in flight)
until grep -q '"step": 25' checkpoints/resume_b/metrics.jsonl 2>/dev/null; do sleep 1; done
kill -TERM "$pid"; wait "$pid" || true
grep -o '"type": "interrupted"[^}]*' checkpoints/resume_b/metrics.jsonl
$py -m training.cli "${common[@]}" --out checkpoints/resume_b --resume >> logs/resume_b.log 2>&1
$py - <<'PY'
import json
from safetensors.numpy import load_file
def final(run):
    done = [json.loads(x) for x in open(f"checkpoints/{run}/metrics.jsonl") if '"done"' in x][-1]
    return done["best_f1"], load_file(f"checkpoints/{run}/best/model.safetensors")
fa, a = final("resume_a")
fb, b = final("resume_b")
diff = max(float(abs(a[k] - b[k]).max()) for k in a)
print(json.dumps({"straight_f1": round(fa, 4), "resumed_f1": round(fb, 4), "max_weight_diff": diff}))
PY
