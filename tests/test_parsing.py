"""Parsing of model messages: think, code in its three forms, answer, and the format verdicts."""

from __future__ import annotations

import json

import pytest

from codedance.parsing import (
    CodeForm,
    FormatReason,
    extract_boxed,
    extract_code,
    format_errors,
    parse_message,
)

pytestmark = pytest.mark.tier("unit")

CODE_TAG = "<think>zoom in</think>\n<code>\n```python\nprint(input_image.size)\n```\n</code>"


def reasons(text: str) -> set[str]:
    return set(parse_message(text).verdict.reasons)


def test_code_tag_form_is_extracted_and_well_formed() -> None:
    m = parse_message(CODE_TAG)
    assert m.think == "zoom in"
    assert m.code == "print(input_image.size)\n"
    assert m.code_form is CodeForm.CODE_TAG
    assert m.answer is None
    assert m.verdict.ok, m.verdict.reasons


def test_code_tag_cut_by_stop_string_still_runs() -> None:
    text = "<think>t</think><code>\n```python\nx = 1\nprint(x)\n```\n"
    code, form = extract_code(text)
    assert code == "x = 1\nprint(x)\n" and form is CodeForm.CODE_TAG


def test_hermes_tool_call_with_dict_and_string_arguments() -> None:
    as_dict = {"name": "execute_python_code", "arguments": {"code": "print(2)"}}
    text = f"<think>t</think><tool_call>\n{json.dumps(as_dict)}\n</tool_call>"
    assert extract_code(text) == ("print(2)", CodeForm.TOOL_CALL)
    as_string = {"name": "execute_python_code", "arguments": json.dumps({"code": "print(3)"})}
    text = f"<think>t</think><tool_call>{json.dumps(as_string)}</tool_call>"
    assert extract_code(text)[0] == "print(3)"
    assert parse_message(text).verdict.ok


def test_bad_and_unknown_tool_calls_are_flagged_and_not_run() -> None:
    bad = parse_message("<think>t</think><tool_call>{not json</tool_call>")
    assert bad.code is None and FormatReason.BAD_TOOL_CALL.value in bad.verdict.reasons
    other = parse_message(
        '<think>t</think><tool_call>{"name": "search", "arguments": {"q": 1}}</tool_call>'
    )
    assert other.code is None and FormatReason.UNKNOWN_TOOL.value in other.verdict.reasons


def test_bare_fence_is_the_fallback_form() -> None:
    assert extract_code("<think>t</think>```python\nprint(4)\n```") == (
        "print(4)\n",
        CodeForm.FENCE,
    )
    assert extract_code("```bash\nls\n```") == (None, None)


def test_the_first_snippet_runs_and_several_are_flagged() -> None:
    text = "<think>t</think>```python\nfirst()\n```\n<code>\n```python\nsecond()\n```\n</code>"
    m = parse_message(text)
    assert m.code == "first()\n"
    assert FormatReason.SEVERAL_CODES.value in m.verdict.reasons


def test_fence_inside_code_tag_is_one_snippet() -> None:
    assert FormatReason.SEVERAL_CODES.value not in reasons(CODE_TAG)


def test_unfenced_code_tag_runs_but_is_flagged() -> None:
    m = parse_message("<think>t</think><code>print(5)</code>")
    assert m.code == "print(5)"
    assert FormatReason.UNFENCED_CODE.value in m.verdict.reasons


def test_unclosed_fence_is_no_code() -> None:
    m = parse_message("<think>t</think><code>\n```python\nprint(6)")
    assert m.code is None
    assert {FormatReason.UNCLOSED_CODE.value, FormatReason.NO_ACTION.value} <= set(
        m.verdict.reasons
    )


def test_answer_and_its_problems() -> None:
    assert parse_message("<think>t</think><answer> 42 </answer>").answer == "42"
    several = parse_message("<think>t</think><answer>1</answer><answer>2</answer>")
    assert several.answer == "2" and FormatReason.SEVERAL_ANSWERS.value in several.verdict.reasons
    long = parse_message("<think>t</think><answer>" + "x" * 1000 + "</answer>")
    assert FormatReason.LONG_ANSWER.value in long.verdict.reasons
    assert FormatReason.UNCLOSED_ANSWER.value in reasons("<think>t</think><answer>7")
    assert FormatReason.EMPTY_ANSWER.value in reasons("<think>t</think><answer> </answer>")


def test_code_and_answer_in_one_turn_is_flagged() -> None:
    m = parse_message(CODE_TAG + "<answer>3</answer>")
    assert m.code is not None and m.answer == "3"
    assert FormatReason.CODE_AND_ANSWER.value in m.verdict.reasons


def test_think_tags() -> None:
    assert FormatReason.UNBALANCED_THINK.value in reasons("<think>a<answer>1</answer>")
    assert FormatReason.NO_THINK.value in reasons("<answer>1</answer>")
    assert parse_message("<think>a</think><think>b</think><answer>1</answer>").think == "a"


def test_boxed_is_a_scoring_fallback_and_a_format_error() -> None:
    m = parse_message(r"<think>t</think>The answer is \boxed{\frac{3}{4}}.")
    assert m.answer is None and m.scoring_answer == r"\frac{3}{4}"
    assert FormatReason.BOXED_ONLY.value in m.verdict.reasons
    assert not m.verdict.ok
    assert extract_boxed(r"\boxed{unclosed") is None
    inside = parse_message(r"<think>t</think><answer>\boxed{5}</answer>")
    assert inside.answer == r"\boxed{5}" and inside.boxed is None and inside.verdict.ok


def test_empty_and_prose_only_messages() -> None:
    assert parse_message("").verdict.reasons == (
        FormatReason.EMPTY.value,
        FormatReason.NO_THINK.value,
    )
    assert FormatReason.NO_ACTION.value in reasons("<think>hmm</think> I am not sure.")


@pytest.mark.parametrize(
    "texts, expected",
    [
        (("<think>a</think>" + CODE_TAG, "<think>b</think><answer>1</answer>"), ()),
        (("<think>a</think>",), (FormatReason.NO_ANSWER.value,)),
        (("<answer>1</answer>", "<answer>2</answer>"), (FormatReason.SEVERAL_ANSWERS.value,)),
        (("<think>a</think><answer>1",), (FormatReason.UNCLOSED_ANSWER.value,)),
    ],
)
def test_format_errors_is_the_release_rule(
    texts: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert format_errors(texts) == expected
