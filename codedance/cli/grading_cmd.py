"""``codedance grading check`` (grade one answer by the rules) and ``codedance grading judge``
(ask an OpenAI-compatible judge once). The rewards + advantages benchmark is
``benchmarks/rewards_bench.py``."""

from __future__ import annotations

import typer

app = typer.Typer(help="Answer grading and the LLM judge.", no_args_is_help=True)


@app.command()
def check(
    prediction: str = typer.Argument(..., help="A model response or an extracted answer."),
    gold: str = typer.Argument(..., help="The gold answer."),
    kind: str = typer.Option("text", help="choice, count, number, relaxed, text or math."),
    choice: list[str] | None = typer.Option(None, help="An option as LETTER=TEXT (repeatable)."),
) -> None:
    """Extract the final answer from PREDICTION and check it against GOLD; exit 1 when wrong."""
    from codedance.grading import check_answer, extract_answer

    extracted = extract_answer(prediction)
    answer = extracted.text if extracted.text is not None else prediction
    choices = dict(c.split("=", 1) for c in (choice or [])) or None
    try:
        ok = check_answer(answer, gold, kind, choices)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"{'correct' if ok else 'wrong'}: answer {answer!r} (from {extracted.source}), gold {gold!r}, kind {kind}")
    raise typer.Exit(0 if ok else 1)


@app.command()
def judge(
    question: str = typer.Argument(...), gold: str = typer.Argument(...), prediction: str = typer.Argument(...),
    base_url: str = typer.Option("http://127.0.0.1:8000/v1", help="OpenAI-compatible server, ending in /v1."),
    model: str = typer.Option("Qwen/Qwen2.5-72B-Instruct", help="Judge model name on that server."),
) -> None:
    """Ask the LLM judge whether PREDICTION matches GOLD for QUESTION."""
    from codedance.grading import JudgeClient, JudgeConfig, JudgeError

    try:
        with JudgeClient(JudgeConfig(base_url=base_url, model=model)) as client:
            verdict = client.judge(question=question, gold=gold, prediction=prediction)
    except JudgeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo("Judgement: 1" if verdict else "Judgement: 0")

