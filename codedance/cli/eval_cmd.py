"""``codedance eval`` and ``codedance report``: the paper's benchmarks against a served model.

    codedance eval --model http://localhost:8000/v1 --benchmarks vstar,chartqa,mathvision \\
        --max-turns 10 --concurrency 64 --out runs/NAME [--judge http://judge:8000/v1] \\
        [--limit 50] [--no-tools] [--data mathvision=/path/to/MATH-V] [--lmu-data ~/LMUData]
    codedance eval -c smoke --model URL --out runs/NAME [key=value ...] [--print-config]
    codedance eval --model URL --out runs/NAME --tasks data/codedance-rl tasks_split=val
    codedance report runs/A runs/B          # side by side, deltas against the first

Settings are `codedance.eval.options.EvalConfig` through the one loader: presets
(``codedance presets ls eval``), YAML files and ``key=value`` overrides; the flags below are
sugar for its keys and win over presets and files.

Scoring: ``--scoring vlmevalkit`` (default; VLMEvalKit's rules per sample) or ``strict``.
``--samples k`` runs k samples per item (needs ``--temperature`` above 0) and reports Avg@k with
a bootstrap interval and pass@k. Settings that cannot work (``--concurrency 0``, ...) are refused
before any server is contacted or any folder is written.

Data: ``$LMUData`` (default ``~/LMUData``) holds VLMEvalKit's TSV files; ``--data NAME=PATH`` points
one benchmark at a TSV file, a Hugging Face export (parquet / JSONL) or the MATH-V repository
folder. ``--benchmarks paper`` runs the paper's eleven (the default). ``--tasks PATH`` evaluates a
Task JSONL (``codedance data import codedance-rl`` or ``codedance world gen``; only it unless
``--benchmarks`` names others), scored by the rule of each task's kind. Rerunning the same command
resumes. Exit codes: 0 when every sample ran; 1 when samples failed (the most common reason and the
failures file are printed; rerunning retries them), the run stopped after consecutive server
failures (unreachable, a refused key or model, or HTTP 429/5xx after retries), or the judge given
never answered (the judged numbers are "not produced"); 2 on an error a person can act on before the
run (missing data, bad settings, unreachable server); 130 when interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors

app = typer.Typer(help="Evaluate a served model on the paper's benchmarks.")
DATA = "Data"


@app.command("eval")
@user_errors
def eval_(
    overrides: opt.Overrides = None,
    config: opt.Presets = None,
    model: opt.Model = None,
    out: Path = typer.Option(
        None, "--out", help="Run folder (rerun the same command to resume)", rich_help_panel=opt.RUN
    ),
    benchmarks: str = opt.knob("Comma-separated names, 'paper' (the eleven) or 'all' \\[paper]"),
    tasks: Path = typer.Option(
        None,
        metavar="PATH",
        help="A Task JSONL or import folder to evaluate (tasks_split=val: one split)",
        rich_help_panel=DATA,
    ),
    model_name: opt.ModelName = None,
    max_turns: opt.MaxTurns = None,
    concurrency: int = opt.knob("Samples in flight at once [64]"),
    limit: int = opt.knob("First N samples of each benchmark \\[all]"),
    no_tools: bool = typer.Option(
        None,
        "--no-tools",
        help="Answer directly, one turn, no code (baseline)",
        rich_help_panel=opt.RUN,
        show_default=False,
    ),
    judge: str = opt.knob("OpenAI-compatible judge URL for judge-based metrics"),
    judge_model: str = opt.knob("Judge model name \\[Qwen/Qwen2.5-72B-Instruct]"),
    data: list[str] = typer.Option(
        [], "--data", help="NAME=PATH: a TSV, HF export or MATH-V folder", rich_help_panel=DATA
    ),
    lmu_data: Path = typer.Option(
        None, help="VLMEvalKit data folder \\[$LMUData or ~/LMUData]", rich_help_panel=DATA
    ),
    pixmo_cache: Path = typer.Option(
        None, help="PixmoCount image cache \\[<lmu-data>/pixmo_cache]", rich_help_panel=DATA
    ),
    fetch_images: bool = typer.Option(
        None,
        "--fetch-images",
        help="Download PixmoCount images missing from the cache",
        rich_help_panel=DATA,
        show_default=False,
    ),
    profile: opt.Profile = None,
    profiles: opt.Profiles = None,
    temperature: opt.Temperature = None,
    max_tokens: opt.MaxTokens = None,
    exec_timeout: opt.ExecTimeout = None,
    request_timeout: opt.RequestTimeout = None,
    api_key: opt.ApiKey = "EMPTY",
    plain_openai: opt.PlainOpenai = None,
    scoring: str = opt.knob("vlmevalkit (VLMEvalKit's rules per sample) or strict \\[vlmevalkit]"),
    samples: int = opt.knob("Samples per item (Avg@k, pass@k); needs --temperature > 0 [1]"),
    stop_after: int = opt.knob(
        "Stop after this many consecutive server failures (unreachable, a refused key or "
        "model, or 429/5xx after retries) [10]",
        opt.SERVER,
    ),
    retries: int = opt.knob(
        "Retries of a failed model request (connection errors, 429, 5xx) [4]", opt.SERVER
    ),
    agent: str = typer.Option(
        None,
        help="The model family's own protocol: codedance, codedance-paper, deepeyes, deepeyesv2, "
        "thyme, mini-o3 "
        "(docs/eval.md, reproduction cards) \\[codedance]",
        rich_help_panel=opt.RUN,
    ),
    print_config: opt.PrintConfig = False,
) -> None:
    """Run the benchmarks, score them and write the report into --out."""
    from codedance.eval.options import EvalConfig
    from codedance.eval.report import markdown
    from codedance.eval.runner import load_data, run_eval
    from codedance.grading import JudgeClient
    from codedance.policy import PolicyError

    console = make_console()
    text = lambda v: None if v is None else str(v)
    cfg = opt.resolve(
        EvalConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="eval",
        benchmarks=benchmarks,
        out=text(out),
        tasks=text(tasks),
        server__url=model,
        server__model=model_name,
        server__temperature=temperature,
        server__max_tokens=max_tokens,
        server__timeout_s=request_timeout,
        server__retries=retries,
        server__vllm_extras=opt.vllm_extras(plain_openai),
        episode__max_turns=max_turns,
        episode__prompt_profile=profile,
        episode__exec_timeout_s=exec_timeout,
        profiles=text(profiles),
        no_tools=no_tools,
        limit=limit,
        samples=samples,
        scoring=scoring,
        judge__url=judge,
        judge__model=judge_model,
        data=list(data) or None,
        lmu_data=text(lmu_data),
        pixmo_cache=text(pixmo_cache),
        fetch_images=fetch_images,
        concurrency=concurrency,
        stop_after=stop_after,
        agent=agent,
    )
    server, out_dir = cfg.server, Path(cfg.out)
    judge_client = None
    try:
        settings = cfg.run_settings()  # validates every setting before the server is contacted
        loaded = load_data(settings)  # and the data (rows, columns, images)
        policy = server.policy(api_key)
        if not server.model:
            served = policy.list_models()
            if not served:
                raise PolicyError(f"{policy.base_url}/models lists no models")
            policy.model = served[0]
        settings = dataclasses.replace(
            settings,
            episode=dataclasses.replace(settings.episode, metadata=(("model", policy.model),)),
            model=policy.model,
        )
        if cfg.judge.url:
            judge_client = JudgeClient(dataclasses.replace(cfg.judge, api_key=api_key))
        console.print(
            f"model [bold]{policy.model}[/bold] at {policy.base_url}; "
            f"{'no tools' if cfg.no_tools else f'max {cfg.episode.max_turns} turns'}; "
            f"scoring {cfg.scoring}; "
            f"judge: {cfg.judge.model + ' at ' + cfg.judge.url if cfg.judge.url else 'none'}"
            + (f"; {cfg.samples} samples per item" if cfg.samples > 1 else "")
        )
        report = run_eval(
            policy,
            settings,
            out_dir,
            judge=judge_client,
            loaded=loaded,
            on_loaded=lambda spec, n: console.print(f"{spec.title}: {n} samples"),
        )
        policy.close()
    finally:
        if judge_client is not None:
            judge_client.close()
    console.print(markdown(report))
    console.print(
        f"report: {out_dir / 'report.html'}  trajectories: {out_dir / 'view' / 'index.html'}"
    )
    unjudged = [
        line
        for r in report.results
        for line in r.not_produced
        if "the judge did not answer" in line
    ]
    if unjudged:
        console.print(
            f"[red]judged numbers not produced:[/red] the judge at {cfg.judge.url} did not answer; "
            f"start it and rerun the same command (only the unjudged samples are scored again)"
        )
    failed = report.failed
    if unjudged and not (report.stopped or failed):
        raise typer.Exit(code=1)
    if report.stopped or failed:
        expected = sum(r.expected * r.samples_per_item for r in report.results)
        top = report.top_failure()
        reason = f"; most common: {top[0]} ({top[1]}x)" if top else ""
        if report.stopped:
            console.print(
                f"[red]stopped early:[/red] {report.stopped}; finished samples are saved, "
                f"rerun the same command to resume"
            )
        console.print(
            f"[red]{failed}/{expected} samples failed[/red]{reason}; "
            f"see {out_dir / 'failures.jsonl'}; "
            f"rerun the same command to retry them"
        )
        raise typer.Exit(code=1)


@user_errors
def report(
    runs: list[Path] = typer.Argument(..., help="Run folders (or report.json files)"),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete", help="Show deltas between incomplete and complete runs"
    ),
) -> None:
    """Compare runs side by side: accuracy (with 95 % intervals), turns and execution success,
    deltas vs the first and whether each accuracy delta lies outside both intervals."""
    from codedance.eval.report import compare_markdown, load_report

    reports = [load_report(r) for r in runs]
    typer.echo(compare_markdown(reports, [str(r) for r in runs], allow_incomplete=allow_incomplete))
