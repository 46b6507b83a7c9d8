"""`EvalConfig`: every setting of ``codedance eval`` as one tree for the one loader
(`codedance.config`: presets in ``codedance/presets/eval/``, YAML files, ``key=value``).

The episode knobs are the shared `codedance.rollout.EpisodeSettings` (with the paper's eval turn
budget, 10). ``tasks`` adds a Task JSONL (``codedance data import codedance-rl``, ``codedance world
gen``; ``tasks_split``: one split of it) as the benchmark ``tasks``; ``benchmarks`` left empty is
the paper's eleven without ``tasks`` and none besides it with ``tasks``.
`EvalConfig.run_settings` checks every value before a server is contacted or a folder written
and resolves the tree into `EvalSettings` (benchmark specs, the agent's episode, data paths), a
view that reads every other value through the config. Not here: the API key (a
secret is never printed by ``--print-config`` nor saved with the run; ``--api-key`` /
``$OPENAI_API_KEY``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from codedance.config import bounded, check_bounds, not_resumed
from codedance.errors import SettingsError
from codedance.eval.spec import BenchmarkSpec
from codedance.grading import JUDGE_SERVER
from codedance.policy.server_config import ServerConfig
from codedance.rollout import EVAL_MAX_TURNS, EpisodeConfig, EpisodeSettings


@dataclass(frozen=True)
class EvalConfig:
    benchmarks: str = ""  # '' = paper (no --tasks) or only the tasks (--tasks)
    tasks: str = ""  # a Task JSONL or import folder
    tasks_split: str = ""  # '' = every row
    out: str = ""
    server: ServerConfig = field(default_factory=ServerConfig)
    episode: EpisodeSettings = field(
        default_factory=lambda: EpisodeSettings(max_turns=EVAL_MAX_TURNS)
    )
    profiles: str = ""  # a YAML file of user prompt profiles
    no_tools: bool = False
    limit: int | None = bounded(None, at_least=1)  # None: every sample
    samples: int = bounded(1, at_least=1)
    scoring: str = "vlmevalkit"
    judge: ServerConfig = JUDGE_SERVER  # the judge of judge-based metrics (url '' = none)
    data: tuple[str, ...] = ()  # NAME=PATH
    lmu_data: str = ""  # '' = $LMUData or ~/LMUData
    pixmo_cache: str = ""  # '' = <lmu_data>/pixmo_cache
    fetch_images: bool = False
    concurrency: int = not_resumed(64, at_least=1)
    stop_after: int = not_resumed(10, at_least=1)
    # the protocol (`codedance.agents`): codedance, codedance-paper, deepeyes, deepeyesv2, thyme,
    # mini-o3
    agent: str = "codedance"

    def lmu_dir(self) -> Path:
        return Path(self.lmu_data or os.environ.get("LMUData", "~/LMUData")).expanduser()

    def check(self) -> None:
        """Refuse every value no run can use (one `SettingsError` naming the options to fix)
        before a server is contacted or a folder written."""
        from codedance.agents import get_agent
        from codedance.eval.scoring import SCORING_MODES

        if not self.server.url or not self.out:
            raise SettingsError(
                "give the model server and the run folder: --model URL --out DIR "
                "(or server.url=... out=...)"
            )
        check_bounds(self)  # built in code rather than by the loader, which checked them
        s = self.server
        if self.limit is not None and (
            not isinstance(self.limit, int) or isinstance(self.limit, bool)
        ):
            raise SettingsError(f"limit: expected a whole number, got {self.limit!r}")
        get_agent(self.agent)  # an unknown agent is refused naming the known ones
        problems = []
        if self.no_tools and self.agent != "codedance":
            problems.append(
                f"--no-tools is a codedance baseline; drop --agent {self.agent} or --no-tools"
            )
        if self.samples > 1 and s.temperature <= 0:
            problems.append(
                f"--samples {self.samples} needs --temperature above 0 "
                "(at 0 every sample is the same)"
            )
        if self.scoring not in SCORING_MODES:
            problems.append(
                f"--scoring must be one of {', '.join(SCORING_MODES)}, got {self.scoring!r}"
            )
        if problems:
            raise SettingsError("; ".join(problems))

    def run_settings(self, *, progress: bool = True) -> EvalSettings:
        """This tree resolved for the runner (every value checked; nothing contacted or written)."""
        from codedance.agents import get_agent
        from codedance.eval.spec import get_spec, parse_benchmarks

        self.check()
        pairs = [("tasks", str(Path(self.tasks).expanduser()))] if self.tasks else []
        for value in self.data:
            name, sep, path = value.partition("=")
            if not sep:
                raise SettingsError(f"--data expects NAME=PATH, got {value!r}")
            pairs.append((get_spec(name).name, str(Path(path).expanduser())))
        names = self.benchmarks or ("" if self.tasks else "paper")
        specs = parse_benchmarks(names) if names else ()
        if self.tasks and get_spec("tasks") not in specs:
            specs += (get_spec("tasks"),)
        if not specs:
            raise SettingsError("no benchmarks given")
        episode = get_agent(self.agent).episode_config(
            self.episode.episode_config(profiles=self.profiles or None)
        )
        return EvalSettings(
            self,
            benchmarks=specs,
            episode=episode,
            data_paths=tuple(pairs),
            model=self.server.model,
            progress=progress,
        )


@dataclass(frozen=True)
class EvalSettings:
    """An `EvalConfig` resolved for the runner: the benchmark specs, the episode under the agent's
    protocol, the data paths and the served model's name. Every other value is the config's own
    (read through it), so a run has one set of fields and defaults. Made by
    `EvalConfig.run_settings`, which checks the config first."""

    config: EvalConfig
    benchmarks: tuple[BenchmarkSpec, ...]
    episode: EpisodeConfig
    data_paths: tuple[tuple[str, str], ...] = ()
    model: str = ""  # the served model (the server's first when ``server.model`` is '')
    progress: bool = True

    no_tools = property(lambda self: self.config.no_tools)
    limit = property(lambda self: self.config.limit)
    concurrency = property(lambda self: self.config.concurrency)
    samples = property(lambda self: self.config.samples)
    scoring = property(lambda self: self.config.scoring)
    agent = property(lambda self: self.config.agent)
    tasks_split = property(lambda self: self.config.tasks_split)
    fetch_images = property(lambda self: self.config.fetch_images)
    stop_after_connection_failures = property(lambda self: self.config.stop_after)
    exec_timeout_s = property(lambda self: self.config.episode.exec_timeout_s)
    temperature = property(lambda self: self.config.server.temperature)

    @property
    def lmu_dir(self) -> str:
        return str(self.config.lmu_dir())

    @property
    def pixmo_cache(self) -> str:
        return self.config.pixmo_cache or str(self.config.lmu_dir() / "pixmo_cache")

    @property
    def sampling(self) -> str:
        return (
            f"temperature={self.config.server.temperature},"
            f"max_tokens={self.config.server.max_tokens}"
        )

    def identity(self) -> dict[str, object]:
        """The settings a resumed run must share with the first one (``run.json``'s ``settings``;
        `tests/eval/test_runner.py::test_a_run_folder_written_by_an_earlier_version_resumes`)."""
        return {
            "model": self.model,
            "sampling": self.sampling,
            "no_tools": self.no_tools,
            "max_turns": self.episode.max_turns,
            "profile": self.episode.profile.name,
            "profile_fields": dataclasses.asdict(self.episode.profile),
            **({"agent": self.agent} if self.agent != "codedance" else {}),
        }

    @property
    def protocol(self) -> str:
        """What the report names next to every number: the agent profile and the prompt profile."""
        profile = "no-tools" if self.no_tools else self.episode.profile.name
        if self.agent == "codedance" or self.agent == profile:
            return profile
        return f"{self.agent}/{profile}"
