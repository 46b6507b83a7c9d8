"""Running one snippet in a namespace, notebook style, and describing its failure.

Pure Python with no process handling (that is ``runtime``). The snippet is compiled under the
file name ``<snippet>``; when its last statement is an expression, that expression's value is
returned (like a notebook cell) so images and values left at the end are shown.

Error reports keep only the frames of the user's own code (plus the frame where the exception
finally arose, when that is in a library) so a model can correct itself without reading pages of
numpy internals.
"""

from __future__ import annotations

import ast
import traceback
from dataclasses import dataclass

from codedance import python_ast

SNIPPET_FILENAME = "<snippet>"
# snippets up to this many characters are checked for doing nothing (`executes_nothing`) by the
# controller; longer ones by the step that runs them, with its own CPU and memory: a parse holds
# the controller's GIL, and 1 MiB of ``a;`` took seconds and ~0.9 GB there while every other
# trajectory's controller thread waited
# pinned by `tests/sandbox/test_api.py::`
# `test_a_long_snippet_is_checked_for_doing_nothing_by_its_step_not_the_controller`
CONTROLLER_PARSE_CHARS = 16_384


@dataclass
class Failure:
    type: str
    message: str
    traceback: str
    frames: list[tuple[int, str]]


def executes_nothing(code: str) -> bool:
    """True when the snippet has no statement beyond ``pass`` or bare constants (docstrings).

    Such a snippet is a tool call that did nothing (the reward hack of the paper's Figure 11).

    >>> executes_nothing("# just a comment\\npass")
    True
    >>> executes_nothing("x = 1")
    False
    """
    try:
        tree = python_ast.parse(code)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError
        return False
    return all(
        isinstance(node, ast.Pass)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in tree.body
    )


def run_snippet(code: str, namespace: dict) -> object:
    """Execute ``code`` in ``namespace``; return the value of a trailing expression, else None."""
    tree = ast.parse(code, filename=SNIPPET_FILENAME, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(body=tree.body.pop().value)
    exec(compile(tree, SNIPPET_FILENAME, "exec"), namespace)  # noqa: S102 - running snippets is the job
    if last is None:
        return None
    return eval(compile(last, SNIPPET_FILENAME, "eval"), namespace)


def _clip(text: str, limit: int) -> str:
    return (
        text
        if len(text) <= limit
        else f"{text[: limit - 40]} [... {len(text) - limit + 40} characters cut]"
    )


def describe_failure(
    exc: BaseException, code: str, max_frames: int = 5, max_chars: int = 4000
) -> Failure:
    """Type, message, the user's frames and a short traceback for an exception from a snippet,
    each bounded (the message to ``max_chars``, the traceback to twice that). An exception whose
    ``str()`` itself fails is described as unprintable."""
    try:
        return _describe(exc, code, max_frames, max_chars)
    except Exception as inner:  # noqa: BLE001 - a hostile __str__ or __repr__
        name = _clip(type(exc).__name__, 200)
        message = f"<the exception could not be printed: {type(inner).__name__}>"
        return Failure(type=name, message=message, traceback=f"{name}: {message}", frames=[])


def _describe(exc: BaseException, code: str, max_frames: int, max_chars: int) -> Failure:
    lines = code.splitlines()
    frames: list[tuple[int, str]] = []
    shown: list[str] = []
    # frames are walked directly, not through traceback.extract_tb: no library source is read
    summary = [(frame.f_code, lineno) for frame, lineno in traceback.walk_tb(exc.__traceback__)]
    for index, (code_object, lineno) in enumerate(summary):
        is_user = code_object.co_filename == SNIPPET_FILENAME
        is_last = index == len(summary) - 1
        if not (is_user or is_last):
            continue
        name = code_object.co_name
        if is_user:
            number = lineno or 0
            source = lines[number - 1].strip() if 0 < number <= len(lines) else ""
            frames.append((number, source))
            shown.append(f'  File "{SNIPPET_FILENAME}", line {number}, in {name}\n    {source}')
        else:
            shown.append(f'  File "{code_object.co_filename}", line {lineno}, in {name}')
    frames, shown = frames[-max_frames:], shown[-max_frames:]
    if isinstance(exc, SyntaxError) and exc.filename == SNIPPET_FILENAME:
        number = exc.lineno or 0
        source = lines[number - 1] if 0 < number <= len(lines) else (exc.text or "")
        frames = [(number, source.strip())]
        caret = " " * max(0, (exc.offset or 1) - 1) + "^"
        shown = [f'  File "{SNIPPET_FILENAME}", line {number}\n    {source}\n    {caret}']
    message = _clip(
        str(exc) if not isinstance(exc, SyntaxError) else (exc.msg or str(exc)), max_chars
    )
    frames = [(number, _clip(source, 500)) for number, source in frames]
    shown = [_clip(line, 1000) for line in shown]
    header = (
        "Traceback (most recent call last):\n" if shown and not isinstance(exc, SyntaxError) else ""
    )
    name = _clip(type(exc).__name__, 200)
    text = _clip(
        header + "\n".join(shown) + ("\n" if shown else "") + f"{name}: {message}", 2 * max_chars
    )
    return Failure(type=name, message=message, traceback=text, frames=frames)
