"""DeepEyes: a JSON ``<tool_call>`` to ``image_zoom_in_tool`` that crops the input image.

Follows ``eval/eval_vstar.py`` of Visual-Agent/DeepEyes at commit
6c5e79671dbff958a6f9d44848ba2ca87854f0b0 (the authors' V* evaluation; the only evaluation loop the
repository ships). Checked against that file's own loop by ``scripts/record_agent_fixtures.py``
(fixture ``tests/agents/fixtures/deepeyes.jsonl``, test ``tests/agents/test_agent_fixtures.py``).

The protocol, as that file runs it:

- Prompt: its system text (the tool's JSON schema and the calling convention) and, after the
  image, ``Question: …\\nOptions: \\nA. …\\nB. …\\n`` followed by its format instruction. The
  image is sent as it is (no resizing on the client; the server's processor sizes it).
- Action: the text between the first ``<tool_call>`` and the next ``</tool_call>`` (or the end
  of the reply), read as a Python literal; ``arguments.bbox_2d`` is the box. The tool's name and
  any further calls in the reply are not looked at.
- Tool: the box ``[x1, y1, x2, y2]`` in the original image's pixels, cropped with Pillow
  (coordinates rounded; outside the image is black), then resized (bicubic) to the
  qwen-vl-utils size of the box (factor 28, 4×28×28 to 16384×28×28 pixels).
- Observation: a user message of four parts: ``<tool_response>``, the crop, the format
  instruction again, ``</tool_response>``.
- A reply with neither a tool call nor ``</answer>`` is dropped and the same conversation is
  asked again (the reply is kept in the trajectory, without feedback); a reply cut at the token
  limit is treated the same way.
- Stops: ``</answer>`` in the reply (a call in the same reply is still cropped); a call that
  cannot be read or cropped (the episode ends there, ``format_error``); the 11th model call.
- Answer: the text between ``<answer>`` and ``</answer>`` (stripped) when the last reply has both
  tags, else that whole reply.

Differences from the file, by design: it reads the call with Python's ``eval``; here
``ast.literal_eval`` reads it (the same value for every literal; an expression such as ``10+5``
is refused here, and model text is never executed). Sampling (``temperature 0``, ``max_tokens
10240``) is the run's: ``--temperature 0 --max-tokens 10240`` reproduce it. Not established from
its code: the prompt of benchmarks other than V* (a question without options is sent as
``Question: …\\n`` + the instruction) and the server's ``max_pixels``.
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass, replace

from codedance.agents.base import AgentProfile, SandboxFactory
from codedance.agents.episode import PeerEpisode
from codedance.parsing import extract_think
from codedance.prompts import PromptProfile
from codedance.prompts.vision import VisionLimits, smart_resize
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

SOURCE = "Visual-Agent/DeepEyes@6c5e79671dbff958a6f9d44848ba2ca87854f0b0:eval/eval_vstar.py"

SYSTEM = """You are a helpful assistant.

# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type":"function","function":{"name":"image_zoom_in_tool","description":"Zoom in on a specific \
region of an image by cropping it based on a bounding box (bbox) and an optional object label.",\
"parameters":{"type":"object","properties":{"bbox_2d":{"type":"array","items":{"type":"number"},\
"minItems":4,"maxItems":4,"description":"The bounding box of the region to zoom in, as [x1, y1, \
x2, y2], where (x1, y1) is the top-left corner and (x2, y2) is the bottom-right corner."},\
"label":{"type":"string","description":"The name or label of the object in the specified bounding \
box (optional)."}},"required":["bbox"]}}}
</tools>

# How to call a tool
Return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>

**Example**:  
<tool_call>  
{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 20, 100, 200], "label": "the apple on \
the desk"}}  
</tool_call>"""
INSTRUCTION = (
    "\nThink first, call **image_zoom_in_tool** if needed, then answer. Format strictly as:  "
    "<think>...</think>  <tool_call>...</tool_call> (if tools needed)  <answer>...</answer> "
)
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_RESPONSE_OPEN, CALL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
MAX_CALLS = 11  # its loop stops once 11 replies were asked for
CROP_LIMITS = VisionLimits(
    factor=28, min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28, max_ratio=float("inf")
)


def user_text(task: Task) -> str:
    """The first user turn's text: the V* template with the task's options.

    >>> t = Task(id="v/1", question="Q?", images=(), answer="A",
    ...          choices=(("A", "red"), ("B", "blue")))
    >>> user_text(t).splitlines()[:4]
    ['Question: Q?', 'Options: ', 'A. red', 'B. blue']
    """
    meta = dict(task.metadata)
    question = meta.get("raw_question") or task.question.replace("<image>", "").strip()
    if not task.choices:
        return f"Question: {question}\n" + INSTRUCTION
    options = "\n" + "".join(f"{key}. {value}\n" for key, value in task.choices)
    return f"Question: {question}\nOptions: {options}\n" + INSTRUCTION


def call_body(text: str) -> str | None:
    """The text of the first tool call (to the next close tag or the end), or None without one."""
    if CALL_OPEN not in text:
        return None
    return text.split(CALL_OPEN)[1].split(CALL_CLOSE)[0].strip()


def read_box(body: str) -> tuple[object, object, object, object]:
    """``arguments.bbox_2d`` of a call body; ValueError saying why it cannot be read."""
    try:
        call = ast.literal_eval(body)
        left, top, right, bottom = call["arguments"]["bbox_2d"]
    except Exception as exc:
        raise ValueError(f"unreadable tool call: {type(exc).__name__}: {exc}") from exc
    return left, top, right, bottom


def crop_size(height: float, width: float) -> tuple[int, int]:
    """The qwen-vl-utils size (`CROP_LIMITS`) of a crop; a zero-width or zero-height box, which
    the source crops and resizes all the same, gets the size its rounding gives (28 at least) or,
    under the minimum area, fails as the source does.

    >>> crop_size(10, 8), crop_size(150, 0)
    ((84, 56), (140, 28))
    """
    if height > 0 and width > 0:
        return smart_resize(height, width, CROP_LIMITS)  # type: ignore[arg-type]
    f = CROP_LIMITS.factor
    h_bar, w_bar = max(f, round(height / f) * f), max(f, round(width / f) * f)
    if h_bar * w_bar < CROP_LIMITS.min_pixels:
        raise ValueError(f"a {width}x{height} box has no area to scale up")
    return h_bar, w_bar


def zoom(image: Image, box: tuple[object, object, object, object]) -> Image:
    """The box cropped out of ``image`` and resized as the source does (see the module
    docstring)."""
    from PIL import Image as PILImage

    left, top, right, bottom = box
    with PILImage.open(io.BytesIO(image.png)) as pil:
        crop = pil.crop((left, top, right, bottom))
    height, width = crop_size(bottom - top, right - left)  # type: ignore[operator]
    return Image.from_pil(crop.resize((width, height), resample=PILImage.BICUBIC), origin="crop")


def final_answer(text: str) -> str:
    """Where the source takes its answer from: between the tags when both are there, else all.

    >>> final_answer("<think>x</think><answer> B </answer>"), final_answer("B. blue")
    ('B', 'B. blue')
    """
    if "</answer>" in text and "<answer>" in text:
        return text.split("<answer>")[1].split("</answer>")[0].strip()
    return text


def _answered(text: str) -> StopReason:
    return StopReason.ANSWERED if "<answer>" in text else StopReason.FORMAT_ERROR


class ZoomRunner:
    """The zoom-in tool on the episode's first image: a call body in, the crop (or the error)
    out."""

    def __init__(self, images: tuple[Image, ...]) -> None:
        self.image = images[0]

    def run(self, code: str) -> ExecResult:
        try:
            crop = zoom(self.image, read_box(code))
        except Exception as exc:  # noqa: BLE001 - the tool's failure is the call's result
            return ExecResult(ExecStatus.ERROR, error=ExecError(type(exc).__name__, str(exc)))
        return ExecResult(ExecStatus.OK, images=(crop,))

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)

    def close(self) -> None:
        pass


class DeepEyesEpisode(PeerEpisode):
    """One DeepEyes episode, driven like `codedance.rollout.Episode`."""

    agent = "deepeyes"
    source = SOURCE

    def __init__(self, task: Task, config: EpisodeConfig) -> None:
        super().__init__(
            task,
            config,
            (Message("system", (SYSTEM,)), Message("user", (*task.images, user_text(task)))),
        )

    def on_completion(self, completion) -> str | None:
        self._check_ready()
        text = completion.text
        self.answer = final_answer(text)
        answered = "</answer>" in text
        turn = Turn(text=text, think=extract_think(text), answer=self.answer if answered else None)
        body = call_body(text)
        if body is not None:
            turn = replace(turn, code=body)
            try:
                read_box(body)
            except ValueError as exc:
                self._notes.append(("error", str(exc)))
                self._stop(StopReason.FORMAT_ERROR, turn)
                return None
        if (
            body is not None
        ):  # cropped even beside an answer, as the source does (the episode ends after)
            self._pending = (text, turn)
            return body
        if answered:
            self._stop(_answered(text), turn)
        elif len(self._turns) + 1 >= MAX_CALLS:
            self._stop(StopReason.MAX_TURNS, turn)
        else:
            self._turns.append(turn)  # dropped: the same conversation is asked again
        return None

    def on_result(self, result: ExecResult) -> None:
        text, turn = self._take_pending()
        if not result.ok:
            error = result.error.message if result.error else result.status.value
            self._notes.append(("error", f"tool failed: {error}"))
            self._stop(StopReason.FORMAT_ERROR, replace(turn, result=result))
            return
        parts = (CALL_RESPONSE_OPEN, *result.images, INSTRUCTION, CALL_RESPONSE_CLOSE)
        feedback = "".join("<image>" if isinstance(p, Image) else p for p in parts)
        self._messages.append(Message("assistant", (text,)))
        self._messages.append(Message("user", parts))
        turn = replace(turn, result=result, feedback_text=feedback, feedback_images=result.images)
        if "</answer>" in text:
            self._stop(_answered(text), turn)
        elif len(self._turns) + 1 >= MAX_CALLS:
            self._stop(StopReason.MAX_TURNS, turn)
        else:
            self._turns.append(turn)


@dataclass(frozen=True)
class DeepEyesProfile(AgentProfile):
    """The DeepEyes protocol (see the module docstring); the task's images are sent unresized."""

    @property
    def uses_sandbox(self) -> bool:
        return False

    def episode_config(self, config: EpisodeConfig) -> EpisodeConfig:
        profile = PromptProfile(
            name=self.name,
            system=SYSTEM,
            instruction=INSTRUCTION,
            user_template="Question: {question}\n{instruction}",
        )
        return replace(config, max_turns=MAX_CALLS, profile=profile, inject_turn_limit=False)

    def images_of(self, task: Task, config: EpisodeConfig) -> tuple[Image, ...]:
        return task.images

    def start(self, task: Task, config: EpisodeConfig) -> DeepEyesEpisode:
        return DeepEyesEpisode(task, config)

    def runner(
        self, images: tuple[Image, ...], sandbox: SandboxFactory | None = None
    ) -> ZoomRunner:
        return ZoomRunner(images)


DEEPEYES = DeepEyesProfile(name="deepeyes")
