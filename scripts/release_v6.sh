#!/usr/bin/env bash
# Release 6 candidate: release 5 (5-layer MiniLM, int8) distilled on a lent GPU from the MPNet
# teacher continued there (scripts/gpu_release.sh: teacher dev2010 73.4 -> 77.58; student
# checkpoints/gpu_student/best, brought back as fp16 weights). This script does the CPU part:
#   bash scripts/release_v6.sh            # build, tune and compare (validation only)
#   bash scripts/release_v6.sh build      # the int8 graph of the candidate (build/v6)
#   bash scripts/release_v6.sh tune       # offline and streaming window tuning on build/v6
#   bash scripts/release_v6.sh compare    # validation only: the candidate against release 5
#   bash scripts/release_v6.sh ship       # after the validation decision: build/v6 into models/default
#   bash scripts/release_v6.sh score      # then, once: the test sets through models/default
# Decision rule, written down before the comparison ran: ship if, int8 against int8 in one
# sitting, dev2010 offline F1 rises by at least 0.3, live dev2010 (server defaults) falls by
# at most 0.2, SwDA validation (offline and live) falls by at most 1.0 and learned case on
# dev2010 by at most 0.5. The test sets are scored once, after that decision.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/release_v6
mkdir -p $out
step="${1:-all}"
. scripts/release_lib.sh
# Release 5, the model to beat, as shipped at 54b6f8f.
v5=build/v5_shipped
pinned_model 54b6f8f $v5
candidate_steps "$step" "${CANDIDATE:-checkpoints/gpu_student/best}" build/v6 $v5 $out 20 25 30
