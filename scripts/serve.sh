#!/usr/bin/env bash
# Set up (first run only) and start the server on the shipped default model.
# Extra arguments go to `streampunct serve` (e.g. --port 8765 --max-batch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import streampunct, onnxruntime, websockets" 2>/dev/null; then
  bash scripts/setup_env.sh serve
fi
exec .venv/bin/streampunct serve "$@"
