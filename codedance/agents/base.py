"""`AgentProfile`: one model family's whole evaluation protocol, and the `codedance` profiles.

A prompt profile (`codedance.prompts.PromptProfile`) is text only; an agent profile is the rest of
a protocol too: how a tool call is written and read, what the tool does with it, how its result
is shown to the model, how images are sized, the turn limit and where the answer is taken from.
Each peer's profile lives in its own module and names, in its docstring, the file and commit of
the peer's repository it follows.

What an agent gives the episode drivers (`codedance.rollout.adrive_episode`, the batch driver):
``start(task, config)`` an episode object with the interface of `codedance.rollout.Episode`
(``messages``, ``on_completion`` returning the action to run or None, ``on_result``, ...),
``images_of(task, config)`` the images its tool works on,
``runner(images, sandbox)`` the tool that runs an action (``sandbox`` makes the caller's sandbox
for those images; ``uses_sandbox`` says whether one is needed at all), and ``stop``, the stop
strings the protocol asks the model server for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from codedance.prompts import get_profile
from codedance.rollout import CodeRunner, Episode, EpisodeConfig
from codedance.types import Image, Task


@dataclass(frozen=True)
class AgentProfile:
    """The CodeDance protocol itself: code in ``<code>`` blocks run in the sandbox, the prompt
    profile's text, ``EpisodeConfig``'s turn budget and image sizing. ``prompt_profile`` fixes the
    prompt profile ("" keeps the one the run was given)."""

    name: str
    prompt_profile: str = ""
    stop: tuple[str, ...] = ()  # stop strings sent with every request (none: the run's sampling)

    @property
    def uses_sandbox(self) -> bool:
        """True when actions are Python code for the caller's sandbox."""
        return True

    def episode_config(self, config: EpisodeConfig) -> EpisodeConfig:
        """The run's episode settings under this protocol (its prompt profile, turn limit)."""
        return (
            replace(config, profile=get_profile(self.prompt_profile))
            if self.prompt_profile
            else config
        )

    def images_of(self, task: Task, config: EpisodeConfig) -> tuple[Image, ...]:
        return config.images_of(task)

    def start(self, task: Task, config: EpisodeConfig) -> Episode:
        return Episode(task, config)

    def runner(self, images: tuple[Image, ...], sandbox: SandboxFactory | None) -> CodeRunner:
        if sandbox is None:
            raise ValueError(f"agent {self.name} runs code: give it a sandbox")
        return sandbox(images)


SandboxFactory = Callable[[tuple[Image, ...]], CodeRunner]


CODEDANCE = AgentProfile(name="codedance")  # the run's prompt profile (release by default)
CODEDANCE_PAPER = AgentProfile(
    name="codedance-paper", prompt_profile="paper"
)  # Table 10 prompt, <interpreter>
