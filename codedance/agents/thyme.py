"""Thyme: Python in ``<code>`` blocks, its output appended inside one continued assistant message.

Follows ``eval/VLMEvalKit/vlmeval/vlm/thyme/model.py`` of yfzhang114/Thyme at commit
b9285b7a0c5f1effcd9908ec5936fae47fc592e5 (``Thyme.generate_inner_transformers``, the authors'
VLMEvalKit model), with ``utils.py`` (prompts, stop strings), ``prompt.py`` (the per-dataset
question), ``sandbox.py`` (the tool: `codedance.agents.thyme_code`) and ``vlmeval/config.py``
(``Thyme-7B``: 5 iterations, 5 retries). Checked against those files by
``scripts/record_agent_fixtures.py`` (fixture ``tests/agents/fixtures/thyme.jsonl``).

The protocol, as that file runs it (a transformers loop; here over an OpenAI endpoint):

- Prompt: its reasoning system text; the user turn is the image, then its template (a literal
  ``<image>`` line, the question, the image's path and size, the output format). The question is
  its ``build_prompt``'s: with options ``Question: …\\nOptions:\\nA. …\\n`` and "Please select the
  correct answer from the options above.", stripped; without, the question and "Please try to
  answer the question with short words or phrases if possible.".
- Images: as VLMEvalKit stores the benchmark image (decoded, saved as JPEG) and as qwen-vl-utils'
  ``fetch_image`` hands it to the processor (RGB, alpha over white; resized, bicubic, to the
  28-multiple size within 4·28² and 16384·28² pixels): already the processor's size, so the
  server does not resize again. The sandbox holds the stored JPEG as ``input_image.jpg``.
- Each generation stops at ``</code>`` or ``</answer>`` (kept in the reply). The first call opens
  the assistant turn; every later call of an attempt continues the conversation's last message
  (``continue_final_message``): the assistant message built so far or, when no segment has been
  kept yet, the user turn itself, as the source strips ``<|im_end|>\\n`` from either.
- Action: the first ``<code>…</code>`` of the reply (an optional fence and ``python`` stripped).
  A step that fails or outputs nothing is discarded (the reply is dropped, the variables
  restored) and the next call made. Otherwise the reply, ``<sandbox_output>``, the output images
  (or the printed text) and ``</sandbox_output>`` are appended to the assistant message (a reply
  that also holds ``</answer>`` is appended twice, as the source does).
- An attempt ends with ``</answer>`` in a reply (answered), a reply with neither code nor
  ``</answer>``, a reply that ended at the end-of-sequence token after its code ran, or its 5th
  call. Up to 5 attempts, each from the first user turn with fresh variables; then a fallback:
  its plain system prompt and direct-answer template, the reply wrapped in ``<answer>`` tags when
  it has none.
- Answer: the text between the first ``<answer>`` and ``</answer>`` of the last assistant
  message's text, stripped ("No answer tag found in the final output." without one), then the
  inside of a ``\\boxed{…}`` when there is one.

Not reproduced: the source raises the temperature to 1.0 after a failed attempt and drops the
stop strings for the fallback; here every request uses the run's sampling and the protocol's stop
strings (its settings, temperature 0.01 with top-k 1 and 2048 new tokens, are greedy in effect:
``--temperature 0 --max-tokens 2048``). The image path in the prompt is the sandbox's
(``input_image.jpg``), not VLMEvalKit's. Yes/no, MMMU and OlympiadBench questions are not built its
way (they get the VQA suffix).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, replace

from codedance.agents.base import AgentProfile, SandboxFactory
from codedance.agents.episode import PeerEpisode
from codedance.agents.thyme_code import IMAGE_PATH, NEW_ATTEMPT, ThymeRunner
from codedance.parsing import extract_think
from codedance.prompts import PromptProfile
from codedance.prompts.vision import VisionLimits, smart_resize
from codedance.rollout import EpisodeConfig
from codedance.types import ExecResult, Image, Message, StopReason, Task, Turn

SOURCE = (
    "yfzhang114/Thyme@b9285b7a0c5f1effcd9908ec5936fae47fc592e5:"
    "eval/VLMEvalKit/vlmeval/vlm/thyme/model.py"
)
SYSTEM = """You are a helpful assistant.

Solve the following problem step by step, and optionally write Python code for image manipulation \
to enhance your reasoning process. The Python code will be executed by an external sandbox, and \
the processed image or result (wrapped in <sandbox_output></sandbox_output>) can be returned to \
aid your reasoning and help you arrive at the final answer.

**Reasoning & Image Manipulation (Optional but Encouraged):**
    * You have the capability to write executable Python code to perform image manipulations \
(e.g., cropping to a Region of Interest (ROI), resizing, rotation, adjusting contrast) or perform \
calculation for better reasoning.
    * The code will be executed in a secure sandbox, and its output will be provided back to you \
for further analysis.
    * All Python code snippets **must** be wrapped as follows:
    <code>
    ```python
    # your code.
    ```
    </code>
    * At the end of the code, print the path of the processed image (processed_path) or the result \
for further processing in a sandbox environment."""
USER_TEMPLATE = """<image>
{question}

### User Image Path:** "{path}"
### User Image Size:** "{size}"

### **Output Format (strict adherence required):**

<think>Your detailed reasoning process, including any code, should go here.</think>
<answer>Your final answer to the user's question goes here.</answer>
"""
FALLBACK_SYSTEM = "You are a helpful assistant."
FALLBACK_TEMPLATE = """
You are an advanced AI assistant specializing in visual question answering (VQA). You don't need \
to perform any image manipulation or reasoning. Give the answer to the following question directly.
**User's Question:** "{question}"
"""
MCQ_PROMPT = "Please select the correct answer from the options above."
MCQ_PROMPT_CN = "请直接回答选项字母。"
VQA_PROMPT = "\nPlease try to answer the question with short words or phrases if possible."
STOP = ("</code>", "</answer>")
MAX_ITERATIONS = 5  # model calls per attempt
MAX_RETRY = 5  # attempts before the fallback prompt
MAX_CALLS = MAX_ITERATIONS * MAX_RETRY + 1
NO_ANSWER = "No answer tag found in the final output."
LIMITS = VisionLimits(factor=28, min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28, max_ratio=200)
_CODE = re.compile(
    r"<code>\s*(?:```\s*)?(?:python\s*)?([\s\S]*?)\s*(?:```\s*)?</code>", re.IGNORECASE
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def question_of(task: Task) -> str:
    """The question as its ``build_prompt`` writes it (multiple choice or short answer).

    >>> t = Task(id="v/1", question="Q?", images=(), answer="A",
    ...          choices=(("A", "red"), ("B", "blue")))
    >>> question_of(t).splitlines()  # doctest: +NORMALIZE_WHITESPACE
    ['Question: Q?', 'Options:', 'A. red', 'B. blue',
     'Please select the correct answer from the options above.']
    """
    meta = dict(task.metadata)
    question = meta.get("raw_question") or task.question.replace("<image>", "").strip()
    if not task.choices:
        return question + VQA_PROMPT
    hint = f"Hint: {meta['hint']}\n" if meta.get("hint") else ""
    prompt = hint + f"Question: {question}\n"
    prompt += "Options:\n" + "".join(f"{key}. {value}\n" for key, value in task.choices)
    prompt += MCQ_PROMPT_CN if re.search("[\u4e00-\u9fff]", prompt) else MCQ_PROMPT
    return prompt.rstrip()


def _pil(image: Image):
    from PIL import Image as PILImage

    pil = PILImage.open(io.BytesIO(image.png))
    pil.load()
    return pil


def stored_image(image: Image) -> Image:
    """The benchmark image as VLMEvalKit stores it: RGB (alpha and palettes dropped), saved as
    JPEG with Pillow's defaults."""
    from PIL import Image as PILImage

    pil = _pil(image)
    if pil.mode in ("RGBA", "P", "LA"):
        pil = pil.convert("RGB")
    buffer = io.BytesIO()
    pil.save(buffer, format="JPEG")
    reloaded = PILImage.open(io.BytesIO(buffer.getvalue()))
    reloaded.load()
    return Image.from_pil(reloaded, origin=image.origin)


def model_image(image: Image) -> Image:
    """An image as qwen-vl-utils' ``fetch_image`` gives it to the processor (RGB, transparent
    parts over white, resized bicubic to the `LIMITS` size)."""
    from PIL import Image as PILImage

    pil = _pil(image)
    if pil.mode == "RGBA":
        rgb = PILImage.new("RGB", pil.size, (255, 255, 255))
        rgb.paste(pil, mask=pil.split()[3])
    else:
        rgb = pil.convert("RGB")
    height, width = smart_resize(rgb.height, rgb.width, LIMITS)
    return Image.from_pil(
        rgb.resize((width, height), resample=PILImage.BICUBIC), origin=image.origin
    )


def code_of(reply: str) -> str | None:
    match = _CODE.search(reply)
    return match.group(1).strip() if match else None


def boxed(text: str) -> str:
    """The inside of the last ``\\boxed{`` (braces balanced; to the end when unclosed).

    >>> boxed("so \\\\boxed{\\\\frac{1}{2}} done")
    '\\\\frac{1}{2}'
    """
    inside = text.split("\\boxed{")[-1]
    depth = 1
    for n, char in enumerate(inside):
        depth += char == "{"
        depth -= char == "}"
        if depth == 0:
            return inside[:n]
    return inside


def final_answer(response: str) -> str:
    """The answer the source takes from the last assistant message's text.

    >>> final_answer("<think>t</think><answer> \\\\boxed{B} </answer>"), final_answer("B")
    ('B', 'No answer tag found in the final output.')
    """
    match = _ANSWER.search(response)
    answer = match.group(1).strip() if match else NO_ANSWER
    if re.search(r"\\boxed\{(.*?)\}", answer):
        answer = boxed(answer)
    return answer


def _parts_text(parts: list[str | Image]) -> str:
    return "".join(p for p in parts if isinstance(p, str))


class ThymeEpisode(PeerEpisode):
    """One Thyme episode, driven like `codedance.rollout.Episode` (see the module docstring)."""

    agent = "thyme"
    source = SOURCE

    def __init__(self, task: Task, config: EpisodeConfig) -> None:
        stored = stored_image(task.images[0])
        size = f"{stored.width}x{stored.height}"
        text = USER_TEMPLATE.format(question=question_of(task), path=IMAGE_PATH, size=size)
        prompt = (Message("system", (SYSTEM,)), Message("user", (model_image(stored), text)))
        super().__init__(task, config, prompt)
        self.fallback_prompt = (
            Message("system", (FALLBACK_SYSTEM,)),
            Message(
                "user",
                (model_image(stored), FALLBACK_TEMPLATE.format(question=question_of(task))),
            ),
        )
        self.attempt = 0  # attempts made before this one
        self.calls = 0  # model calls of this attempt
        self.kept: list[str | Image] = []  # the assistant message of this attempt so far
        self.fresh = False  # the next code runs on fresh variables (a new attempt)
        self._ended = False  # the pending reply ended at the end-of-sequence token

    @property
    def fallback(self) -> bool:
        return self.attempt >= MAX_RETRY

    @property
    def messages(self) -> tuple[Message, ...]:
        if self.fallback:
            return self.fallback_prompt
        if self.calls == 0:
            return self.prompt
        if not self.kept:  # nothing kept yet: the user turn itself is continued
            return (self.prompt[0], replace(self.prompt[1], continued=True))
        return (*self.prompt, Message("assistant", tuple(self.kept), continued=True))

    def on_completion(self, completion) -> str | None:
        self._check_ready()
        text = completion.text
        turn = Turn(text=text, think=extract_think(text))
        if self.fallback:
            response = text if _ANSWER.search(text) else f"<answer>{text}</answer>"
            self.answer = final_answer(response)
            self._stop(StopReason.ANSWERED, replace(turn, answer=self.answer))
            return None
        self.calls += 1
        code = code_of(text)
        if code is not None:
            ended = completion.finish_reason != "length" and not text.endswith(STOP)
            self._pending = (text, replace(turn, code=code))
            self._ended = ended
            return NEW_ATTEMPT + code if self.fresh else code
        if "</answer>" not in text:  # neither code nor an answer: the attempt ends
            self._turns.append(turn)
            self._next_attempt()
            return None
        self.kept.append(text)
        self._answered(turn)
        return None

    def _answered(self, turn: Turn) -> None:
        self.answer = final_answer(_parts_text(self.kept))
        self._stop(StopReason.ANSWERED, replace(turn, answer=self.answer))

    def _next_attempt(self) -> None:
        self.attempt += 1
        self.calls, self.kept, self.fresh = 0, [], True
        if self.fallback:
            self._notes.append(("note", "no valid answer in 5 attempts: the fallback prompt"))

    def on_result(self, result: ExecResult) -> None:
        text, turn = self._take_pending()
        if not result.ok:  # discarded: the segment is dropped and the variables restored
            self._turns.append(replace(turn, result=result))
            if self.calls >= MAX_ITERATIONS:
                self._next_attempt()
            return
        self.fresh = False  # a rolled-back step also rolled back the fresh start
        shown = tuple(model_image(i) for i in result.images)
        outputs: tuple[str | Image, ...] = shown or (result.stdout,)
        added = [text, "<sandbox_output>", *outputs, "</sandbox_output>"]
        if "</answer>" in text:
            added.insert(0, text)
        self.kept += added
        feedback = "".join(
            "<image>" if isinstance(p, Image) else p for p in added[-len(outputs) - 2 :]
        )
        turn = replace(turn, result=result, feedback_text=feedback, feedback_images=shown)
        if "</answer>" in text:
            self._answered(turn)
            return
        self._turns.append(turn)
        if self._ended or self.calls >= MAX_ITERATIONS:
            self._next_attempt()


@dataclass(frozen=True)
class ThymeProfile(AgentProfile):
    """The Thyme protocol (see the module docstring)."""

    def episode_config(self, config: EpisodeConfig) -> EpisodeConfig:
        profile = PromptProfile(
            name=self.name,
            system=SYSTEM,
            instruction=USER_TEMPLATE.split("{question}")[1],
            user_template="{question}{instruction}",
        )
        return replace(config, max_turns=MAX_CALLS, profile=profile, inject_turn_limit=False)

    def images_of(self, task: Task, config: EpisodeConfig) -> tuple[Image, ...]:
        return tuple(stored_image(i) for i in task.images)

    def start(self, task: Task, config: EpisodeConfig) -> ThymeEpisode:
        return ThymeEpisode(task, config)

    def runner(self, images: tuple[Image, ...], sandbox: SandboxFactory | None) -> ThymeRunner:
        if sandbox is None:
            raise ValueError("thyme runs code: give it a sandbox")
        return ThymeRunner(sandbox(images), (images[0].width, images[0].height))


THYME = ThymeProfile(name="thyme", stop=STOP)
