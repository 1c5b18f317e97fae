#!/usr/bin/env bash
# Set up (first run only) and start the server on the shipped default model.
# Extra arguments go to `streampunct serve` (e.g. --port 8765 --max-batch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import streampunct, onnxruntime, websockets" 2>/dev/null; then
  bash scripts/setup_env.sh serve
fi
# glibc's malloc arenas let a long-running server's RSS creep (+17.9 MB/h in a 29-min
# soak); two arenas keep it flat (+1.3 MB/h, same run; docs/results.md, "Soak").
export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
exec .venv/bin/streampunct serve "$@"
