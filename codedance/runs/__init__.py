"""The runs layer: every command that runs many episodes into a folder goes through it.

`RunDir` (one run directory: claim/refuse, ``run.json``, append/fail/resume), `arun_batch` (the
one batch driver, with an ``after`` hook), `AgentStats` (the one definition of calls, successes,
execution success, turns and tool share) and `trajectory_html` (the one trajectory renderer).
Users: the demo, synth, eval, the teacher's accuracy report and the CPU trainer's teacher stage.
"""

from codedance.runs.rundir import RunDir, episode_key, run_settings
from codedance.runs.stats import AgentStats, LabelRow, label_rows

__all__ = ["AgentStats", "LabelRow", "RunDir", "episode_key", "label_rows", "run_settings"]
