"""Three choices of the policy measured exactly, without sampling, by teacher forcing: on each
task's first prompt, whether to answer directly and whether to write the teacher's bug; after
the teacher's program and its output, whether the answer copies the printed value.

`direct_probability(model, processor, tasks)` returns ``p_direct`` (mean over tasks) and
``p_direct/<difficulty>``: the probability that the first turn opens the way the teacher's
direct answers do (``<think>`` + `DIRECT_THINK` + ``</think>``). For a policy trained on the teacher's two openings, 1 − p_direct is
its probability of taking the tool branch on the first turn: a held-out call rate with no
sampling noise (the sampled ``calls`` of `metrics.rollout_metrics` carry ±0.09 at 30 tasks),
which is what makes a threshold on it stable enough for CI (`tests/train/test_testbed.py`).
`bug_probability(model, processor, tasks, code_style)` returns ``p_bug`` and ``p_bug/<difficulty>``:
given the teacher's first program for the task up to its image-loading line (the think line, the
fence, the imports, ``img = ...``), the probability that the next line is the teacher's bug
(`BUG`, a failing call that R_turn penalizes).
`copy_probability(model, processor, tasks)` returns ``p_copy`` and ``p_copy/<difficulty>``: after
the teacher's program and its output (``RESULT: <the task's answer>``, what the program prints:
the teacher's solvers are exact), the probability of the teacher's whole answer turn, which
quotes the printed value in its think and in its answer: whether the policy can read its tool's
output (a policy that copies has p_copy near 1; one that guesses a count of 2–9, about 1/64).
Not handled: policies whose direct answers or programs open otherwise (their probabilities are
near 0 and say nothing); p_copy's program output is written, not run (the sandbox prints the
same: `tests/teacher/test_teacher_fixed_rate.py` checks the conversation against a real episode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from codedance.policy.base import Completion
from codedance.rollout import Episode, EpisodeConfig
from codedance.teacher.policy import BUG, DIRECT_THINK, SOLVERS, quoting_answer, turn
from codedance.teacher.program import LOAD
from codedance.teacher.view import TaskView
from codedance.train.device import to_model
from codedance.train.sampler import BatchedSampler
from codedance.types import ExecResult, ExecStatus, Task


def _continuation_probability(
    model: Any,
    processor: Any,
    task: Task,
    config: EpisodeConfig,
    prefix: str,
    target: str,
    episode: Episode | None = None,
) -> float:
    """p(`target` | the task's first prompt (or `episode`'s conversation so far), then `prefix`
    in the assistant turn)."""
    import torch

    tok = processor.tokenizer
    messages = (episode or Episode(task, config)).messages
    ids, images = BatchedSampler(model, processor).encode_prompt(messages)
    before = tok(prefix, add_special_tokens=False)["input_ids"] if prefix else []
    want = tok(prefix + target, add_special_tokens=False)["input_ids"][len(before) :]
    inputs: dict[str, Any] = {"input_ids": torch.tensor([ids + before + want])}
    if images:
        inputs.update(processor.pixel_inputs(images))
    with torch.no_grad():
        logits = model(**to_model(inputs, model)).logits[0, len(ids) + len(before) - 1 : -1]
    logits = logits.float().cpu()
    logp = torch.log_softmax(logits, dim=-1)[torch.arange(len(want)), torch.tensor(want)].sum()
    return math.exp(float(logp))


def _means(name: str, tasks: Sequence[Task], values: Sequence[float]) -> dict[str, float]:
    groups: dict[str, list[float]] = {name: list(values)}
    for task, value in zip(tasks, values, strict=True):
        level = dict(task.metadata).get("difficulty", "")
        if level:
            groups.setdefault(f"{name}/{level}", []).append(value)
    return {k: sum(v) / len(v) for k, v in groups.items()}


def direct_probability(
    model: Any, processor: Any, tasks: Sequence[Task], config: EpisodeConfig = EpisodeConfig()
) -> dict[str, float]:
    """See the module docstring."""
    model.eval()
    target = f"<think>{DIRECT_THINK}</think>"
    return _means(
        "p_direct",
        tasks,
        [_continuation_probability(model, processor, t, config, "", target) for t in tasks],
    )


def bug_probability(
    model: Any,
    processor: Any,
    tasks: Sequence[Task],
    config: EpisodeConfig = EpisodeConfig(),
    code_style: str = "compact",
) -> dict[str, float]:
    """See the module docstring."""
    model.eval()
    values = []
    for task in tasks:
        view = TaskView.from_task(task)
        step = SOLVERS[view.skill].steps(view, False, None, compact_code=code_style == "compact")[0]
        text = turn(step.think, code=step.code)
        prefix = text[: text.index(LOAD) + len(LOAD)]
        values.append(_continuation_probability(model, processor, task, config, prefix, BUG))
    return _means("p_bug", tasks, values)


def after_program(
    task: Task, config: EpisodeConfig = EpisodeConfig(), code_style: str = "compact"
) -> Episode:
    """`task`'s episode after the teacher's first program and its output, ``RESULT: <answer>``."""
    view = TaskView.from_task(task)
    step = SOLVERS[view.skill].steps(view, False, None, compact_code=code_style == "compact")[0]
    episode = Episode(task, config)
    if episode.on_completion(Completion(turn(step.think, code=step.code))) is None:
        raise ValueError(f"the teacher's program for {task.id} did not parse as a call")
    episode.on_result(ExecResult(ExecStatus.OK, stdout=f"RESULT: {task.answer}\nDONE\n"))
    return episode


def copy_probability(
    model: Any,
    processor: Any,
    tasks: Sequence[Task],
    config: EpisodeConfig = EpisodeConfig(),
    code_style: str = "compact",
) -> dict[str, float]:
    """See the module docstring."""
    model.eval()
    return _means(
        "p_copy",
        tasks,
        [
            _continuation_probability(
                model,
                processor,
                t,
                config,
                "",
                quoting_answer(t.answer, t.answer),
                after_program(t, config, code_style),
            )
            for t in tasks
        ],
    )
