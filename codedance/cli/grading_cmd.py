"""``codedance grading check`` (grade one answer by the rules) and ``codedance grading judge``
(ask an OpenAI-compatible judge once). The rewards + advantages benchmark is
``benchmarks/rewards_bench.py``."""

from __future__ import annotations

import typer

from codedance.cli.console import make_console, user_errors

app = typer.Typer(help="Answer grading and the LLM judge.", no_args_is_help=True)


@app.command()
@user_errors
def check(
    prediction: str = typer.Argument(..., help="A model response or an extracted answer."),
    gold: str = typer.Argument(..., help="The gold answer."),
    kind: str = typer.Option("text", help="choice, count, number, relaxed, text or math."),
    choice: list[str] | None = typer.Option(None, help="An option as LETTER=TEXT (repeatable)."),
) -> None:
    """Extract the final answer from PREDICTION and check it against GOLD; exit 1 when wrong."""
    from codedance.errors import SettingsError
    from codedance.grading import check_answer, extract_answer

    extracted = extract_answer(prediction)
    answer = extracted.text if extracted.text is not None else prediction
    if any("=" not in c for c in choice or []):
        raise SettingsError(
            f"--choice expects LETTER=TEXT, got {[c for c in choice or [] if '=' not in c]}"
        )
    choices = dict(c.split("=", 1) for c in (choice or [])) or None
    ok = check_answer(answer, gold, kind, choices)
    make_console().print(
        f"{'correct' if ok else 'wrong'}: answer {answer!r} (from {extracted.source}), "
        f"gold {gold!r}, kind {kind}",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(0 if ok else 1)


@app.command()
@user_errors
def judge(
    question: str = typer.Argument(...),
    gold: str = typer.Argument(...),
    prediction: str = typer.Argument(...),
    base_url: str = typer.Option(
        "http://127.0.0.1:8000/v1", help="OpenAI-compatible server, ending in /v1."
    ),
    model: str = typer.Option("Qwen/Qwen2.5-72B-Instruct", help="Judge model name on that server."),
) -> None:
    """Ask the LLM judge whether PREDICTION matches GOLD for QUESTION."""
    from dataclasses import replace

    from codedance.grading import JUDGE_SERVER, JudgeClient

    with JudgeClient(
        replace(JUDGE_SERVER, url=base_url, model=model)
    ) as client:  # JudgeError: one line, exit 2
        verdict = client.judge(question=question, gold=gold, prediction=prediction)
    make_console().print(
        "Judgement: 1" if verdict else "Judgement: 0", markup=False, highlight=False
    )
