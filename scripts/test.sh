#!/usr/bin/env bash
# Set up the full environment (training + test dependencies) and run the tests.
# Extra arguments go to pytest. Tests that need ../shared/data skip without it; the
# caption-page test needs Chromium and chromedriver (Debian: apt-get install chromium
# chromium-driver) and skips without them; the Triton server tests need
# scripts/setup_triton_server.sh's environment, which this script makes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh dev
# A real Triton server for the triton backend's tests (PyTriton, its own environment in
# cache/triton-server); without it those tests skip.
bash scripts/setup_triton_server.sh || echo "test.sh: no Triton server environment; the Triton server tests skip"
exec .venv/bin/python -m pytest -q "$@"
