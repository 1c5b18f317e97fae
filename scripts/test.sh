#!/usr/bin/env bash
# Set up the full environment (training + test dependencies) and run the tests.
# Extra arguments go to pytest. Tests that need ../shared/data skip without it; the
# caption-page test needs Chromium and chromedriver (Debian: apt-get install chromium
# chromium-driver) and skips without them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh dev
exec .venv/bin/python -m pytest -q "$@"
