"""One config loader for every run command: presets, YAML files and ``key=value`` overrides.

    config = load(DemoConfig, ["quick", "my.yaml", "episode.max_turns=8"], command="demo")

Each spec, in order, is merged into one nested mapping: a preset name (a file in
``codedance/presets/<command>/``), a YAML file path, or a dotted ``key=value`` override (the value
read as YAML: ``grpo.steps=4``, ``skills=[counting, search]``). The mapping then fills the
dataclass tree, starting from its defaults. Every problem is a `SettingsError` naming the file,
the line or the key: an unknown key lists the known ones, a renamed key (a dataclass's ``RENAMED``
mapping) names its new name, a value of the wrong type names the key and the type expected, a
number out of its field's range (`bounded`) names the key and the range. `presets` and
`preset_path` list and find the presets (``codedance presets ls``/``cp``). Only the standard
library, PyYAML and `codedance.errors` are imported here.

Not handled: merging lists (a later spec replaces a list); environment variables.
"""

from __future__ import annotations

from dataclasses import field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from codedance.errors import SettingsError

PRESETS = Path(__file__).resolve().parent / "presets"
T = TypeVar("T")


def not_resumed(default: Any, **bounds: float) -> Any:
    """A dataclass field that does not define a run (output folder, concurrency, ...), with
    `bounded`'s range when given."""
    return field(default=default, metadata={"resume": False, "bounds": bounds})


def bounded(
    default: Any,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
) -> Any:
    """A numeric dataclass field whose value the loader range-checks (``sft.epochs: must be above
    0, got -1``) before anything runs: a value no run can use is refused at load, not after
    minutes of setup."""
    bounds = {
        k: v
        for k, v in (("at_least", at_least), ("above", above), ("at_most", at_most))
        if v is not None
    }
    return field(default=default, metadata={"bounds": bounds})


def _check_bounds(key: str, value: Any, bounds: dict[str, float]) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, over, high = bounds.get("at_least"), bounds.get("above"), bounds.get("at_most")
    if (
        (low is not None and value < low)
        or (over is not None and value <= over)
        or (high is not None and value > high)
    ):
        parts = [
            f"at least {low:g}" if low is not None else "",
            f"above {over:g}" if over is not None else "",
            f"at most {high:g}" if high is not None else "",
        ]
        raise SettingsError(f"{key}: must be {' and '.join(p for p in parts if p)}, got {value!r}")


def check_bounds(instance: Any) -> None:
    """Refuse a dataclass built in code (not through `load`) whose `bounded` or `not_resumed`
    field is out of its declared range, with the loader's message: the declaration is the one
    place that says what a number may be, whichever way the settings were made."""
    for f in fields(instance):
        _check_bounds(f.name, getattr(instance, f.name), f.metadata.get("bounds", {}))


def secret(default: Any) -> Any:
    """A `not_resumed` field that `dump` never shows (an API key)."""
    return field(default=default, metadata={"resume": False, "secret": True})


def presets(command: str | None = None) -> dict[str, list[str]]:
    """command -> names of its presets (one command, or all)."""
    dirs = [PRESETS / command] if command else sorted(p for p in PRESETS.iterdir() if p.is_dir())
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in dirs if d.is_dir()}


def preset_path(command: str, name: str) -> Path:
    path = PRESETS / command / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(presets(command).get(command, [])) or "none"
        raise SettingsError(
            f"unknown {command} preset {name!r}; known: {known} (codedance presets ls)"
        )
    return path


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`; errors name the file and line."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(
            f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _merge(into: dict[str, Any], data: dict[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _override(item: str) -> dict[str, Any]:
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise SettingsError(f"override {item!r}: the value is not valid YAML (quote it)") from None
    return _nest(key.strip().replace(".", "__"), value)


def merged(specs: list[str] | tuple[str, ...], command: str | None = None) -> dict[str, Any]:
    """The mapping of ``specs`` (see the module docstring)."""
    data: dict[str, Any] = {}
    for spec in specs:
        if "=" in spec:
            _merge(data, _override(spec))
        elif spec.endswith((".yaml", ".yml")) or "/" in spec or Path(spec).is_file():
            path = Path(spec)
            if not path.is_file():
                raise SettingsError(f"{spec}: no such file")
            _merge(data, read_yaml(path))
        elif command is not None:
            _merge(data, read_yaml(preset_path(command, spec)))
        else:
            raise SettingsError(f"{spec!r} is neither a YAML file nor key=value")
    return data


def _leaf(key: str, current: Any, value: Any) -> Any:
    if isinstance(current, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise SettingsError(f"{key}: expected a list, got {value!r}")
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        raise SettingsError(f"{key}: expected true or false, got {value!r}")
    try:
        if (
            isinstance(current, float)
            and isinstance(value, (int, float, str))
            and not isinstance(value, bool)
        ):
            return float(value)
        if (
            isinstance(current, int)
            and isinstance(value, (int, str))
            and not isinstance(value, bool)
        ):
            return int(value)
    except ValueError:
        raise SettingsError(
            f"{key}: expected a {'number' if isinstance(current, float) else 'whole number'}, "
            f"got {value!r}"
        ) from None
    if isinstance(current, (int, float)) and not isinstance(value, (int, float)):
        raise SettingsError(f"{key}: expected a number, got {value!r}")
    if isinstance(current, str) and not isinstance(value, str):
        return str(value)
    return value


def build(base: T, data: Any, prefix: str = "") -> T:
    """`base` (a dataclass instance) with the values of the mapping `data`, recursively."""
    name = type(base).__name__
    if not isinstance(data, dict):
        raise SettingsError(
            f"{prefix.rstrip('.') or name}: expected a mapping of settings, got {data!r}"
        )
    declared = {f.name: f for f in fields(base)}  # type: ignore[arg-type]
    known = set(declared)
    renamed = getattr(type(base), "RENAMED", {})  # old key -> its new name, refused with that name
    old = sorted(set(data) & set(renamed))
    if old:
        raise SettingsError(f"{prefix}{old[0]} is now {prefix}{renamed[old[0]]}")
    unknown = set(data) - known
    if unknown:
        keys = ", ".join(prefix + k for k in sorted(unknown))
        raise SettingsError(
            f"unknown setting(s) {keys}; known: {', '.join(prefix + k for k in sorted(known))}"
        )
    values = {}
    for key, value in data.items():
        current = getattr(base, key)
        values[key] = (
            build(current, value, f"{prefix}{key}.")
            if is_dataclass(current)
            else _leaf(prefix + key, current, value)
        )
        _check_bounds(prefix + key, values[key], declared[key].metadata.get("bounds", {}))
    try:
        return replace(base, **values)  # type: ignore[type-var]
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SettingsError):
            raise
        raise SettingsError(f"{prefix.rstrip('.') or name}: {exc}") from None


def load(
    cls: type[T] | T,
    specs: list[str] | tuple[str, ...] = (),
    command: str | None = None,
    **given: Any,
) -> T:
    """A ``cls`` from its defaults, then ``specs`` in order, then ``given`` (explicit options,
    ``None`` values skipped; dotted keys may be written with ``__``)."""
    data = merged(list(specs), command)
    for key, value in given.items():
        if value is not None:
            _merge(data, _nest(key, value))
    base = cls() if isinstance(cls, type) else cls
    return build(base, data)


def refuse_moved(data: dict[str, Any], moved: dict[str, str], note: str = "") -> None:
    """A `SettingsError` "OLD is now NEW" for the first dotted key of `moved` that the mapping
    `data` sets (a key that moved to another section; one renamed in place is a ``RENAMED``)."""
    for old, new in moved.items():
        *sections, key = old.split(".")
        node: Any = data
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node:
            raise SettingsError(f"{old} is now {new}{note}")


def _nest(key: str, value: Any) -> dict[str, Any]:
    parts = key.split("__")
    tree: dict[str, Any] = {}
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return tree


def dump(config: Any) -> str:
    """The YAML of a dataclass config (what ``--print-config`` shows and train saves), without its
    `secret` fields."""

    def plain(v: Any) -> Any:
        if is_dataclass(v) and not isinstance(v, type):
            return {
                f.name: plain(getattr(v, f.name)) for f in fields(v) if not f.metadata.get("secret")
            }
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v

    return yaml.safe_dump(plain(config), sort_keys=False, allow_unicode=True)
