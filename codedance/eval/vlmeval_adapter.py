"""Run codedance as a model inside VLMEvalKit (optional: VLMEvalKit is not a dependency).

VLMEvalKit calls ``model.generate(message, dataset=name)`` with ``message`` a list of
``{"type": "image" | "text", "value": path-or-text}``. `CodeDanceModel` turns that into a `Task`,
runs one think -> execute -> feedback episode (our loop, our sandbox) and returns the last
assistant message, which VLMEvalKit then scores with its own rules. Register it in VLMEvalKit's
``config.py``, e.g. ``supported_VLM["codedance"] = partial(vlmeval_model_class(),
model_url="http://localhost:8000/v1")``. `vlmeval_model_class` subclasses VLMEvalKit's
``BaseModel`` when ``vlmeval`` imports and raises an ImportError saying how to install it
otherwise; importing this module never needs VLMEvalKit.
Not handled: VLMEvalKit's per-dataset prompt building (``use_custom_prompt`` is False), video.
"""

from __future__ import annotations

from pathlib import Path

from codedance.policy.base import Policy
from codedance.prompts import image_from_bytes
from codedance.rollout import Episode, EpisodeConfig, run_episode
from codedance.types import Task


class CodeDanceModel:
    """A VLMEvalKit-style model: ``generate(message, dataset=None) -> str``."""

    INTERLEAVE = False
    is_api = True

    def __init__(self, model_url: str = "", model_name: str = "", *, policy: Policy | None = None,
                 config: EpisodeConfig = EpisodeConfig(), exec_timeout_s: float = 15.0, runner_factory=None) -> None:
        if policy is None:
            from codedance.policy import OpenAIChatPolicy

            policy = OpenAIChatPolicy(model_url, model_name or "?")
            if not model_name:
                policy.model = policy.list_models()[0]
        self.policy = policy
        self.config = config
        self.exec_timeout_s = exec_timeout_s
        self.runner_factory = runner_factory
        self.last_trajectory = None

    def use_custom_prompt(self, dataset: str | None) -> bool:
        return False

    def generate(self, message: list[dict], dataset: str | None = None) -> str:
        images = tuple(image_from_bytes(Path(m["value"]).read_bytes(), origin=f"input:{k}")
                       for k, m in enumerate(x for x in message if x["type"] == "image"))
        question = "\n".join(m["value"] for m in message if m["type"] == "text")
        task = Task(id=f"{dataset or 'vlmeval'}", question=question, images=images, answer="")
        model_images = Episode(task, self.config).images
        if self.runner_factory is not None:
            runner = self.runner_factory(model_images)
        else:
            from codedance.sandbox import Sandbox

            runner = Sandbox(images=model_images, timeout_s=self.exec_timeout_s)
        try:
            trajectory = run_episode(self.policy, task, runner, self.config)
        finally:
            runner.close()
        self.last_trajectory = trajectory
        return trajectory.turns[-1].text if trajectory.turns else ""


def vlmeval_model_class() -> type:
    """`CodeDanceModel` as a subclass of VLMEvalKit's ``BaseModel``."""
    try:
        from vlmeval.vlm.base import BaseModel
    except ImportError as exc:
        raise ImportError("VLMEvalKit is not installed: pip install -e "
                          "git+https://github.com/open-compass/VLMEvalKit (optional for codedance)") from exc

    class VLMEvalCodeDance(CodeDanceModel, BaseModel):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            CodeDanceModel.__init__(self, *args, **kwargs)

        def generate_inner(self, message, dataset=None):
            return CodeDanceModel.generate(self, message, dataset)

        def generate(self, message, dataset=None):
            return CodeDanceModel.generate(self, message, dataset)

    return VLMEvalCodeDance
