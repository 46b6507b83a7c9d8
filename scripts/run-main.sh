#!/usr/bin/env bash
# Installs what codedance needs (see scripts/setup.sh) and runs the main job: the sandbox's
# self-check on the bundled example image, printing the isolation level and each property.
set -euo pipefail
cd "$(dirname "$0")/.."
CODEDANCE_EXTRAS=${CODEDANCE_EXTRAS-} scripts/setup.sh
exec .venv/bin/codedance sandbox check "$@"
