#!/usr/bin/env bash
# Installs what codedance needs (see scripts/setup.sh) and runs the main job: the offline demo.
# The expert teacher solves tasks from the synthetic world by writing code that runs in the real
# jailed sandbox; answers are graded and rewarded (R_BAT) and GRPO advantages computed. Writes
# runs/demo/ (trajectories, metrics, report.html) and prints the summary table. Extra arguments go
# to `codedance demo` (e.g. --tasks 36 --rollouts 8). `codedance sandbox check` is the sandbox's
# own self-check.
set -euo pipefail
cd "$(dirname "$0")/.."
CODEDANCE_EXTRAS=${CODEDANCE_EXTRAS-world} scripts/setup.sh
.venv/bin/codedance sandbox check \
  || echo "run-main: some sandbox properties do not hold on this host (see above); the demo runs anyway" >&2
exec .venv/bin/codedance demo "$@"
