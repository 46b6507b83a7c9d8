"""``codedance solve``: one episode against an OpenAI-compatible server, shown and saved.

    codedance solve --model http://localhost:8000/v1 --image chart.png \\
        --question "What is the highest bar's value?" [--model-name NAME] [--profile release]

Prints each turn as it ends (think, code, output, saved image paths) and writes into ``--out``:
``trajectory.html`` (the whole conversation, images inline), ``trajectories.jsonl`` + ``images/``
(the record, see `codedance.records`) and the images as PNG files. Without ``--model-name`` the
first model the server lists is used. On a server error or Ctrl-C the turns done so far are saved
the same way, with stop reason ``interrupted`` and the error noted. Exit code 2 on an error a person
can act on (unreachable server, unknown model, unreadable image).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import typer
from rich.console import Console

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors
from codedance.cli.solve_view import (
    print_ending,
    print_turn,
    render_html,
    save_input_images,
    save_turn_images,
)
from codedance.config import bounded
from codedance.errors import SettingsError
from codedance.policy import PolicyError
from codedance.policy.server_config import ServerConfig
from codedance.prompts.vision import image_file, image_from_bytes
from codedance.records import ImageStore, append_jsonl, trajectory_json
from codedance.rollout import EVAL_MAX_TURNS, Episode, EpisodeSettings, drive_episode
from codedance.runs.rundir import episode_key
from codedance.types import Task, Trajectory, Turn

app = typer.Typer(help="Solve one question about one or more images with a served model.")


@dataclass(frozen=True)
class SolveConfig:
    """The settings of ``codedance solve`` for the one loader (`codedance.config`); the image, the
    question and the output folder are the command's own arguments."""

    server: ServerConfig = field(default_factory=ServerConfig)
    episode: EpisodeSettings = field(
        default_factory=lambda: EpisodeSettings(max_turns=EVAL_MAX_TURNS)
    )
    profiles: str = ""  # a YAML file of user prompt profiles
    top_p: float = bounded(1.0, above=0, at_most=1)
    seed: int | None = None


@app.command()
@user_errors(
    interrupted="interrupted: the turns so far are saved in --out; solve does not resume "
    "(a rerun starts over)"
)
def solve(
    overrides: opt.Overrides = None,
    config: list[str] = typer.Option(
        [], "-c", "--config", metavar="FILE", help="A YAML file of settings (repeatable)."
    ),
    model: opt.Model = None,
    image: list[Path] = typer.Option([], "--image", help="Input image (repeat for several)"),
    question: str = typer.Option("", "--question", help="The question to answer"),
    model_name: opt.ModelName = None,
    profile: opt.Profile = None,
    profiles: opt.Profiles = None,
    max_turns: opt.MaxTurns = None,
    temperature: opt.Temperature = None,
    top_p: float = typer.Option(None, help="Nucleus sampling [1.0]", rich_help_panel=opt.SERVER),
    max_tokens: opt.MaxTokens = None,
    seed: int = typer.Option(None, help="Sampling seed \\[none]", rich_help_panel=opt.SERVER),
    exec_timeout: opt.ExecTimeout = None,
    request_timeout: opt.RequestTimeout = None,
    max_pixels: int = typer.Option(
        None, help="Largest image area sent to the model [16384·28·28]", rich_help_panel=opt.EPISODE
    ),
    min_pixels: int = typer.Option(
        None, help="Smallest image area sent to the model [4·28·28]", rich_help_panel=opt.EPISODE
    ),
    api_key: opt.ApiKey = "EMPTY",
    plain_openai: opt.PlainOpenai = None,
    out: Path | None = typer.Option(None, help="Output folder (default: ./solve-<time>)"),
    print_config: opt.PrintConfig = False,
) -> None:
    """Run one think -> execute -> feedback episode and show it."""
    console = make_console()
    cfg = opt.resolve(
        SolveConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        server__url=model,
        server__model=model_name,
        server__temperature=temperature,
        server__max_tokens=max_tokens,
        server__timeout_s=request_timeout,
        server__vllm_extras=opt.vllm_extras(plain_openai),
        episode__prompt_profile=profile,
        episode__max_turns=max_turns,
        episode__exec_timeout_s=exec_timeout,
        episode__max_pixels=max_pixels,
        episode__min_pixels=min_pixels,
        profiles=None if profiles is None else str(profiles),
        top_p=top_p,
        seed=seed,
    )
    if not cfg.server.url or not image or not question:
        raise SettingsError(
            "give the server, the image(s) and the question: "
            "--model URL --image FILE --question TEXT"
        )
    out_dir = out or Path(f"solve-{time.strftime('%Y%m%d-%H%M%S')}")
    if (out_dir / "trajectories.jsonl").exists():
        raise SettingsError(
            f"--out {out_dir} already holds a solve run; "
            "give another folder (solve does not resume)"
        )
    images = tuple(
        image_from_bytes(image_file(p), origin=f"input:{k}") for k, p in enumerate(image)
    )
    episode_config = cfg.episode.episode_config(
        profiles=cfg.profiles or None
    )  # a bad profile: before the server
    policy = cfg.server.policy(api_key, seed=cfg.seed, top_p=cfg.top_p)
    if not cfg.server.model:
        served = policy.list_models()
        if not served:
            raise PolicyError(f"{policy.base_url}/models lists no models")
        policy.model = served[0]
    config = replace(episode_config, metadata=(("model", policy.model),))
    task = Task(id="solve", question=question, images=images, answer="")
    from codedance.sandbox import Sandbox

    console.print(
        f"model [bold]{policy.model}[/bold] at {policy.base_url}, profile {config.profile.name}"
    )
    episode = Episode(task, config)
    paths = save_input_images(episode.prompt, out_dir)

    def show(turn: Turn) -> None:
        number = len(paths_by_turn) + 1
        paths_by_turn.append(save_turn_images(turn, number, out_dir))
        print_turn(turn, number, console, {**paths, **paths_by_turn[-1]})

    paths_by_turn: list[dict[int, Path]] = []
    try:
        with Sandbox(images=episode.images, timeout_s=cfg.episode.exec_timeout_s) as sandbox:
            drive_episode(episode, policy, sandbox, on_turn=show)
    except BaseException as exc:  # a server error or Ctrl-C: keep what was done, then report it
        episode.interrupt(exc)
        for turn in episode.turns[len(paths_by_turn) :]:
            show(turn)
        raise
    finally:
        policy.close()
        if episode.done:
            _save(episode.trajectory(), out_dir, question, console)


def _save(trajectory: Trajectory, out_dir: Path, question: str, console: Console) -> None:
    print_ending(trajectory, console)
    (out_dir / "trajectory.html").write_text(
        render_html(trajectory, title=question), encoding="utf-8"
    )
    key = episode_key(trajectory.task_id, 0)
    append_jsonl(
        out_dir / "trajectories.jsonl",
        trajectory_json(trajectory, ImageStore(out_dir / "images"), key),
    )
    console.print(f"saved {out_dir / 'trajectory.html'}")
