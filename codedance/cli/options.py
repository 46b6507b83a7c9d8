"""The options several commands share, declared once so that a knob reads the same in every
``--help``, and `resolve`, the one way a command turns them into its settings.

- the one config shape (`codedance.config`): ``-c/--config`` presets or YAML files, ``key=value``
  overrides, ``--print-config``;
- the teacher and episode knobs of the commands that run the expert teacher (demo, synth,
  world accuracy);
- the model-server and episode knobs of the commands that talk to an OpenAI-compatible server
  (solve, eval).

Each knob's default is None, which keeps the value of the presets, files and the settings'
dataclass; the help text shows that value in brackets, written ``\\[value]`` because help texts
are rich markup (a bare ``[all]`` would be read as a style tag and vanish). Options only one
command has stay in its module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

T = TypeVar("T")
RUN, TEACHER, SERVER, EPISODE = "Run", "Teacher and episode", "Model server", "Episode"

# the one config shape
Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[KEY=VALUE]...",
        help="Settings, e.g. episode.max_turns=8 (all of them: --print-config)",
        show_default=False,
    ),
]
Presets = Annotated[
    list[str] | None,
    typer.Option(
        "-c",
        "--config",
        metavar="SPEC",
        help="A preset name or YAML file (repeatable).",
        show_default=False,
    ),
]
PrintConfig = Annotated[
    bool, typer.Option("--print-config", help="Print the resolved settings and exit.")
]

# the world commands: the run and the expert teacher
Skills = Annotated[
    str | None,
    typer.Option(
        help="Comma list of skills (see `codedance world list`) \\[all].", rich_help_panel=RUN
    ),
]
TeacherSeed = Annotated[
    int | None,
    typer.Option(help="Seed of the tasks and of the teacher's sampling [0].", rich_help_panel=RUN),
]
Episodes = Annotated[
    int | None,
    typer.Option(
        "--concurrency", help="Episodes (and sandbox steps) at once [2].", rich_help_panel=RUN
    ),
]
TeacherTemperature = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        help="Teacher temperature; 0: no first mistakes [1.0].",
        rich_help_panel=TEACHER,
    ),
]
MistakeRate = Annotated[
    float | None,
    typer.Option(
        help="Chance of a noticed-and-corrected first mistake on hard tasks [0.5].",
        rich_help_panel=TEACHER,
    ),
]
TurnBudget = Annotated[
    int | None,
    typer.Option("--max-turns", help="Turn budget per episode [6].", rich_help_panel=TEACHER),
]

# the served-model commands: the server and the episode
Model = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model server URL, e.g. http://localhost:8000/v1", rich_help_panel=SERVER
    ),
]
ModelName = Annotated[
    str | None,
    typer.Option(help="Served model name \\[the server's first]", rich_help_panel=SERVER),
]
Temperature = Annotated[
    float | None, typer.Option(help="Sampling temperature [0.0]", rich_help_panel=SERVER)
]
MaxTokens = Annotated[
    int | None, typer.Option(help="Tokens per model call [2048]", rich_help_panel=SERVER)
]
RequestTimeout = Annotated[
    float | None, typer.Option(help="Seconds per model request [300]", rich_help_panel=SERVER)
]
ApiKey = Annotated[
    str,
    typer.Option(
        envvar="OPENAI_API_KEY",
        help="Bearer token, if the server wants one",
        rich_help_panel=SERVER,
    ),
]
PlainOpenai = Annotated[
    bool | None,
    typer.Option(
        "--plain-openai",
        help="Send no vLLM/SGLang-only request fields",
        rich_help_panel=SERVER,
        show_default=False,
    ),
]

MaxTurns = Annotated[
    int | None,
    typer.Option(
        help="Model calls per episode at most (the paper evaluates with 10) [10]",
        rich_help_panel=EPISODE,
    ),
]
Profile = Annotated[
    str | None,
    typer.Option(
        help="Prompt profile: release, release-eval, paper, or one from --profiles \\[release]",
        rich_help_panel=EPISODE,
    ),
]
Profiles = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="YAML file of user prompt profiles", rich_help_panel=EPISODE),
]
ExecTimeout = Annotated[
    float | None, typer.Option(help="Seconds per code execution [15]", rich_help_panel=EPISODE)
]


def knob(help: str, panel: str = RUN, *names: str) -> Any:
    """A command's own option whose default None keeps the settings' value (see above)."""
    return typer.Option(None, *names, help=help, rich_help_panel=panel)


def resolve(
    kind: type[T],
    presets: list[str] | None,
    overrides: list[str] | None,
    *,
    print_config: bool,
    console: Console,
    command: str | None = None,
    **flags: Any,
) -> T:
    """The settings of ``kind`` from the presets and files, then the overrides, then the flags
    (None: not given). With ``--print-config`` they are printed as YAML and the command ends."""
    from codedance.config import dump, load
    from codedance.errors import SettingsError

    try:
        settings = load(kind, [*(presets or ()), *(overrides or ())], command=command, **flags)
    except SettingsError as exc:
        raise SettingsError(_as_flag(str(exc), flags)) from None
    if print_config:
        console.print(dump(settings), end="", markup=False, highlight=False)
        raise typer.Exit(0)
    return settings


FLAG_OF = {
    "server__url": "--model",
    "server__model": "--model-name",
    "server__timeout_s": "--request-timeout",
    "episode__exec_timeout_s": "--exec-timeout",
    "episode__prompt_profile": "--profile",
    "judge__url": "--judge",
    "judge__model": "--judge-model",
}
"""The flag of a key whose flag is not its last part (``episode__max_turns`` is ``--max-turns``)."""


def _as_flag(message: str, flags: dict[str, Any]) -> str:
    """A loader error about a key the person gave as a flag names the flag they typed
    (``--concurrency must be at least 1, got 0``, not ``concurrency: must be ...``;
    ``--max-turns ...``, not ``episode.max_turns: ...``)."""
    key, sep, rest = message.partition(": ")
    name = key.replace(".", "__")
    if sep and " " not in key and flags.get(name) is not None:
        flag = FLAG_OF.get(name, f"--{name.rpartition('__')[2].replace('_', '-')}")
        return f"{flag} {rest}"
    return message


def split_positionals(items: list[str] | None) -> tuple[list[str], list[str]]:
    """(positional arguments, ``key=value`` overrides) of a command whose positional arguments
    are files: an item is an override when it starts with a setting's name and ``=``
    (``limit=5``, ``server.url=...``); a path such as ``data/a=b.parquet`` stays a path."""
    import re

    positionals, overrides = [], []
    for item in items or ():
        (overrides if re.match(r"[A-Za-z_][\w.]*=", item) else positionals).append(item)
    return positionals, overrides


def vllm_extras(plain_openai: bool | None) -> bool | None:
    """The ``server.vllm_extras`` key of ``--plain-openai`` (None: the flag was not given)."""
    return None if plain_openai is None else not plain_openai
