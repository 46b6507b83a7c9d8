"""Synthesized SFT data: verified teacher trajectories of the task world (see docs/world.md).

    from codedance.synth import SynthConfig, run_synth
    result = run_synth(SynthConfig(n=50, skills=("counting", "search"), out="runs/synth"))

Modules: ``run`` (the run directory, resume, exports), ``verify`` (the checks and rejection
reasons), ``boxes`` (crop boxes recorded by an instrumented re-run). Imports no torch.
"""

from codedance.synth.run import SynthConfig, SynthError, SynthResult, run_synth
from codedance.synth.verify import REASONS, Verdict, averify

__all__ = ["REASONS", "SynthConfig", "SynthError", "SynthResult", "Verdict", "averify", "run_synth"]
