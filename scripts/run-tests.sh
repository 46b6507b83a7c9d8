#!/usr/bin/env bash
# Installs what the tests need (see scripts/setup.sh) and runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/run-tests.sh tests/sandbox -x
# As root, the suite runs in a fresh PID namespace (unshare), so that even a sandbox bug could
# not let hostile test code reach the host's processes; the hostile tests also assert the
# sandbox's own jail before running anything hostile.
set -euo pipefail
cd "$(dirname "$0")/.."
# dev: test tools; train: torch (CPU), transformers, TRL and verl, so the training tests run too;
# serve: aiohttp, for `codedance sandbox serve` and its tests
# chromium: the demo's HTML report is checked in real headless Chromium
CODEDANCE_EXTRAS=${CODEDANCE_EXTRAS-dev,train,serve} CODEDANCE_DEBIAN_EXTRAS=${CODEDANCE_DEBIAN_EXTRAS-chromium} scripts/setup.sh
if [ "$(id -u)" = 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
  exec unshare --pid --fork --mount-proc .venv/bin/python -m pytest -m "" "$@"
fi
exec .venv/bin/python -m pytest -m "" "$@"
