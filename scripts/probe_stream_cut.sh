#!/usr/bin/env bash
# Streaming-aware cuts on release 6, a validation-only probe (training/configs/probe_stream_cut.toml
# says what and why; docs/training.md, "Streaming-aware cuts on release 6"): train, build int8
# with release 6's windows, compare on validation with release 6 (offline, live, case, density),
# live truecasing, and streaming right contexts 1/2/4 on dev2010.
#   bash scripts/probe_stream_cut.sh
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m training.cli --config training/configs/probe_stream_cut.toml \
    --base-model checkpoints/release_v6_repair/best --resume
. scripts/release_lib.sh
build_int8 checkpoints/probe_stream_cut/best build/probe_cut
use_shipped_windows build/probe_cut
out=benchmarks/results/probe_stream_cut
mkdir -p $out
compare_on_validation models/default build/probe_cut $out ted_iwslt_dev2010 swda_val
.venv/bin/python scripts/probe_live_case.py build/probe_cut --biases 0 > $out/live_case.txt 2>&1
.venv/bin/streampunct evaluate --model build/probe_cut --text --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt --right-context 1 2 4 --json $out/dev2010_rc_probe.json
.venv/bin/streampunct evaluate --model models/default --text --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt --right-context 1 2 4 --json $out/dev2010_rc_release6.json
