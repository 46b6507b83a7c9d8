"""Tasks into verl's RL parquet, images included: `task_row`, `write_parquet`, `prepare_world`
(its command's settings: `PrepareDataConfig`).

One row per task, in the columns verl 0.9.1's ``RLHFDataset`` reads:

- ``prompt``: one user message ``"<image>…<image>{question}"`` (verl turns each ``<image>`` into
  an image block for the agent loop; the loop itself builds the profile's prompt from the task);
- ``images``: ``[{"bytes": png}, ...]`` (verl's image column);
- ``data_source``, ``ability``, ``agent_name`` (``codedance``), ``reward_model``
  (``{"style": "rule", "ground_truth": answer}``);
- ``extra_info``: ``{"index": i, "codedance_task": task_fields(task, domain)}``.

Sources: our synthetic world (`prepare_world`, skills × difficulties, deterministic by seed) or
any iterable of `Task` (e.g. tasks loaded from benchmark records). Not handled: SFT-style
canonical records with assistant turns (RL needs only the question, images and gold answer; use
their task fields), videos. Needs pandas and pyarrow (the ``train`` extra); no verl import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from codedance.config import bounded
from codedance.errors import SettingsError
from codedance.integrations.verl.tasks import TASK_KEY, task_fields
from codedance.types import Task

AGENT_NAME = "codedance"


def task_row(
    task: Task, index: int, *, domain: str = "general", data_source: str | None = None
) -> dict:
    """One parquet row for `task` (see the module docstring)."""
    placeholders = "<image>" * len(task.images)
    return {
        "data_source": data_source or task.source or "codedance",
        "prompt": [
            {"role": "user", "content": f"{placeholders}{task.question.replace('<image>', '')}"}
        ],
        "images": [{"bytes": image.png} for image in task.images],
        "ability": domain,
        "agent_name": AGENT_NAME,
        "reward_model": {"style": "rule", "ground_truth": task.answer},
        "extra_info": {"index": index, TASK_KEY: task_fields(task, domain)},
    }


def write_parquet(
    tasks: Iterable[Task],
    path: str | Path,
    *,
    domain: str = "general",
    data_source: str | None = None,
) -> int:
    """Write `tasks` as one verl parquet file; returns the number of rows."""
    import pandas as pd

    rows = [task_row(t, i, domain=domain, data_source=data_source) for i, t in enumerate(tasks)]
    if not rows:
        raise ValueError("no tasks to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return len(rows)


@dataclass(frozen=True)
class PrepareDataConfig:
    """``codedance verl prepare-data`` for the one loader (`codedance.config`)."""

    out: str = ""  # the folder of train.parquet and val.parquet
    n_train: int = bounded(2048, at_least=1)  # training tasks from the synthetic world
    n_val: int = bounded(128, at_least=1)  # validation tasks (seeds after the training ones)
    seed: int = 0  # the first seed
    skills: str = ""  # comma-separated skills ('' = all)

    def check(self) -> None:
        if not self.out:
            raise SettingsError("give the output folder: --out DIR (or out=DIR)")

    def skill_names(self) -> list[str] | None:
        return [s.strip() for s in self.skills.split(",") if s.strip()] or None


def prepare_world(
    out_dir: str | Path,
    *,
    n_train: int,
    n_val: int,
    seed: int = 0,
    skills: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """``train.parquet`` and ``val.parquet`` from the synthetic world; the validation seeds
    start after the training ones, so the two sets never share a task."""
    from codedance.world.base import task_set

    out = Path(out_dir)
    train, val = out / "train.parquet", out / "val.parquet"
    write_parquet(
        task_set(n_train, seed=seed, skill_names=skills), train, data_source="codedance-world"
    )
    write_parquet(
        task_set(n_val, seed=seed + n_train, skill_names=skills), val, data_source="codedance-world"
    )
    return train, val
