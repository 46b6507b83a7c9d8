"""The curate run's settings, read from one YAML file (`load_config`).

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
    atomic: {max_turns: 6, min_box_side: 8, max_box_area: 0.9, max_boxes: 3}
    verify: {judge: true, cross_check: false, exec_timeout_s: 15}
    inspect: {image: true, question: true}
    prompts: my_prompts/             # optional folder overriding any template by file name
    sandboxes: 4                     # sandboxes running at once

Endpoint keys: ``url``, ``model``, ``api_key`` (default ``EMPTY``), ``max_in_flight`` (16),
``max_tokens`` (1024), ``temperature`` (0.0, the filter stage uses ``filter.temperature``),
``timeout_s`` (120), ``max_retries`` (3), ``backoff_s`` (0.5), ``breaker_failures`` (5
consecutive failed requests open the circuit breaker), ``vllm_extras`` (true: send vLLM's extra
request fields; false for servers that reject unknown fields). Unknown keys are refused, so a typo
fails loudly. Sources are read by `codedance.curate.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

STAGES = ("inspect", "filter", "atomic", "verify")
DEFAULT_STAGES = ("filter", "atomic", "verify")
ROLES = ("weak", "strong", "judge")


class CurateError(ValueError):
    """A bad configuration or an unusable input; the message says what to change."""


@dataclass(frozen=True)
class EndpointConfig:
    url: str
    model: str
    api_key: str = "EMPTY"
    max_in_flight: int = 16
    max_tokens: int = 1024
    temperature: float = 0.0
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 0.5
    breaker_failures: int = 5
    vllm_extras: bool = True


@dataclass(frozen=True)
class FilterConfig:
    """``easy_threshold``: weak solve rate at or above it is easy; ``medium_threshold``: strong
    solve rate at or above it is medium (below: hard); ``easy_keep``: share of easy items kept as
    direct-answer examples (chosen by item key, so reruns keep the same ones); ``judge``: which
    answers the rules reject go to the judge endpoint (``never``, ``undecided``: text and math
    answer kinds, ``fallback``: every kind; `codedance.curate.filtering`)."""

    k: int = 4
    temperature: float = 1.0
    easy_threshold: float = 0.75
    medium_threshold: float = 0.5
    easy_keep: float = 0.25
    judge: str = "undecided"


@dataclass(frozen=True)
class AtomicConfig:
    """Box rules: a side under ``min_box_side`` pixels is degenerate; a box covering more than
    ``max_box_area`` of the image is "nearly the whole image"; at most ``max_boxes`` boxes are
    used by a hard trajectory (medium uses the first plausible one)."""

    max_turns: int = 6
    min_box_side: int = 8
    max_box_area: float = 0.9
    max_boxes: int = 3


@dataclass(frozen=True)
class VerifyConfig:
    """``judge``: grade answers the rules reject with the judge; ``cross_check``: ask the judge
    (which must then be a VLM) whether the reasoning agrees with the images."""

    judge: bool = True
    cross_check: bool = False
    exec_timeout_s: float = 15.0


@dataclass(frozen=True)
class InspectConfig:
    image: bool = True
    question: bool = True


@dataclass(frozen=True)
class CurateConfig:
    out: Path
    endpoints: dict[str, EndpointConfig]
    sources: tuple[dict[str, Any], ...]
    stages: tuple[str, ...] = DEFAULT_STAGES
    filter: FilterConfig = FilterConfig()
    atomic: AtomicConfig = AtomicConfig()
    verify: VerifyConfig = VerifyConfig()
    inspect: InspectConfig = InspectConfig()
    prompts: Path | None = None
    sandboxes: int = 4
    base: Path = field(default=Path("."))  # the YAML's folder: relative paths are resolved from it


def _build(cls: type, raw: object, where: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise CurateError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CurateError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**raw)
    except TypeError as exc:
        raise CurateError(f"{where}: {exc}") from None


def _check_ranges(config: CurateConfig) -> None:
    f = config.filter
    if f.k < 1:
        raise CurateError(f"filter.k must be at least 1, got {f.k}")
    for name in ("easy_threshold", "medium_threshold", "easy_keep"):
        if not 0.0 <= getattr(f, name) <= 1.0:
            raise CurateError(f"filter.{name} must be within [0, 1], got {getattr(f, name)}")
    if f.judge not in ("never", "undecided", "fallback"):
        raise CurateError(f"filter.judge must be never, undecided or fallback, got {f.judge!r}")
    if not 0.0 < config.atomic.max_box_area <= 1.0:
        raise CurateError(f"atomic.max_box_area must be within (0, 1], got {config.atomic.max_box_area}")
    for role, e in config.endpoints.items():
        if e.max_in_flight < 1 or e.breaker_failures < 1:
            raise CurateError(f"endpoints.{role}: max_in_flight and breaker_failures must be at least 1")


def parse_config(raw: object, base: Path = Path(".")) -> CurateConfig:
    """The `CurateConfig` of a decoded YAML mapping; relative paths resolve against `base`."""
    if not isinstance(raw, dict):
        raise CurateError("the curate config must be a YAML mapping (see docs/curate.md)")
    top = {"out", "stages", "endpoints", "sources", "filter", "atomic", "verify", "inspect", "prompts", "sandboxes"}
    unknown = sorted(set(raw) - top)
    if unknown:
        raise CurateError(f"unknown top-level key(s) {', '.join(unknown)}; known: {', '.join(sorted(top))}")
    for key in ("out", "endpoints", "sources"):
        if key not in raw:
            raise CurateError(f"the config needs '{key}' (see docs/curate.md for an example)")
    stages = tuple(raw.get("stages") or DEFAULT_STAGES)
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise CurateError(f"unknown stage(s) {', '.join(map(str, bad))}; choose from {', '.join(STAGES)}")
    stages = tuple(s for s in STAGES if s in stages)
    endpoints_raw = raw["endpoints"] or {}
    needed = {"filter": ("weak", "strong"), "atomic": ("strong",), "inspect": ("strong",)}
    roles = {r for s in stages for r in needed.get(s, ())}
    verify = _build(VerifyConfig, raw.get("verify"), "verify")
    if "verify" in stages and (verify.judge or verify.cross_check):
        roles.add("judge")
    filter_ = _build(FilterConfig, raw.get("filter"), "filter")
    if "filter" in stages and filter_.judge != "never":
        roles.add("judge")
    missing = sorted(r for r in roles if r not in endpoints_raw)
    if missing:
        raise CurateError(f"endpoints: the stages {', '.join(stages)} need {', '.join(missing)} "
                          f"(each as {{url: ..., model: ...}})")
    extra = sorted(set(endpoints_raw) - set(ROLES))
    if extra:
        raise CurateError(f"endpoints: unknown role(s) {', '.join(extra)}; roles are {', '.join(ROLES)}")
    endpoints = {r: _build(EndpointConfig, endpoints_raw[r], f"endpoints.{r}") for r in ROLES if r in endpoints_raw}
    sources = raw["sources"]
    if not isinstance(sources, list) or not sources or not all(isinstance(s, dict) for s in sources):
        raise CurateError("sources must be a non-empty list of mappings, each with a 'kind'")
    prompts = raw.get("prompts")
    config = CurateConfig(
        out=base / str(raw["out"]), endpoints=endpoints, sources=tuple(sources), stages=stages,
        filter=filter_,
        atomic=_build(AtomicConfig, raw.get("atomic"), "atomic"), verify=verify,
        inspect=_build(InspectConfig, raw.get("inspect"), "inspect"),
        prompts=None if prompts is None else base / str(prompts), sandboxes=int(raw.get("sandboxes", 4)), base=base)
    _check_ranges(config)
    return config


def load_config(path: str | Path) -> CurateConfig:
    """Read and check the YAML at `path` (`CurateError` with a one-line reason when it is bad)."""
    p = Path(path)
    if not p.is_file():
        raise CurateError(f"no config file at {p}; write one (docs/curate.md has an example)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CurateError(f"{p} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_config(raw, p.parent)
