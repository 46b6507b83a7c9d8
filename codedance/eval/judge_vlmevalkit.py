"""VLMEvalKit's judge protocols (``--scoring vlmevalkit``), over our `JudgeClient`.

Each step follows the protocol of VLMEvalKit commit e8e78f0: the prompt's structure (what the
judge sees, in which order, which worked examples), the temperatures and number of tries, and
how the reply is read. The prompt wording and examples are ours (same kinds of examples), so a
judge can answer slightly differently than under VLMEvalKit's exact text.

- `extract_math`: MathVista / MATH-V extraction: task text, five examples (each with a hint
  line, question, response, extracted answer), the item's question, the response. Up to 5 tries
  at temperature 0, 0.5, 1.0, ...; any reply counts; all tries failing gives ``""``.
- `extract_mathverse`: MathVerse extraction: task text, six numbered examples (interval notation,
  an option, domain and range, ``null``, a decimal, a function), *no question*, the response.
- `mathverse_verdict`: MathVerse scoring: four examples, every one ``Judgement: 0``; the
  stripped reply must be exactly ``0`` or ``1``; up to 5 tries at temperature 0, 0.5, ...;
  otherwise 0.
- `charxiv_grade`: CharXiv: the item's ``grading_query`` with ``{PREDICTION}`` filled in,
  temperature 0, seed 42, 256 tokens; ``json.loads`` of the raw reply (no fence stripping) up to
  10 tries; a reply that is not a dict with both ``extracted_answer`` and ``score`` gives 0 at
  once; the score is kept as given (0.5 stays 0.5).
- `match_option`: the MCQ option matcher (V*, HR-Bench, WeMath with a judge): the question, the
  options and the answer, never the gold; the reply is read by `can_infer`; 3 tries.

Every step returns ``(value, failure)``: ``failure`` is "" or why the judge's replies gave no
usable value (the sample then scores 0 and the report counts it). Only an unreachable judge
(`JudgeUnavailableError`) propagates: the sample stays pending and a rerun scores it.
Departure: after 3 unusable option-matching replies VLMEvalKit picks a random option; we score 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from codedance.grading import JudgeClient, JudgeError, JudgeUnavailableError
from codedance.grading.vlmeval_rules import can_infer, first_verdict

TEXT_MAX_TOKENS = 256

_MATH_TASK = (
    "Read the examples below. Then extract the final answer from the last model response "
    "and write it after 'Extracted answer:'.\n"
)
_MATH_SHOTS = (
    (
        "Answer with an integer, e.g. 1, 2, 3, at the end.",
        "Which number comes next in the row?",
        "The next number of the row is 21.",
        "21",
    ),
    (
        "Answer with a floating-point number with one decimal place, e.g. 1.2, 1.3, at the end.",
        "What share of the birds are flying?",
        "About 0.4 of the birds are flying, four in ten.",
        "0.4",
    ),
    (
        "Answer with a floating-point number with two decimal places, e.g. 1.23, 1.34, at the end.",
        "How much do two pencils cost? (Unit: $)",
        "Two pencils cost $2.35 together.",
        "2.35",
    ),
    (
        "Answer with a Python list, e.g. [1, 2, 3], at the end.",
        "In which two months is the bar highest?",
        "The bar is highest in March and April, months 3 and 4.",
        "[3, 4]",
    ),
    (
        "Answer with the correct option letter, e.g. A, B, C, D, at the end.",
        "Which fraction is shaded?\nChoices: (A) 1/4 (B) 3/8 (C) 1/2 (D) 2/3",
        "So the shaded part is (C) 1/2.",
        "C",
    ),
)


def math_extraction_prompt(question: str, prediction: str) -> str:
    """MathVista / MATH-V extraction prompt for one item (structure: see the module docstring)."""
    shots = "".join(
        f"\nHint: {h}\nQuestion: {q}\nModel response: {r}\nExtracted answer: {a}\n\n"
        for h, q, r, a in _MATH_SHOTS
    )
    return f"{_MATH_TASK}{shots}{question}\nModel response: {prediction}\nExtracted answer:"


_MATHVERSE_EXTRACT_TASK = (
    "Below is a model's response to a math problem ('Model response'). Extract its "
    "final answer as 'Extracted Answer'. Output only the extracted answer, with no "
    "explanation.\n\n"
)
_MATHVERSE_EXTRACT_SHOTS = (
    ("So the solution set, in interval notation, is:\n\n(-3, 2]", "(-3, 2]"),
    (
        (
            "Comparing both curves, the option that describes where they cross is:\n\n"
            "B. p(x)=q(x) there."
        ),
        "B",
    ),
    (
        "the graph starts at x = -2 (open) ... Domain: \\((-2, 4]\\)\nRange: \\([0, 5)\\)",
        "Domain: \\((-2, 4]\\)\nRange: \\([0, 5)\\)",
    ),
    ("Without the length of the second side, no option can be chosen.", "null"),
    ("Using h = 12.4 * tan(31°), the height of the tower is about 7.5 meters.", "7.5"),
    (
        "the leading coefficient is 2, so the graphed function is:\n\\( g(x) = 2x^2 - 3x + 4 \\)",
        "g(x) = 2x^2 - 3x + 4",
    ),
)


def mathverse_extraction_prompt(prediction: str) -> str:
    """MathVerse's extraction prompt: examples, then the response; the question is not shown."""
    shots = "".join(
        f"{n}.\nModel response: '{r}'\nExtracted Answer: {a}\n\n\n"
        for n, (r, a) in enumerate(_MATHVERSE_EXTRACT_SHOTS, start=1)
    )
    n = len(_MATHVERSE_EXTRACT_SHOTS) + 1
    return (
        f"{_MATHVERSE_EXTRACT_TASK}{shots}{n}.\nModel response: '{prediction}'\nExtracted Answer: "
    )


_MATHVERSE_SCORE_TASK = (
    "Below are two answers to a math question: [Question] is the question, [Standard Answer] its "
    "standard answer, and [Model_answer] the answer extracted from a model's output. Decide "
    "whether the two are consistent. Only a [Model_answer] that fully matches the [Standard "
    "Answer] is consistent; for questions that are not multiple choice, the same value written "
    "another way also counts (for example 0.5 m and 50 cm). Reply 1 if they are consistent and 0 "
    "if not.\n\n"
)
_MATHVERSE_SCORE_SHOTS = (
    ("Write the solution set shown on the number line in interval notation.", "[-1, 3)", "(-1, 3)"),
    (
        "In the figure, AB = 4 and angle C = 30°. What is AC? Choices:\nA:4\nB:8\nC:4√3\nD:2",
        "B",
        "C:4√3",
    ),
    (
        "Give the domain and range of g in interval notation.",
        "domain: (-2, 4] and range: [0, 5)",
        "Range: [0, 5)",
    ),
    (
        "In the figure, AB = 4 and angle C = 30°. What is AC? Choices:\nA:4\nB:8\nC:4√3\nD:2",
        "B",
        "null",
    ),
)


def mathverse_score_prompt(question_for_eval: str, gold: str, extracted: str) -> str:
    """MathVerse's scoring prompt: four examples, all judged 0, then the item."""
    shots = "".join(
        f"[Question]: {q}\n[Standard Answer]: {g}\n[Model_answer] : {p}\nJudgement: 0\n\n\n"
        for q, g, p in _MATHVERSE_SCORE_SHOTS
    )
    return (
        f"{_MATHVERSE_SCORE_TASK}{shots}[Question]: {question_for_eval}\n"
        f"[Standard Answer]: {gold}\n"
        f"[Model_answer] : {extracted}\nJudgement:"
    )


_OPTION_TASK = (
    "You help me match an answer to the options of a single-choice question. You get a question, "
    "its options and an answer; find the option most similar in meaning to the answer. If every "
    "option means something clearly different from the answer, output Z. Output one uppercase "
    "letter: one of the option letters, or Z.\n"
    "Example 1:\nQuestion: Which animal is in the picture?\n"
    "Options: A. horse B. cow C. sheep D. goat\n"
    "Answer: a brown horse grazing\nYour output: A\n"
    "Example 2:\nQuestion: Which animal is in the picture?\n"
    "Options: A. horse B. cow C. sheep D. goat\n"
    "Answer: an eagle\nYour output: Z\n"
    "Example 3:\n"
)


def option_matching_prompt(question: str, choices: Mapping[str, str], prediction: str) -> str:
    """The option-matching prompt: question, options, answer (the gold is not shown)."""
    options = "There are several options: \n" + "".join(f"{k}. {v}\n" for k, v in choices.items())
    return (
        f"{_OPTION_TASK}Question: {question}\nOptions: {options}\nAnswer: {prediction}\n"
        "Your output: "
    )


def _ask(judge: JudgeClient, prompt: str, **kwargs: object) -> str | None:
    """One judge reply, or None when the call failed (an unreachable judge propagates)."""
    try:
        return judge.complete([{"role": "user", "content": prompt}], **kwargs)  # type: ignore[arg-type]
    except JudgeUnavailableError:
        raise
    except JudgeError:
        return None


def extract_math(judge: JudgeClient, question: str, prediction: str) -> tuple[str, str]:
    prompt = math_extraction_prompt(question, prediction)
    for attempt in range(5):
        reply = _ask(judge, prompt, max_tokens=TEXT_MAX_TOKENS, temperature=attempt * 0.5)
        if reply is not None:
            return reply, ""
    return "", "extraction: 5 judge calls failed"


def extract_mathverse(judge: JudgeClient, prediction: str) -> tuple[str, str]:
    prompt = mathverse_extraction_prompt(prediction)
    for attempt in range(5):
        reply = _ask(judge, prompt, max_tokens=TEXT_MAX_TOKENS, temperature=attempt * 0.5)
        if reply is not None:
            return reply, ""
    return "", "extraction: 5 judge calls failed"


def mathverse_verdict(
    judge: JudgeClient, question_for_eval: str, gold: str, extracted: str
) -> tuple[bool, str]:
    """MathVerse's score: an exact match of the stripped strings is 1 without asking."""
    if extracted.strip() == gold.strip():
        return True, ""
    prompt = mathverse_score_prompt(question_for_eval, gold, extracted)
    last = None
    for attempt in range(5):
        last = _ask(judge, prompt, temperature=attempt * 0.5)
        verdict = first_verdict(last) if last is not None else None
        if verdict is not None:
            return verdict, ""
    return False, f"verdict: 5 replies not exactly 0 or 1 (last {str(last)[:80]!r})"


def charxiv_grade(
    judge: JudgeClient, grading_query: str, prediction: str, tries: int = 10
) -> tuple[float, str, str]:
    """(score, judge's extracted answer, failure) for one CharXiv reasoning item."""
    prompt = grading_query.replace("{PREDICTION}", prediction)
    last = None
    for _ in range(tries):
        last = _ask(judge, prompt, max_tokens=TEXT_MAX_TOKENS, temperature=0.0, seed=42)
        if last is None:
            continue
        try:
            content = json.loads(last)
        except ValueError:
            continue
        if (
            not isinstance(content, dict)
            or "score" not in content
            or "extracted_answer" not in content
        ):
            return 0.0, "", f"reply is not a dict with extracted_answer and score: {last[:80]!r}"
        score = content["score"]
        if not isinstance(score, (int, float)):  # a bool sums as 0/1 in VLMEvalKit too
            return 0.0, str(content["extracted_answer"]), f"score is not a number: {score!r}"
        return float(score), str(content["extracted_answer"]), ""
    return 0.0, "", f"no JSON reply in {tries} tries (last {str(last)[:80]!r})"


def match_option(
    judge: JudgeClient, question: str, choices: Mapping[str, str], prediction: str
) -> tuple[str | None, str]:
    """(letter or 'Z', failure) from the option matcher."""
    prompt = option_matching_prompt(question, choices, prediction)
    last = None
    for _ in range(3):
        last = _ask(judge, prompt)
        letter = can_infer(last, dict(choices)) if last is not None else None
        if letter:
            return letter, ""
    return None, f"option matching: 3 replies named no option (last {str(last)[:80]!r})"
