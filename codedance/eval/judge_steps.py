"""The judge steps that official metrics need, over any OpenAI-compatible server.

Every step takes the grading module's `JudgeClient`: verdicts ("Judgement: 1/0") are asked with
its configured few tokens, longer replies (answer extraction, CharXiv's JSON) with
`TEXT_MAX_TOKENS`. Steps:

- `charxiv_score`: CharXiv's per-item ``grading_query`` (from the TSV) with ``{PREDICTION}``
  replaced by the extracted answer; the reply must be JSON ``{"extracted_answer", "score"}``.
- `extract_answer_with_judge`: MathVista / MathVision / MathVerse answer extraction, few-shot.
- `mathverse_consistent`: MathVerse's second step, a 0/1 consistency verdict on the extracted
  answer against the standard answer, given ``question_for_eval``.

The extraction and MathVerse prompts follow the structure of VLMEvalKit's (task description,
worked examples, the item) in our own wording, so numbers can differ slightly from VLMEvalKit's
with the same judge. Replies that do not parse raise `JudgeVerdictError` (never a silent 0);
CharXiv gets ``retries`` tries first, as VLMEvalKit does.
"""

from __future__ import annotations

import json

from codedance.grading import JudgeClient, JudgeVerdictError, parse_verdict

TEXT_MAX_TOKENS = 256  # answer extraction and CharXiv's JSON; verdicts use the config's few tokens


def charxiv_score(
    judge: JudgeClient, grading_query: str, answer: str, retries: int = 3
) -> tuple[float, str]:
    """(score, judge's extracted answer) for one CharXiv reasoning item."""
    prompt = grading_query.replace("{PREDICTION}", answer)
    last = ""
    for _ in range(retries):
        last = judge.complete([{"role": "user", "content": prompt}], max_tokens=TEXT_MAX_TOKENS)
        body = last.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        try:
            content = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(content, dict) and "score" in content:
            return float(content["score"]), str(content.get("extracted_answer", ""))
    raise JudgeVerdictError(
        f"CharXiv judge reply is not JSON with a score after {retries} tries: {last[:200]!r}"
    )


_EXTRACT_TASK = (
    "Read the examples, then extract the final answer from the last model response. Reply with "
    "the extracted answer only: a number, an option letter, a list or an expression; 'null' if "
    "the response gives no answer.\n\n"
)
_EXTRACT_SHOTS = (
    ("Which number is missing?", "The missing number in the sequence is 14.", "14"),
    (
        "What is the fraction of females facing the camera?",
        "About 0.6 of them face the camera.",
        "0.6",
    ),
    (
        "How much money does Luca need for both candies? (Unit: $)",
        "He needs $1.45 in total.",
        "1.45",
    ),
    (
        "Between which two years does the line peak?",
        "The peak lies between 2007 and 2008.",
        "[2007, 2008]",
    ),
    (
        "What fraction of the shape is blue? Choices: (A) 3/11 (B) 8/11 (C) 6/11 (D) 3/5",
        "So the right choice is (B) 8/11.",
        "B",
    ),
)


def extraction_prompt(question: str, response: str) -> str:
    """The few-shot extraction prompt for one item.

    >>> extraction_prompt("Q?", "It is 3.").endswith("Model response: It is 3.\\nExtracted answer:")
    True
    """
    shots = "\n\n".join(
        f"Question: {q}\nModel response: {r}\nExtracted answer: {a}" for q, r, a in _EXTRACT_SHOTS
    )
    return (
        f"{_EXTRACT_TASK}{shots}\n\nQuestion: {question}\nModel response: {response}\n"
        "Extracted answer:"
    )


def extract_answer_with_judge(judge: JudgeClient, question: str, response: str) -> str:
    """The judge's extraction of the final answer (``""`` when it says there is none)."""
    prompt = extraction_prompt(question, response)
    reply = judge.complete(
        [{"role": "user", "content": prompt}], max_tokens=TEXT_MAX_TOKENS
    ).strip()
    reply = reply.removeprefix("Extracted answer:").strip()
    return "" if reply.lower() == "null" else reply


_MATHVERSE_TASK = (
    "Below are a math question, its standard answer and an answer extracted from a model's "
    "output. Decide whether the model answer is consistent with the standard answer. For "
    "multiple-choice questions only the same option counts. For other questions the same value "
    "or meaning counts, e.g. 0.5 m and 50 cm. Reply with 'Judgement: 1' if consistent, "
    "'Judgement: 0' if not, and nothing else.\n\n"
)
_MATHVERSE_SHOTS = (
    ("Write the set of numbers on the number line in interval notation.", "(-2,1]", "(-2, 1)", 0),
    (
        "Circle O has radius 1 and angle BAC = 60. BC = ? Choices: A:2 B:2√3 C:√3 D:2√2",
        "C",
        "B:2√3",
        0,
    ),
    ("Circle O has radius 1 and angle BAC = 60. BC = ? Choices: A:2 B:2√3 C:√3 D:2√2", "C", "C", 1),
    ("Find the length of AB.", "0.5 m", "50 cm", 1),
)


def mathverse_consistent(
    judge: JudgeClient, question_for_eval: str, gold: str, extracted: str
) -> bool:
    """MathVerse's second step. An exact string match is consistent without asking (VLMEvalKit)."""
    if extracted.strip() == gold.strip():
        return True
    shots = "\n\n".join(
        f"[Question]: {q}\n[Standard Answer]: {g}\n[Model answer]: {p}\nJudgement: {v}"
        for q, g, p, v in _MATHVERSE_SHOTS
    )
    prompt = (
        f"{_MATHVERSE_TASK}{shots}\n\n[Question]: {question_for_eval}\n[Standard Answer]: {gold}\n"
        f"[Model answer]: {extracted}\nJudgement:"
    )
    return parse_verdict(judge.complete([{"role": "user", "content": prompt}]))
