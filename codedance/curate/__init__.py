"""The data engine (`codedance curate`): the paper's model-in-the-loop SFT data pipeline.

    from codedance.curate import load_config, run_curate
    result = run_curate(load_config("curate.yaml"))

Modules: `config` (the YAML), `sources` (adapters, dedup), `endpoints` (bounded, retried,
breaker-guarded servers), `inspectors` (Tables 5 and 7), `filtering` (weak-to-strong),
`atomic` (boxes, rule filter, trajectories), `drawing` (open-ended operations),
`math_recipe` (Tables 8-9), `judging` (the judge's verdict), `verification`, `pipeline` (stages,
resume, export), `report`. See docs/curate.md.
"""

from codedance.curate.config import CurateConfig, CurateError, load_config, parse_config
from codedance.curate.pipeline import CurateResult, plan, run_curate

__all__ = [
    "CurateConfig",
    "CurateError",
    "CurateResult",
    "load_config",
    "parse_config",
    "plan",
    "run_curate",
]
