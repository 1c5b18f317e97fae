#!/usr/bin/env bash
# What a dithered import costs at the start of training (training.onnx_import --dither 0.5,
# docs/training.md "Release 7"): the shipped models imported plainly and dithered, each scored on
# dev2010 in torch fp32 at its shipped window (training.checkpoint_report). Validation only.
#   bash scripts/probe_import_dither.sh        # JSON into benchmarks/results/import_dither/
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
out=benchmarks/results/import_dither
mkdir -p $out cache/import_dither
. scripts/release_lib.sh
minilm_config cache/import_dither/minilm5 5
[[ -f cache/import_dither/mpnet/config.json ]] || mpnet_config cache/import_dither/mpnet models/base/tokenizer.json
for m in default base; do
  cfg=cache/import_dither/minilm5
  [[ $m == base ]] && cfg=cache/import_dither/mpnet
  for d in 0 0.5; do
    $py -m training.onnx_import models/$m cache/import_dither/${m}_$d --base-model $cfg --dither $d --seed 15
    $py -m training.checkpoint_report cache/import_dither/${m}_$d --data dev2010 --json $out/${m}_dither_$d.json
  done
done
$py - $out <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for m in ("default", "base"):
    f = [json.loads((out / f"{m}_dither_{d}.json").read_text())["sources"]["dev2010"]["offline"]["overall_f1"]
         for d in ("0", "0.5")]
    print(f"models/{m}: dev2010 imported plainly {f[0]:.2f}, dithered {f[1]:.2f} ({f[1] - f[0]:+.2f})")
PY
