"""The tiny-cpu tokenizer's pre-tokenizer splits: ``lines`` merges within a line (a repeated code
line can become one token), ``lines-digits`` also keeps every digit a token of its own, so a
number printed by a program and the answer copying it are the same tokens."""

from __future__ import annotations

import pytest

from codedance.train.tiny import build_tokenizer

pytestmark = pytest.mark.tier("torch")

CORPUS = [
    f"<think>The output gives {n}, which answers the question.</think>\n<answer>{n}</answer>"
    for n in range(40)
] + [f"RESULT: {n}\nDONE\n" for n in range(40)] * 2


def pieces(tok, text):
    return [tok.decode([i]) for i in tok(text)["input_ids"]]


def test_lines_digits_keeps_numbers_as_digits_everywhere():
    tok = build_tokenizer(CORPUS, 600, "lines-digits")
    printed, answer = pieces(tok, "RESULT: 123\n"), pieces(tok, "<answer>123</answer>")
    assert printed[-4:-1] == answer[1:4] == ["1", "2", "3"]
    assert all(len(p) == 1 for p in pieces(tok, "9071"))
    lines = build_tokenizer(CORPUS, 600, "lines")
    assert "1" not in pieces(lines, "<answer>12</answer>")  # whole-line merges swallow the number
    assert tok.decode(tok("x = 12\nprint('DONE')\n")["input_ids"]) == "x = 12\nprint('DONE')\n"


def test_an_unknown_split_is_refused():
    with pytest.raises(ValueError, match="split"):
        build_tokenizer(CORPUS, 600, "sentences")
