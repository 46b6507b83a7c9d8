#!/usr/bin/env bash
# SmolLM2 on the testbed (scripts/smol_testbed.py), stopped after TIMEOUT seconds (default 600):
#   scripts/smol_testbed.sh [--size tiny] [key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
exec timeout -k 10 "${TIMEOUT:-600}" env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  "$PY" scripts/smol_testbed.py "$@"
