"""The curate run's settings: presets, YAML files and ``key=value`` overrides (`load_config`).

    config = load_config(["curate.yaml", "filter.k=8"])     # or load_config("curate.yaml")

The specs are merged by the one config loader (`codedance.config.merged`: a preset name from
``codedance/presets/curate/``, a YAML path, a dotted override), then checked here (`parse_config`)
with the loader's `codedance.config.build` for each section, so unknown keys and wrong types get
its one-line messages. Relative paths resolve from the folder of the last YAML file given (the
working directory when none is). A mapping:

    out: runs/curate                 # run directory (resumed when rerun)
    stages: [inspect, filter, atomic, verify]   # any subset, in this order; export always runs
    endpoints:                       # three OpenAI-compatible servers
      weak:   {url: http://127.0.0.1:8001/v1, model: Qwen2.5-VL-7B-Instruct, max_in_flight: 64}
      strong: {url: http://127.0.0.1:8002/v1, model: Qwen2.5-VL-72B-Instruct}
      judge:  {url: http://127.0.0.1:8003/v1, model: Qwen2.5-72B-Instruct}
    sources:
      - {kind: world, skills: [search], difficulties: [medium, hard], n: 20, seed: 0}
      - {kind: benchmark, name: mathvision_mini, path: /data/mathvision-testmini, limit: 50}
      - {kind: table, path: my.parquet, question: question, answer: answer, answer_kind: text}
    filter: {k: 4, temperature: 1.0, easy_threshold: 0.75, medium_threshold: 0.5, easy_keep: 0.25,
             judge: undecided}
    atomic: {min_box_side: 8, max_box_area: 0.9, max_boxes: 3}
    verify: {judge: true, cross_check: false}
    episode: {max_turns: 6, exec_timeout_s: 15}   # codedance.rollout.EpisodeSettings
    inspect: {image: true, question: true}
    prompts: my_prompts/             # optional folder overriding any template by file name
    sandboxes: 4                     # sandboxes running at once

Endpoint keys are `codedance.policy.server_config.ServerConfig`'s, starting from `ENDPOINT`:
``url``, ``model``, ``api_key`` (default ``EMPTY``), ``max_in_flight`` (16), ``max_tokens``
(1024), ``temperature`` (0.0, the filter stage uses ``filter.temperature``), ``timeout_s`` (120),
``retries`` (3), ``backoff_s`` (0.5), ``breaker_failures`` (5 consecutive failed requests open
the circuit breaker), ``vllm_extras`` (true: send vLLM's extra request fields; false for servers
that reject unknown fields). Unknown keys are refused, so a typo fails loudly; a renamed key names
its new one. Sources are read by `codedance.curate.sources`.

`run_settings_of` is what defines a run (saved in ``run.json`` by `codedance.runs.RunDir`; a rerun
with other values is refused): sources, filter, atomic, verify, inspect and episode settings, the
prompts folder, each endpoint's model, temperature and max_tokens. Not defining (free to change
between attempts): ``out``, ``stages``, ``sandboxes``, the endpoints' URLs, keys, timeouts, retries
and bounds. Not handled: edits inside a prompts folder or a source file (the names are compared).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codedance.config import bounded, build, merged, not_resumed, refuse_moved
from codedance.errors import SettingsError
from codedance.policy.server_config import ServerConfig
from codedance.rollout import EpisodeSettings
from codedance.runs.rundir import run_settings

STAGES = ("inspect", "filter", "atomic", "verify")
DEFAULT_STAGES = ("filter", "atomic", "verify")
ROLES = ("weak", "strong", "judge")
JUDGE_MODES = ("never", "undecided", "fallback")
MOVED = {
    "atomic.max_turns": "episode.max_turns",
    "verify.exec_timeout_s": "episode.exec_timeout_s",
}  # old -> new


class CurateError(SettingsError):
    """A bad configuration or an unusable input; the message says what to change."""


ENDPOINT = ServerConfig(max_in_flight=16, max_tokens=1024, timeout_s=120.0, retries=3)
"""What an endpoint's keys start from (each role's mapping fills in the rest)."""


@dataclass(frozen=True)
class FilterConfig:
    """``easy_threshold``: weak solve rate at or above it is easy; ``medium_threshold``: strong
    solve rate at or above it is medium (below: hard); ``easy_keep``: share of easy items kept as
    direct-answer examples (chosen by item key, so reruns keep the same ones); ``judge``: which
    answers the rules reject go to the judge endpoint (``never``, ``undecided``: text and math
    answer kinds, ``fallback``: every kind; `codedance.curate.filtering`)."""

    k: int = bounded(4, at_least=1)
    temperature: float = bounded(1.0, at_least=0)
    easy_threshold: float = bounded(0.75, at_least=0, at_most=1)
    medium_threshold: float = bounded(0.5, at_least=0, at_most=1)
    easy_keep: float = bounded(0.25, at_least=0, at_most=1)
    judge: str = "undecided"


@dataclass(frozen=True)
class AtomicConfig:
    """Box rules: a side under ``min_box_side`` pixels is degenerate; a box covering more than
    ``max_box_area`` of the image is "nearly the whole image"; at most ``max_boxes`` boxes are
    used by a hard trajectory (medium uses the first plausible one)."""

    min_box_side: int = bounded(8, at_least=0)
    max_box_area: float = bounded(0.9, above=0, at_most=1)
    max_boxes: int = bounded(3, at_least=1)


@dataclass(frozen=True)
class VerifyConfig:
    """``judge``: grade answers the rules reject with the judge; ``cross_check``: ask the judge
    (which must then be a VLM) whether the reasoning agrees with the images."""

    judge: bool = True
    cross_check: bool = False


@dataclass(frozen=True)
class InspectConfig:
    image: bool = True
    question: bool = True


@dataclass(frozen=True)
class CurateConfig:
    out: Path = field(
        default=Path("runs/curate"), metadata={"resume": False}
    )  # not_resumed, for a Path
    endpoints: dict[str, ServerConfig] = field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()
    stages: tuple[str, ...] = not_resumed(DEFAULT_STAGES)
    filter: FilterConfig = FilterConfig()
    atomic: AtomicConfig = AtomicConfig()
    verify: VerifyConfig = VerifyConfig()
    inspect: InspectConfig = InspectConfig()
    episode: EpisodeSettings = EpisodeSettings()
    prompts: Path | None = None
    sandboxes: int = not_resumed(4, at_least=1)
    base: Path = field(
        default=Path("."), metadata={"resume": False}
    )  # the YAML's folder: relative paths


def _check(config: CurateConfig) -> None:
    """The choices the types cannot say (the numbers' ranges are the fields' `bounded`, checked
    by the loader)."""
    f = config.filter
    if f.judge not in JUDGE_MODES:
        raise CurateError(f"filter.judge must be one of {', '.join(JUDGE_MODES)}, got {f.judge!r}")
    for role, e in config.endpoints.items():
        if not e.url or not e.model:
            raise CurateError(
                f"endpoints.{role} needs url and model ({{url: http://HOST:PORT/v1, model: NAME}})"
            )


def _roles_needed(config: CurateConfig) -> set[str]:
    needed = {"filter": ("weak", "strong"), "atomic": ("strong",), "inspect": ("strong",)}
    roles = {r for s in config.stages for r in needed.get(s, ())}
    if "verify" in config.stages and (config.verify.judge or config.verify.cross_check):
        roles.add("judge")
    if "filter" in config.stages and config.filter.judge != "never":
        roles.add("judge")
    return roles


def parse_config(raw: object, base: Path = Path(".")) -> CurateConfig:
    """The `CurateConfig` of a decoded YAML mapping; relative paths resolve against `base`."""
    if not isinstance(raw, dict):
        raise CurateError("the curate config must be a YAML mapping (see docs/curate.md)")
    for key in ("out", "endpoints", "sources"):
        if key not in raw:
            raise CurateError(f"the config needs '{key}' (see docs/curate.md for an example)")
    endpoints_raw = raw["endpoints"] or {}
    if not isinstance(endpoints_raw, dict):
        raise CurateError(
            "endpoints must map roles (weak, strong, judge) to {url: ..., model: ...}"
        )
    extra = sorted(set(endpoints_raw) - set(ROLES))
    if extra:
        raise CurateError(
            f"endpoints: unknown role(s) {', '.join(extra)}; roles are {', '.join(ROLES)}"
        )
    stages = raw.get("stages") or list(DEFAULT_STAGES)
    if isinstance(stages, str):  # stages=filter,atomic on the command line
        stages = [s.strip() for s in stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES] if isinstance(stages, list) else [stages]
    if bad:
        raise CurateError(
            f"unknown stage(s) {', '.join(map(str, bad))}; choose from {', '.join(STAGES)}"
        )
    sources = raw["sources"]
    if (
        not isinstance(sources, list)
        or not sources
        or not all(isinstance(s, dict) for s in sources)
    ):
        raise CurateError("sources must be a non-empty list of mappings, each with a 'kind'")
    plain = {
        k: v
        for k, v in raw.items()
        if k not in ("endpoints", "sources", "stages", "out", "prompts")
    }
    try:
        refuse_moved(raw, MOVED)
    except SettingsError as exc:
        raise CurateError(str(exc)) from None
    if "base" in plain:
        raise CurateError(
            "unknown setting base: relative paths resolve from the YAML file's folder"
        )
    try:
        config = build(CurateConfig(), plain)
        endpoints = {
            r: build(ENDPOINT, endpoints_raw[r], f"endpoints.{r}.")
            for r in ROLES
            if r in endpoints_raw
        }
    except SettingsError as exc:
        raise CurateError(str(exc)) from None
    prompts = raw.get("prompts")
    config = CurateConfig(
        out=base / str(raw["out"]),
        endpoints=endpoints,
        sources=tuple(sources),
        stages=tuple(s for s in STAGES if s in stages),
        filter=config.filter,
        atomic=config.atomic,
        verify=config.verify,
        inspect=config.inspect,
        episode=config.episode,
        prompts=None if prompts is None else base / str(prompts),
        sandboxes=config.sandboxes,
        base=base,
    )
    missing = sorted(_roles_needed(config) - set(endpoints))
    if missing:
        raise CurateError(
            f"endpoints: the stages {', '.join(config.stages)} need {', '.join(missing)} "
            f"(each as {{url: ..., model: ...}})"
        )
    _check(config)
    return config


def load_config(specs: str | Path | list[str] | tuple[str, ...]) -> CurateConfig:
    """The config of `specs` (one YAML path, or presets / YAML paths / ``key=value`` overrides in
    order; see the module docstring); `CurateError` or `SettingsError` with a one-line reason."""
    specs = [str(specs)] if isinstance(specs, (str, Path)) else [str(s) for s in specs]
    files = [Path(s) for s in specs if "=" not in s and (s.endswith((".yaml", ".yml")) or "/" in s)]
    for path in files:
        if not path.is_file():
            raise CurateError(
                f"no config file at {path}; write one (docs/curate.md has an example)"
            )
    return parse_config(merged(specs, command="curate"), files[-1].parent if files else Path("."))


def run_settings_of(config: CurateConfig) -> dict[str, Any]:
    """The settings that define a curate run (see the module docstring), as JSON values."""
    settings = run_settings(config)
    settings.pop("endpoints")
    settings["sources"] = [dict(s) for s in config.sources]
    settings["endpoints"] = {role: run_settings(e) for role, e in sorted(config.endpoints.items())}
    settings["prompts"] = None if config.prompts is None else str(config.prompts)
    return settings
