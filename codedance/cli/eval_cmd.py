"""``codedance eval`` and ``codedance report``: the paper's benchmarks against a served model.

    codedance eval --model http://localhost:8000/v1 --benchmarks vstar,chartqa,mathvision \\
        --max-turns 10 --concurrency 64 --out runs/NAME [--judge http://judge:8000/v1] \\
        [--limit 50] [--no-tools] [--data mathvision=/path/to/MATH-V] [--lmu-data ~/LMUData]
    codedance report runs/A runs/B          # side by side, deltas against the first

Scoring: ``--scoring vlmevalkit`` (default; VLMEvalKit's rules per sample) or ``strict``.
``--samples k`` runs k samples per item (needs ``--temperature`` above 0) and reports Avg@k with
a bootstrap interval and pass@k. Settings that cannot work (``--concurrency 0``, ...) are refused
before any server is contacted or any folder is written.

Data: ``$LMUData`` (default ``~/LMUData``) holds VLMEvalKit's TSV files; ``--data NAME=PATH``
points one benchmark at a TSV file, a Hugging Face export (parquet / JSONL) or the MATH-V
repository folder. ``--benchmarks paper`` runs the paper's eleven. Rerunning the same command
resumes. Exit codes: 0 when every sample ran; 1 when samples failed (the most common reason and
the failures file are printed; rerunning retries them) or the run stopped after consecutive
connection failures; 2 on an error a person can act on before the run (missing data, bad
settings, unreachable server).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import typer

from codedance.cli.console import make_console, user_errors

app = typer.Typer(help="Evaluate a served model on the paper's benchmarks.")


def _data_paths(values: list[str]) -> tuple[tuple[str, str], ...]:
    from codedance.errors import SettingsError
    from codedance.eval.spec import get_spec

    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            raise SettingsError(f"--data expects NAME=PATH, got {value!r}")
        pairs.append((get_spec(name).name, str(Path(path).expanduser())))
    return tuple(pairs)


@app.command("eval")
@user_errors
def eval_(
    model: str = typer.Option(..., "--model", help="Model server URL, e.g. http://localhost:8000/v1"),
    benchmarks: str = typer.Option("paper", help="Comma-separated names, 'paper' (the eleven) or 'all'"),
    out: Path = typer.Option(..., "--out", help="Run folder (rerun the same command to resume)"),
    model_name: str = typer.Option("", help="Served model name (default: the server's first)"),
    max_turns: int = typer.Option(10, help="Model calls per sample at most (paper: 10)"),
    concurrency: int = typer.Option(64, help="Samples in flight at once"),
    limit: int | None = typer.Option(None, help="First N samples of each benchmark"),
    no_tools: bool = typer.Option(False, "--no-tools", help="Answer directly, one turn, no code (baseline)"),
    judge: str = typer.Option("", help="OpenAI-compatible judge URL for judge-based metrics"),
    judge_model: str = typer.Option("Qwen/Qwen2.5-72B-Instruct", help="Judge model name"),
    data: list[str] = typer.Option([], "--data", help="NAME=PATH: a TSV, HF export or MATH-V folder"),
    lmu_data: Path | None = typer.Option(None, help="VLMEvalKit data folder (default $LMUData or ~/LMUData)"),
    pixmo_cache: Path | None = typer.Option(None, help="PixmoCount image cache (default <lmu-data>/pixmo_cache)"),
    fetch_images: bool = typer.Option(False, help="Download PixmoCount images missing from the cache"),
    profile: str = typer.Option("release", help="Prompt profile"),
    profiles: Path | None = typer.Option(None, help="YAML file of user prompt profiles"),
    temperature: float = typer.Option(0.0),
    max_tokens: int = typer.Option(2048, help="Tokens per model call"),
    exec_timeout: float = typer.Option(15.0, help="Seconds per code execution"),
    request_timeout: float = typer.Option(300.0, help="Seconds per model request"),
    api_key: str = typer.Option("EMPTY", envvar="OPENAI_API_KEY"),
    plain_openai: bool = typer.Option(False, help="Send no vLLM/SGLang-only request fields"),
    scoring: str = typer.Option("vlmevalkit", help="vlmevalkit (VLMEvalKit's rules per sample) or strict"),
    samples: int = typer.Option(1, help="Samples per item (Avg@k, pass@k); needs --temperature > 0"),
    stop_after: int = typer.Option(10, help="Stop after this many consecutive connection failures"),
    retries: int = typer.Option(4, help="Retries of a failed model request (connection errors, 429, 5xx)"),
) -> None:
    """Run the benchmarks, score them and write the report into --out."""
    from codedance.errors import SettingsError
    from codedance.eval.report import markdown
    from codedance.eval.runner import EvalSettings, run_eval
    from codedance.eval.spec import parse_benchmarks
    from codedance.grading import JudgeClient, JudgeConfig
    from codedance.policy import OpenAIChatPolicy, PolicyError, RetrySettings, SamplingParams
    from codedance.prompts import get_profile
    from codedance.rollout import EpisodeConfig

    console = make_console()
    judge_client = None
    try:
        selected = parse_benchmarks(benchmarks)  # a typo fails here, before any server is contacted
        lmu = lmu_data or Path(os.environ.get("LMUData", "~/LMUData"))
        lmu = lmu.expanduser()
        if max_tokens < 1 or request_timeout <= 0 or retries < 0:
            raise SettingsError(f"--max-tokens must be at least 1, --request-timeout above 0 and --retries at least 0 "
                             f"(got {max_tokens}, {request_timeout}, {retries})")
        episode = EpisodeConfig(max_turns=max_turns, profile=get_profile(profile, profiles))
        settings = EvalSettings(  # validates every setting before the server is contacted
            benchmarks=selected, episode=episode, no_tools=no_tools, limit=limit,
            concurrency=concurrency, exec_timeout_s=exec_timeout, lmu_dir=str(lmu),
            data_paths=_data_paths(data), pixmo_cache=str(pixmo_cache or lmu / "pixmo_cache"),
            fetch_images=fetch_images, scoring=scoring, samples=samples, temperature=temperature,
            stop_after_connection_failures=stop_after)
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens)
        policy = OpenAIChatPolicy(model, model_name or "?", sampling, api_key=api_key, timeout_s=request_timeout,
                                  server_extras=not plain_openai, retry=RetrySettings(max_retries=retries))
        if not model_name:
            served = policy.list_models()
            if not served:
                raise PolicyError(f"{policy.base_url}/models lists no models")
            policy.model = served[0]
        settings = dataclasses.replace(
            settings, episode=dataclasses.replace(episode, metadata=(("model", policy.model),)), model=policy.model,
            sampling=f"temperature={temperature},max_tokens={max_tokens}")
        if judge:
            judge_client = JudgeClient(JudgeConfig(base_url=judge, model=judge_model, api_key=api_key))
        console.print(f"model [bold]{policy.model}[/bold] at {policy.base_url}; "
                      f"{'no tools' if no_tools else f'max {max_turns} turns'}; scoring {scoring}; "
                      f"judge: {judge_model + ' at ' + judge if judge else 'none'}"
                      + (f"; {samples} samples per item" if samples > 1 else ""))
        report = run_eval(policy, settings, out, judge=judge_client,
                          on_loaded=lambda spec, n: console.print(f"{spec.title}: {n} samples"))
        policy.close()
    except (OSError, ImportError) as exc:  # a data file that cannot be read, an optional library missing
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=2) from exc
    finally:
        if judge_client is not None:
            judge_client.close()
    console.print(markdown(report))
    console.print(f"report: {out / 'report.html'}  trajectories: {out / 'view' / 'index.html'}")
    failed = report.failed
    if report.stopped or failed:
        expected = sum(r.expected * r.samples_per_item for r in report.results)
        top = report.top_failure()
        reason = f"; most common: {top[0]} ({top[1]}x)" if top else ""
        if report.stopped:
            console.print(f"[red]stopped early:[/red] {report.stopped}; finished samples are saved, "
                          f"rerun the same command to resume")
        console.print(f"[red]{failed}/{expected} samples failed[/red]{reason}; see {out / 'failures.jsonl'}; "
                      f"rerun the same command to retry them")
        raise typer.Exit(code=1)


def report(runs: list[Path] = typer.Argument(..., help="Run folders (or report.json files)"),
           allow_incomplete: bool = typer.Option(False, "--allow-incomplete",
                                                 help="Show deltas between incomplete and complete runs")) -> None:
    """Compare runs side by side: accuracy (with 95 % intervals), turns and execution success,
    deltas vs the first and whether each accuracy delta lies outside both intervals."""
    from codedance.eval.report import compare_markdown, load_report

    console = make_console()
    try:
        reports = [load_report(r) for r in runs]
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=2) from exc
    typer.echo(compare_markdown(reports, [str(r) for r in runs], allow_incomplete=allow_incomplete))
