"""``codedance solve``: one episode against an OpenAI-compatible server, shown and saved.

    codedance solve --model http://localhost:8000/v1 --image chart.png \\
        --question "What is the highest bar's value?" [--model-name NAME] [--profile release]

Prints each turn as it ends (think, code, output, saved image paths) and writes into ``--out``:
``trajectory.html`` (the whole conversation, images inline), ``trajectories.jsonl`` +
``images/`` (the record, see `codedance.records`) and the images as PNG files. Without
``--model-name`` the first model the server lists is used. On a server error or Ctrl-C the turns
done so far are saved the same way, with stop reason ``interrupted`` and the error noted. Exit code 2 on an error a person
can act on (unreachable server, unknown model, unreadable image).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console

from codedance.cli.console import make_console, user_errors
from codedance.cli.solve_view import (
    print_ending,
    print_turn,
    render_html,
    save_input_images,
    save_turn_images,
)
from codedance.policy import OpenAIChatPolicy, PolicyError, SamplingParams
from codedance.prompts import FeedbackLimits, VisionLimits, get_profile, image_from_bytes
from codedance.records import ImageStore, append_jsonl, trajectory_json
from codedance.rollout import Episode, EpisodeConfig, drive_episode
from codedance.types import Task, Trajectory, Turn

app = typer.Typer(help="Solve one question about one or more images with a served model.")


@app.command()
@user_errors
def solve(
    model: str = typer.Option(..., "--model", help="Server URL, e.g. http://localhost:8000/v1"),
    image: list[Path] = typer.Option(..., "--image", help="Input image (repeat for several)"),
    question: str = typer.Option(..., "--question", help="The question to answer"),
    model_name: str = typer.Option("", "--model-name", help="Served model name (default: the server's first)"),
    profile: str = typer.Option("release", help="Prompt profile: release, release-eval, paper, or one from --profiles"),
    profiles: Path | None = typer.Option(None, help="YAML file of user prompt profiles"),
    max_turns: int = typer.Option(10, help="Assistant turns at most (the paper evaluates with 10)"),
    temperature: float = typer.Option(0.0),
    top_p: float = typer.Option(1.0),
    max_tokens: int = typer.Option(2048, help="Tokens per assistant turn"),
    seed: int | None = typer.Option(None),
    exec_timeout: float = typer.Option(15.0, help="Seconds per code execution"),
    request_timeout: float = typer.Option(300.0, help="Seconds per model request"),
    max_pixels: int = typer.Option(16384 * 28 * 28, help="Largest image area sent to the model"),
    min_pixels: int = typer.Option(4 * 28 * 28, help="Smallest image area sent to the model"),
    api_key: str = typer.Option("EMPTY", envvar="OPENAI_API_KEY", help="Bearer token, if the server wants one"),
    plain_openai: bool = typer.Option(False, help="Send no vLLM/SGLang-only request fields"),
    out: Path | None = typer.Option(None, help="Output folder (default: ./solve-<time>)"),
) -> None:
    """Run one think -> execute -> feedback episode and show it."""
    console = make_console()
    out_dir = out or Path(f"solve-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        images = tuple(image_from_bytes(p.read_bytes(), origin=f"input:{k}") for k, p in enumerate(image))
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        policy = OpenAIChatPolicy(
            model, model_name or "?", sampling, api_key=api_key, timeout_s=request_timeout, server_extras=not plain_openai
        )
        if not model_name:
            served = policy.list_models()
            if not served:
                raise PolicyError(f"{policy.base_url}/models lists no models")
            policy.model = served[0]
        vision = VisionLimits(min_pixels=min_pixels, max_pixels=max_pixels)
        config = EpisodeConfig(
            max_turns=max_turns,
            profile=get_profile(profile, profiles),
            vision=vision,
            feedback=FeedbackLimits(vision=vision),
            metadata=(("model", policy.model),),
        )
        task = Task(id="solve", question=question, images=images, answer="")
    except (ValueError, OSError) as exc:  # an unreadable --image
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=2) from exc
    from codedance.sandbox import Sandbox

    console.print(f"model [bold]{policy.model}[/bold] at {policy.base_url}, profile {config.profile.name}")
    episode = Episode(task, config)
    paths = save_input_images(episode.prompt, out_dir)

    def show(turn: Turn) -> None:
        number = len(paths_by_turn) + 1
        paths_by_turn.append(save_turn_images(turn, number, out_dir))
        print_turn(turn, number, console, {**paths, **paths_by_turn[-1]})

    paths_by_turn: list[dict[int, Path]] = []
    try:
        with Sandbox(images=episode.images, timeout_s=exec_timeout) as sandbox:
            drive_episode(episode, policy, sandbox, on_turn=show)
    except BaseException as exc:  # a server error or Ctrl-C: keep what was done, then report it
        episode.interrupt(exc)
        for turn in episode.turns[len(paths_by_turn):]:
            show(turn)
        raise
    finally:
        policy.close()
        if episode.done:
            _save(episode.trajectory(), out_dir, question, console)


def _save(trajectory: Trajectory, out_dir: Path, question: str, console: Console) -> None:
    print_ending(trajectory, console)
    (out_dir / "trajectory.html").write_text(render_html(trajectory, title=question), encoding="utf-8")
    append_jsonl(out_dir / "trajectories.jsonl", trajectory_json(trajectory, ImageStore(out_dir / "images"), "solve#0"))
    console.print(f"saved {out_dir / 'trajectory.html'}")
