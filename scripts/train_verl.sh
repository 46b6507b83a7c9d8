#!/usr/bin/env bash
# Launch CodeDance RL on stock verl 0.9.1 with a preset from codedance/presets/verl.
#   bash scripts/train_verl.sh codedance/presets/verl/paper_qwen25vl_7b.yaml [hydra overrides...]
# Environment: DATA (folder with train/val parquet), MODEL, JUDGE_URL, JUDGE_MODEL, JUDGE_POLICY,
# NNODES (read by the presets); CODEDANCE_PROMPT_PROFILE and CODEDANCE_PROFILES (read by the agent
# loop YAML: e.g. codedance-rl from an import's profiles.yaml). GPU nodes: pip install -e ".[gpu]"
# (docs/verl.md).
set -euo pipefail
preset="${1:?usage: train_verl.sh PRESET.yaml [overrides...]}"; shift
preset_dir="$(cd "$(dirname "$preset")" && pwd)"
preset_name="$(basename "$preset" .yaml)"
# verl imports these modules in every process (driver, Ray workers): agent loop, estimators, trainer.
export VERL_USE_EXTERNAL_MODULES="codedance.integrations.verl"
export CODEDANCE_AGENT_LOOP_YAML="${CODEDANCE_AGENT_LOOP_YAML:-$preset_dir/agent_loop.yaml}"
# Ray workers on other nodes inherit nothing from this shell: pass the variables explicitly.
profile_env=()
for name in CODEDANCE_PROMPT_PROFILE CODEDANCE_PROFILES; do
  if [ -n "${!name:-}" ]; then
    value="${!name}"
    [ "$name" = CODEDANCE_PROFILES ] && value="$(cd "$(dirname "$value")" && pwd)/$(basename "$value")"
    profile_env+=("+ray_kwargs.ray_init.runtime_env.env_vars.$name=$value")
  fi
done
exec python -m verl.trainer.main_ppo --config-path "$preset_dir" --config-name "$preset_name" \
  "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=$VERL_USE_EXTERNAL_MODULES" \
  "+ray_kwargs.ray_init.runtime_env.env_vars.CODEDANCE_AGENT_LOOP_YAML=$CODEDANCE_AGENT_LOOP_YAML" \
  "${profile_env[@]}" "$@"
