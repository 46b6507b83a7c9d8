"""All prompt text, as named profiles: system text, instruction, feedback wording, turn limit.

Built-in profiles:

- ``release`` (default): the authors' release. System text and instruction of its
  ``eval/eval.py`` (the image is the PIL object ``input_image`` and the file ``input_image.jpg``);
  feedback in ``<tool_response>…</tool_response>`` worded as its training tool
  (``verl/tools/code_tool.py``: "Code execution successful, output:", "Stderr output:",
  "Output image:", "--- Execution Error (T) ---", and the "Think with the tool's result…"
  reminder after a success); the turn-limit text of its sglang rollout.
- ``release-eval``: as ``release`` but the feedback exactly as its eval loop words it ("Output:",
  no reminder).
- ``paper``: the paper's Table 10 rollout prompt (no system text; ``Question: {question}`` then
  the instruction) with feedback in ``<interpreter>…</interpreter>`` (paper Table 9).

Departure from the release, in every profile: on failure the model also gets the last frames of
its own code (a departure documented in docs/loop.md) and the sandbox's notes (rolled back, output
cut); set ``show_frames: false`` in a user profile to drop the frames.

User profiles come from a YAML file mapping names to fields of `PromptProfile`; ``base:`` names
the profile whose other fields are inherited (``release`` when absent)::

    terse:
      base: paper
      feedback_open: "<obs>"
      feedback_close: "</obs>"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from codedance.config import read_yaml
from codedance.errors import SettingsError

RELEASE_SYSTEM = (
    "You are a helpful assistant.\n\nSolve the following problem step by step. You may write "
    "Python code to assist with the user query. When an image is supplied, you can either use the "
    "preloaded PIL Image object `input_image` or access the image file directly via the "
    "**relative path** `'input_image.jpg'`."
)
RELEASE_INSTRUCTION = (
    "Think step-by-step within <think></think>. You now have the ability to selectively write "
    "executable Python code to enhance your reasoning process. The Python code should be complete "
    "scripts, including necessary imports. \nEach code snippet is wrapped with "
    "`<code>\n```python\ncode snippet\n```\n</code>`. You must provide your final answer in "
    "<answer></answer>."
)
PAPER_INSTRUCTION = (
    "Think step-by-step within <think></think>. You now have the ability to selectively write "
    "executable Python code to enhance your reasoning process. The Python code should be complete "
    "scripts, including necessary imports.\nEach code snippet is wrapped with\n<code>\n```python\n"
    "code snippet\n```\n</code>\nYou must provide your final answer in\n<answer> </answer>."
)
RELEASE_REMINDER = (
    "\nThink with the tool's result, then answer. Determine if it adequately answers the user's "
    "question. If the information is insufficient or irrelevant, formulate a new strategy and "
    "execute a new tool call to obtain a helpful result."
)
NO_OUTPUT_HINT = (  # the release's text; its own code never shows it (see RELEASE)
    "Code executed successfully. No explicit output or figures produced. You should use the "
    "`print` function to output text. Rewrite the code."
)
TURN_LIMIT = (
    "Turn limit reached. Based on the analysis so far, directly provide the final answer using "
    "the <think></think><answer></answer> format. Do not use any more tools or execute code."
)


@dataclass(frozen=True)
class PromptProfile:
    """Every piece of text the loop shows the model. ``{question}`` and ``{instruction}`` are
    filled in ``user_template``; ``{type}`` and ``{message}`` in ``error_template``."""

    name: str
    system: str = RELEASE_SYSTEM  # "" sends no system message
    instruction: str = RELEASE_INSTRUCTION
    user_template: str = "{question}\n{instruction}"
    feedback_open: str = "<tool_response>"
    feedback_close: str = "</tool_response>"
    stdout_header: str = "Code execution successful, output:\n"
    stdout_before_error_header: str = "Output before error:\n"
    stderr_header: str = "Stderr output:\n```\n"
    stderr_footer: str = "\n```"
    image_label: str = "Output image:"
    error_template: str = "--- Execution Error ({type}) ---\n{message}"
    frames_header: str = "Last frames of your code (line: source):"
    show_frames: bool = True
    no_output: str = NO_OUTPUT_HINT
    executed_nothing: str = "The code contained no statements to execute."
    rolled_back: str = (
        ""  # shown when a failed step was rolled back; the sandbox's notes say it too
    )
    success_suffix: str = RELEASE_REMINDER
    turn_limit: str = TURN_LIMIT
    part_separator: str = "\n"


# The release's "No explicit output" branch is unreachable (its reminder is appended first), so a
# successful call that printed nothing gets the reminder alone, as here.
RELEASE = PromptProfile(name="release", no_output="")
RELEASE_EVAL = dataclasses.replace(
    RELEASE,
    name="release-eval",
    stdout_header="Output:\n",
    success_suffix="",
    no_output="",
    part_separator="",
)
PAPER = PromptProfile(
    name="paper",
    system="",
    instruction=PAPER_INSTRUCTION,
    user_template="Question: {question}\n\n{instruction}",
    feedback_open="<interpreter>",
    feedback_close="</interpreter>",
    stdout_header="",
    success_suffix="",
)
BUILTIN_PROFILES: dict[str, PromptProfile] = {p.name: p for p in (RELEASE, RELEASE_EVAL, PAPER)}


def user_text(profile: PromptProfile, question: str) -> str:
    """The first user turn's text; ``<image>`` markers in the question are removed (the images
    are placed before the text, as both the release and the paper do).

    >>> user_text(PAPER, "<image>How many cats?").splitlines()[0]
    'Question: How many cats?'
    """
    question = question.replace("<image>", "").strip()
    return profile.user_template.format(question=question, instruction=profile.instruction)


def load_profiles(path: str | Path) -> dict[str, PromptProfile]:
    """User profiles from a YAML file (see the module docstring); errors name the file, the line
    or the bad key."""
    raw = read_yaml(Path(path))
    if not isinstance(raw, dict):
        raise SettingsError(f"{path}: expected a mapping of profile names to fields")
    known = {f.name for f in dataclasses.fields(PromptProfile)} - {"name"}
    profiles: dict[str, PromptProfile] = {}
    for name, fields in raw.items():
        fields = dict(fields or {})
        base_name = str(fields.pop("base", "release"))
        base = profiles.get(base_name) or BUILTIN_PROFILES.get(base_name)
        if base is None:
            raise SettingsError(f"{path}: profile {name!r} has unknown base {base_name!r}")
        unknown = sorted(set(fields) - known)
        if unknown:
            raise SettingsError(
                f"{path}: profile {name!r} has unknown fields {unknown}; known: {sorted(known)}"
            )
        profiles[str(name)] = dataclasses.replace(base, name=str(name), **fields)
    return profiles


def get_profile(name: str, user_file: str | Path | None = None) -> PromptProfile:
    """A built-in profile, or one from `user_file` (which may override a built-in name)."""
    profiles = dict(BUILTIN_PROFILES)
    if user_file is not None:
        profiles.update(load_profiles(user_file))
    if name not in profiles:
        raise SettingsError(
            f"unknown prompt profile {name!r}; available: {', '.join(sorted(profiles))}"
        )
    return profiles[name]
