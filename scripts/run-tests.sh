#!/usr/bin/env bash
# Installs what the tests need (see scripts/setup.sh) and runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/run-tests.sh tests/sandbox -x
set -euo pipefail
cd "$(dirname "$0")/.."
CODEDANCE_EXTRAS=${CODEDANCE_EXTRAS-dev} scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
