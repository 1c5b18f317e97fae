#!/usr/bin/env bash
# Set up the full environment (training + test dependencies) and run the tests.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh dev
exec .venv/bin/python -m pytest -q "$@"
