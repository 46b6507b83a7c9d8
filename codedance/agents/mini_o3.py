"""Mini-o3: ``<grounding>`` zoom-ins in relative coordinates on the original image or an
observation.

Follows Mini-o3/Mini-o3 at commit 8654dbf42d2ea98b9d81b6cc7179026dd0598fdf, the asynchronous rollout
its README's evaluation command runs (``rollout.mode="async"``):
``verl/workers/rollout/vllm_rollout/vllm_async_engine.py`` (``_async_rollout_a_request``,
``process_tool_call``, ``process_image``), ``verl/workers/rollout/vllm_rollout/function_tools.py``
(``prepare_grounding_inputs_multi_turn``, ``crop_image``), ``verl/trainer/constants.py`` (prompts)
and the README's settings (``use_relative_coordinates``, ``max_pixels`` 2,000,000, ``min_pixels``
40,000, 12 rounds and 12 images in validation, stop at ``</grounding>``). Its tool code is checked
by ``scripts/record_agent_fixtures.py`` (fixture ``tests/agents/fixtures/mini_o3.jsonl``).

The protocol, as that rollout runs it:

- Prompt: its ``tool_crop`` system text; the user turn is the image (the original resized by its
  dataset's ``process_image``: scaled, Lanczos, into 40,000–2,000,000 pixels) and the question.
- Each generation stops at ``</grounding>`` (kept). A reply holding ``<grounding>…</grounding>``
  is a call; the last one is read by its pattern (``"bbox_2d": […], … "source": "…"``), the box
  as a Python literal, in relative coordinates (0–1) of the source: ``original_image`` (the
  unresized input) or ``observation_i`` (the i-th crop, unresized). The box is scaled, truncated
  to integers, clipped to the image (right and bottom to size − 1), must be at least a pixel wide
  and high and no more than 200:1; the crop is kept unresized, and the model is shown the
  rollout's ``process_image`` copy (nearest, into 40,000–2,000,000 pixels, sides of 28 at least).
- Observation: the assistant turn is closed and a user turn opened: "After the above Action i,
  here is the the zoom-in image (Observation i+1):", the image, "." and its continuation text;
  a call that cannot be read or cropped gets "ERROR occurs during grounding. Error Information:
  …" and its error prompt instead.
- Ends: a reply without a call; a call when the conversation already holds 12 images or in the
  12th round (not run). Answer: between the last reply's answer tags (its reward code sends the
  reply to a judge; codedance scores the extracted text).

Not established from its code: the user turn of its evaluation data (``problem`` in its JSON
files, not in the repository: here the image, then the benchmark's question); the rollout keeps
the sampled token ids, here the reply's text is sent back (the same text, tokenized again); its
validation samples 32 times (``--samples 32`` with its temperature, which the command does not
state).
"""

from __future__ import annotations

import ast
import io
import math
import re
from dataclasses import dataclass, replace

from codedance.agents.base import AgentProfile, SandboxFactory
from codedance.agents.episode import PeerEpisode
from codedance.parsing import extract_think
from codedance.prompts import PromptProfile
from codedance.rollout import EpisodeConfig
from codedance.types import (
    ExecError,
    ExecResult,
    ExecStatus,
    Image,
    Message,
    StopReason,
    Task,
    Turn,
)

SOURCE = (
    "Mini-o3/Mini-o3@8654dbf42d2ea98b9d81b6cc7179026dd0598fdf:"
    "verl/workers/rollout/vllm_rollout/vllm_async_engine.py"
)
SYSTEM = """You are a helpful assistant. Answer the user's question based on the image provided. \
Output your thinking process within the <think> and </think> tags. Whenever you find anything \
unclear, you can zoom in a specific region in the given image to see more clearly by outputing \
<grounding>{"bbox_2d": [x0, y0, x1, y1], "source": "original_image"}</grounding>, where (x0, y0) \
and (x1, y1) are the top-left and bottom-right coordinates of the region that you want to zoom in, \
respectively (suppose the width and height of the image are 1.0), and 'source' refers to the image \
that you zoom in and could be either 'original_image' or 'observation_i'. Once the final answer is \
confirmed, put it within <answer> and </answer>."""
OBSERVATION = (
    (
        "After the above Action {action_turn}, here is the the zoom-in image "
        "(Observation {observation_turn}):\n"
    ),
    (
        ".\nContinue your reasoning process inside <think> and </think>. If needed, you can "
        "continue to zoom in on the original image or any of the observations, by outputting "
        "<grounding> and </grounding> as before. If the final answer is confirmed, put your final "
        "answer inside "
        "<answer> and </answer>."
    ),
)
ERROR_PROMPT = (
    "Please analyze the error information obtained from the function tool and adjust your "
    "response. Countinue your reasoning process inside <think> and </think>."
)
STOP = ("</grounding>",)
MAX_ROUNDS = 12  # val_max_generation_round
MAX_IMAGES = 12  # val_limit_mm_per_prompt
MAX_PIXELS, MIN_PIXELS = 2_000_000, 40_000
_CALL = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)
_ARGS = re.compile(
    r'.*<grounding>{"bbox_2d": (.*),.*"source": [\',"](.*)[\',"]}</grounding>', re.DOTALL
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CLOSED = re.compile(r".*<answer>.*</answer>$", re.DOTALL)  # an answer its rollout counts


def _pil(image: Image):
    from PIL import Image as PILImage

    pil = PILImage.open(io.BytesIO(image.png))
    pil.load()
    return pil


def fit(pil):
    """Its ``process_image``: scaled (nearest) into `MIN_PIXELS`–`MAX_PIXELS`, sides of 28 at
    least, no more than 200:1, RGB."""
    from PIL import Image as PILImage

    def scaled(factor: float, plus: float = 0.0):
        size = (int(pil.width * factor + plus), int(pil.height * factor + plus))
        return pil.resize(size, resample=PILImage.Resampling.NEAREST)

    if pil.width * pil.height > MAX_PIXELS:
        pil = scaled(math.sqrt(MAX_PIXELS / (pil.width * pil.height)))
    if pil.width * pil.height < MIN_PIXELS:
        pil = scaled(math.sqrt(MIN_PIXELS / (pil.width * pil.height)))
    if pil.width < 28 or pil.height < 28:
        pil = scaled(28 / min(pil.width, pil.height), 1)
    if pil.width / pil.height >= 200:
        pil = pil.resize((pil.width, int(pil.width / 190 + 1)), PILImage.Resampling.NEAREST)
    if pil.height / pil.width >= 200:
        pil = pil.resize((int(pil.height / 190 + 1), pil.height), PILImage.Resampling.NEAREST)
    return pil if pil.mode == "RGB" else pil.convert("RGB")


def fit_input(pil):
    """The input as its dataset's ``process_image`` sizes it: scaled (Lanczos) into
    `MIN_PIXELS`–`MAX_PIXELS`, RGB; sides under 28 refused."""
    from PIL import Image as PILImage

    pil = pil.convert("RGB")
    for bound, over in ((MAX_PIXELS, True), (MIN_PIXELS, False)):
        area = pil.width * pil.height
        if (area > bound) if over else (area < bound):
            factor = math.sqrt(bound / area)
            size = (int(pil.width * factor), int(pil.height * factor))
            pil = pil.resize(size, resample=PILImage.Resampling.LANCZOS)
    if pil.width < 28 or pil.height < 28:
        raise ValueError("Qwen image size should be larger than 28 * 28.")
    return pil


def read_call(reply: str) -> tuple[list, str]:
    """(box, source) of the reply's last call; ValueError saying why it cannot be read."""
    match = _ARGS.match(reply)
    if match is None:  # the source's message for a call its pattern does not match
        raise ValueError("'NoneType' object has no attribute 'group'")
    # a literal only (the source evaluates the text); parsed under eval's file name, so a
    # syntax error reads as it does there
    box = ast.literal_eval(ast.parse(match.group(1), filename="<string>", mode="eval"))
    return box, match.group(2)


def crop_box(box: object, source: str, observations: list) -> tuple[object, list[int]]:
    """The source image and the pixel box of a relative box (see the module docstring)."""
    if not (isinstance(box, list) and len(box) == 4):
        raise ValueError("")  # the source's bare assertion
    if source == "original_image":
        index = 0
    else:
        match = re.match("observation_([0-9]*)", source, re.DOTALL)
        try:
            index = int(match.group(1))  # type: ignore[union-attr]
        except Exception as exc:
            raise ValueError(
                f"The 'source' argument \"{source}\" does not match the pattern "
                "'observation_([0-9]*)'."
            ) from exc
    if index >= len(observations):
        raise ValueError(f'Error in predicting the source observation: "{source}".')
    image = observations[index]
    w, h = image.size
    x0, y0, x1, y1 = (int(v) for v in (box[0] * w, box[1] * h, box[2] * w, box[3] * h))
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w - 1), min(y1, h - 1)
    if x0 > x1 - 1:
        raise ValueError(f"The bounding box is not valid in width: {[x0, y0, x1, y1]}")
    if y0 > y1 - 1:
        raise ValueError(f"The bounding box is not valid in height: {[x0, y0, x1, y1]}")
    width, height = x1 - x0, y1 - y0
    if width / height >= 200 or height / width >= 200:
        raise ValueError(
            "The absolute aspect ratio of the bounding box exceeds 200, which is too large."
        )
    return image, [x0, y0, x1, y1]


class GroundingRunner:
    """The zoom-in tool: observation 0 is the unresized input; each crop (unresized) is the next."""

    def __init__(self, images: tuple[Image, ...]) -> None:
        self.observations = [_pil(images[0]).convert("RGB")]

    def run(self, reply: str) -> ExecResult:
        try:
            image, box = crop_box(*read_call(reply), self.observations)
        except Exception as exc:  # noqa: BLE001 - the tool's failure is the call's result
            return ExecResult(ExecStatus.ERROR, error=ExecError(type(exc).__name__, str(exc)))
        crop = image.crop(box)
        self.observations.append(crop)
        return ExecResult(ExecStatus.OK, images=(Image.from_pil(fit(crop), origin="crop"),))

    async def arun(self, reply: str) -> ExecResult:
        return self.run(reply)

    def close(self) -> None:
        pass


def answer_of(reply: str) -> str:
    match = _ANSWER.search(reply)
    return match.group(1).strip() if match else reply.strip()


class MiniO3Episode(PeerEpisode):
    """One Mini-o3 episode, driven like `codedance.rollout.Episode`."""

    agent = "mini-o3"
    source = SOURCE

    def __init__(self, task: Task, config: EpisodeConfig) -> None:
        first = Image.from_pil(fit_input(_pil(task.images[0])), origin="input:0")
        prompt = (Message("system", (SYSTEM,)), Message("user", (first, task.question)))
        super().__init__(task, config, prompt)
        self.images = 1

    def on_completion(self, completion) -> str | None:
        self._check_ready()
        text = completion.text
        self.answer = answer_of(text)
        turn = Turn(text=text, think=extract_think(text))
        if not _CALL.search(text):
            answered = _CLOSED.match(text) and completion.finish_reason != "length"
            reason = StopReason.ANSWERED if answered else StopReason.FORMAT_ERROR
            self._stop(reason, replace(turn, answer=self.answer))
            return None
        if self.images >= MAX_IMAGES or len(self._turns) + 1 >= MAX_ROUNDS:
            self._stop(StopReason.MAX_TURNS, replace(turn, code=text))
            return None
        self._pending = (text, replace(turn, code=_CALL.findall(text)[-1].strip()))
        return text

    def on_result(self, result: ExecResult) -> None:
        text, turn = self._take_pending()
        n = len(self._turns)
        if result.ok:
            head, tail = OBSERVATION
            parts: tuple[str | Image, ...] = (
                head.format(action_turn=n, observation_turn=n + 1),
                *result.images,
                tail,
            )
            self.images += len(result.images)
        else:
            error = result.error.message if result.error else result.status.value
            parts = (
                f"ERROR occurs during grounding. Error Information: {error}.\n" + ERROR_PROMPT,
            )
        self._messages += [Message("assistant", (text,)), Message("user", parts)]
        feedback = "".join("<image>" if isinstance(p, Image) else p for p in parts)
        self._turns.append(
            replace(turn, result=result, feedback_text=feedback, feedback_images=result.images)
        )


@dataclass(frozen=True)
class MiniO3Profile(AgentProfile):
    """The Mini-o3 protocol (see the module docstring)."""

    @property
    def uses_sandbox(self) -> bool:
        return False

    def episode_config(self, config: EpisodeConfig) -> EpisodeConfig:
        profile = PromptProfile(
            name=self.name, system=SYSTEM, instruction="", user_template="{question}"
        )
        return replace(config, max_turns=MAX_ROUNDS, profile=profile, inject_turn_limit=False)

    def images_of(self, task: Task, config: EpisodeConfig) -> tuple[Image, ...]:
        return task.images

    def start(self, task: Task, config: EpisodeConfig) -> MiniO3Episode:
        return MiniO3Episode(task, config)

    def runner(
        self, images: tuple[Image, ...], sandbox: SandboxFactory | None = None
    ) -> GroundingRunner:
        return GroundingRunner(images)


MINI_O3 = MiniO3Profile(name="mini-o3", stop=STOP)
