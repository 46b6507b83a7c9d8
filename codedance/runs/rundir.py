"""One run directory: the settings that define a run, claimed once, and its results as they come.

Layout (every "many episodes into a folder" command: demo, synth, eval, train's teacher stage):
- ``run.json``: ``{"kind": ..., "settings": {...}, ...}``: what kind of run and the settings that
  define it (`run_settings` of the command's config: every field but those tagged
  ``metadata={"resume": False}``, such as the output folder or the concurrency). Commands may
  keep a few more top-level fields (eval: the benchmarks run so far).
- ``trajectories.jsonl`` + ``images/``: each finished episode under its key (`episode_key`,
  ``task_id#k``), appended as it ends (`codedance.records`).
- ``failures.jsonl``: episodes that raised; a rerun tries them again (`open_failures` leaves out
  the ones that finished since).

`RunDir.claim` refuses a folder that holds another kind of run, a run with other settings (naming
them) or anything else, and a path that is a file. A claim whose folder holds no results yet (an
earlier attempt stopped before its first episode) is replaced, so a corrected command is never
blocked by a folder it left. Validate the settings before claiming: a refused setting writes
nothing.

Not handled: several processes writing one run directory at once.
"""

from __future__ import annotations

import dataclasses
import json
import time
from enum import Enum
from pathlib import Path
from typing import Any

from codedance.errors import SettingsError
from codedance.records import (
    ImageStore,
    append_jsonl,
    load_trajectories,
    read_jsonl,
    trajectory_json,
)
from codedance.types import Trajectory

RUN_FILE = "run.json"
TRAJECTORIES = "trajectories.jsonl"
FAILURES = "failures.jsonl"


def episode_key(task_id: str, k: int) -> str:
    """The key of rollout ``k`` of a task (``task_id#k``), in every run directory.

    >>> episode_key("counting-easy-3", 0)
    'counting-easy-3#0'
    """
    return f"{task_id}#{k}"


def split_episode_key(key: str) -> tuple[str, int]:
    """The task id and rollout index of an `episode_key` (a task id may itself hold ``#``).

    >>> split_episode_key("vstar/12#3"), split_episode_key("a#b#0")
    (('vstar/12', 3), ('a#b', 0))
    """
    task_id, _, k = key.rpartition("#")
    return task_id, int(k)


def run_settings(config: Any) -> dict[str, Any]:
    """The settings of a dataclass config that define a run: every field, recursively, except
    those tagged ``metadata={"resume": False}``; tuples become lists (as JSON reads them back)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: plain(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.metadata.get("resume", True)
            }
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value.value if isinstance(value, Enum) else value

    return plain(config)


def _differences(have: Any, want: Any, prefix: str = "") -> list[str]:
    if isinstance(have, dict) and isinstance(want, dict):
        out = []
        for key in sorted(set(have) | set(want)):
            out += _differences(have.get(key), want.get(key), f"{prefix}{key}.")
        return out
    return [] if have == want else [prefix.rstrip(".")]


class RunDir:
    """The folder ``path`` of a run of ``kind`` defined by ``settings`` (module docstring)."""

    def __init__(
        self, path: str | Path, kind: str = "", settings: dict[str, Any] | None = None
    ) -> None:
        self.path = Path(path)
        self.kind = kind
        self.settings = settings or {}
        self._store: ImageStore | None = None

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    def info(self) -> dict[str, Any]:
        """The content of ``run.json`` ({} when there is none)."""
        return (
            json.loads(self.run_file.read_text(encoding="utf-8")) if self.run_file.exists() else {}
        )

    def has_results(self) -> bool:
        """Whether anything but ``run.json`` (and an empty image store) is in the folder."""
        if not self.path.is_dir():
            return False
        return any(
            p.name != RUN_FILE and not (p.is_dir() and not any(p.iterdir()))
            for p in self.path.iterdir()
        )

    def claim(self, **extra: Any) -> None:
        """Take the folder for this run, or check that it holds this very run; ``extra`` fields
        are written to ``run.json`` beside ``kind`` and ``settings``. Raises `SettingsError`."""
        have = self.check()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SettingsError(
                f"{self.path}: cannot create the folder ({exc.strerror or exc}); "
                "choose another output folder"
            ) from None
        kept = (
            {k: v for k, v in have.items() if k not in ("kind", "settings")}
            if have.get("kind") == self.kind
            else {}
        )
        body = {**kept, "kind": self.kind, "settings": self.settings, **extra}
        try:
            self.run_file.write_text(
                json.dumps(body, indent=1, ensure_ascii=False), encoding="utf-8"
            )
        except OSError as exc:
            raise SettingsError(
                f"{self.path}: cannot write the run there ({exc.strerror or exc}); "
                "choose another output folder"
            ) from None

    def check(self) -> dict[str, Any]:
        """`claim`'s refusals without writing (a dry run); returns ``run.json``'s content."""
        if self.path.exists() and not self.path.is_dir():
            raise SettingsError(
                f"{self.path} is a file; the output must be a folder (choose another)"
            )
        have = self.info()
        if have and self.has_results():
            if have.get("kind") != self.kind:
                raise SettingsError(
                    f"{self.path} holds another kind of run ({have.get('kind') or 'unknown'}); "
                    "choose another output folder"
                )
            diff = _differences(have.get("settings"), self.settings)
            if diff:
                raise SettingsError(
                    f"{self.path} holds a {self.kind} run with other settings "
                    f"({', '.join(diff)} differ); choose another output folder, delete it, "
                    "or repeat the first run's settings to resume it"
                )
        elif not have and self.has_results():
            raise SettingsError(
                f"{self.path} is not empty and holds no {self.kind} run; "
                "choose another output folder"
            )
        return have

    @property
    def store(self) -> ImageStore:
        if self._store is None:
            self._store = ImageStore(self.path / "images")
        return self._store

    def keys(self) -> set[str]:
        """Keys of the finished episodes."""
        return {str(r.get("key")) for r in read_jsonl(self.path / TRAJECTORIES)}

    def append(self, key: str, trajectory: Trajectory) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path / TRAJECTORIES, trajectory_json(trajectory, self.store, key))

    def fail(self, key: str, error: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path / FAILURES, {"key": key, "error": error, "time": time.time()})

    def trajectories(self) -> list[tuple[str, Trajectory]]:
        """(key, trajectory) of every finished episode, in the order they finished."""
        return load_trajectories(self.path)

    def open_failures(self) -> dict[str, str]:
        """key -> last error of every failed episode that has not finished since."""
        done = self.keys()
        last = {
            str(r.get("key")): str(r.get("error", "")) for r in read_jsonl(self.path / FAILURES)
        }
        return {k: e for k, e in last.items() if k not in done}
