"""`EvalConfig`: every setting of ``codedance eval`` as one tree for the one loader
(`codedance.config`: presets in ``codedance/presets/eval/``, YAML files, ``key=value``).

The episode knobs are the shared `codedance.rollout.EpisodeSettings` (with the paper's eval turn
budget, 10). ``tasks`` adds a Task JSONL (``codedance data import codedance-rl``, ``codedance world
gen``; ``tasks_split``: one split of it) as the benchmark ``tasks``; ``benchmarks`` left empty is
the paper's eleven without ``tasks`` and none besides it with ``tasks``.
`EvalConfig.run_settings` turns the tree into the runner's `EvalSettings`, which checks every
value before a server is contacted or a folder written. Not here: the API key (a
secret is never printed by ``--print-config`` nor saved with the run; ``--api-key`` /
``$OPENAI_API_KEY``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from codedance.config import not_resumed
from codedance.errors import SettingsError
from codedance.grading import JUDGE_SERVER
from codedance.policy.server_config import ServerConfig
from codedance.rollout import EVAL_MAX_TURNS, EpisodeSettings


@dataclass(frozen=True)
class EvalConfig:
    benchmarks: str = ""  # '' = paper (no --tasks) or only the tasks (--tasks)
    tasks: str = ""  # a Task JSONL or import folder
    tasks_split: str = ""  # '' = every row
    out: str = ""
    server: ServerConfig = field(default_factory=ServerConfig)
    episode: EpisodeSettings = field(default_factory=lambda: EpisodeSettings(max_turns=EVAL_MAX_TURNS))
    profiles: str = ""  # a YAML file of user prompt profiles
    no_tools: bool = False
    limit: int | None = None  # None: every sample
    samples: int = 1
    scoring: str = "vlmevalkit"
    judge: ServerConfig = JUDGE_SERVER  # the judge of judge-based metrics (url '' = none)
    data: tuple[str, ...] = ()  # NAME=PATH
    lmu_data: str = ""  # '' = $LMUData or ~/LMUData
    pixmo_cache: str = ""  # '' = <lmu_data>/pixmo_cache
    fetch_images: bool = False
    concurrency: int = not_resumed(64)
    stop_after: int = not_resumed(10)
    agent: str = "codedance"  # the protocol (`codedance.agents`): codedance, codedance-paper, deepeyes, deepeyesv2

    def lmu_dir(self) -> Path:
        return Path(self.lmu_data or os.environ.get("LMUData", "~/LMUData")).expanduser()

    def run_settings(self):  # -> EvalSettings
        """The runner's `EvalSettings` (every value checked; nothing contacted or written)."""
        from codedance.eval.runner import EvalSettings
        from codedance.eval.spec import get_spec, parse_benchmarks

        if not self.server.url or not self.out:
            raise SettingsError("give the model server and the run folder: --model URL --out DIR "
                                "(or server.url=... out=...)")
        s = self.server
        if s.max_tokens < 1 or s.timeout_s <= 0 or s.retries < 0:
            raise SettingsError(f"--max-tokens must be at least 1, --request-timeout above 0 and --retries at "
                                f"least 0 (got {s.max_tokens}, {s.timeout_s}, {s.retries})")
        if self.limit is not None and (not isinstance(self.limit, int) or isinstance(self.limit, bool)):
            raise SettingsError(f"limit: expected a whole number, got {self.limit!r}")
        pairs = [("tasks", str(Path(self.tasks).expanduser()))] if self.tasks else []
        for value in self.data:
            name, sep, path = value.partition("=")
            if not sep:
                raise SettingsError(f"--data expects NAME=PATH, got {value!r}")
            pairs.append((get_spec(name).name, str(Path(path).expanduser())))
        lmu = self.lmu_dir()
        names = self.benchmarks or ("" if self.tasks else "paper")
        specs = parse_benchmarks(names) if names else ()
        if self.tasks and get_spec("tasks") not in specs:
            specs += (get_spec("tasks"),)
        from codedance.agents import get_agent

        episode = get_agent(self.agent).episode_config(self.episode.episode_config(profiles=self.profiles or None))
        return EvalSettings(
            benchmarks=specs, tasks_split=self.tasks_split, agent=self.agent, episode=episode,
            no_tools=self.no_tools, limit=self.limit, concurrency=self.concurrency,
            exec_timeout_s=self.episode.exec_timeout_s, lmu_dir=str(lmu), data_paths=tuple(pairs),
            pixmo_cache=self.pixmo_cache or str(lmu / "pixmo_cache"), fetch_images=self.fetch_images,
            scoring=self.scoring, samples=self.samples, temperature=s.temperature,
            stop_after_connection_failures=self.stop_after)
