"""Run codedance as a model inside VLMEvalKit (optional: VLMEvalKit is not a dependency).

Tested against VLMEvalKit commit e8e78f05f3080fe28154f2130321f17951c3be94 (docs/eval.md says how).

How VLMEvalKit calls a model (``vlmeval/inference.py``): for a model whose ``is_api`` is true it
builds each sample's message with the dataset's own ``build_prompt`` (we keep
``use_custom_prompt`` False, so the benchmark's official prompt is what codedance sees), then calls
``model.generate(message=..., dataset=name)`` from ``--api-nproc`` threads at once, checkpointing
each returned string; a string containing ``'Failed to obtain answer via API.'`` is retried on the
next run. An exception escaping ``generate`` aborts the whole run, so failures must be returned.
``message`` is a list of ``{"type": "image" | "text", "value": path-or-text}`` (images are files
VLMEvalKit dumped from the TSV), possibly with ``"role": "system"`` items.

`vlmeval_model_class` therefore subclasses VLMEvalKit's ``vlmeval.api.base.BaseAPI`` (the base of
its API models), whose ``generate`` validates and normalizes the message (plain strings, lists of
paths, ``file://``), moves system items into ``system_prompt``, retries ``retry`` times, and turns
an exception or empty answer into its fail message. Our ``generate_inner`` runs one codedance
think -> execute -> feedback episode (our loop, our sandbox) per sample.

The prediction (what VLMEvalKit scores with its own rules) is, with ``prediction="answer"``
(default), the final answer as codedance's own scorer takes it: the ``<answer>`` content, else the
last ``\\boxed{}``, else the whole last assistant message; ``prediction="text"`` returns the whole
last assistant message. With ``records=True`` each sample's result is VLMEvalKit's structured
record ``{"prediction", "extra_records"}`` (its "agent evaluation" path) and the prediction file
gets an ``extra_records`` column with the turns, tool calls, their statuses and the stop reason;
VLMEvalKit only writes that column when every sample of the dataset is structured (a failed
sample is a plain fail string and turns the whole column off). ``on_trajectory(dataset,
trajectory)`` is called, from VLMEvalKit's worker threads, with every finished trajectory.

Registering: `register` adds the class to ``vlmeval.config.supported_VLM`` under a name (and to
``vlmeval.api`` as ``CodeDance`` for ``run.py --config``); ``python -m
codedance.integrations.vlmeval_adapter --vlmevalkit DIR --model-url URL -- <run.py arguments>``
registers it and runs VLMEvalKit's own ``run.py``. Importing this module never needs VLMEvalKit.

Not handled: video (VLMEvalKit's own check rejects it: ``allowed_types`` is text and image);
image placement inside interleaved messages (all images go to the task in order, texts are
joined with newlines; codedance's prompt places them); per-dataset custom prompts
(``use_custom_prompt`` is False); a dataset's system prompt replaces nothing in codedance's own
system prompt, it is put before the question text; image URLs (VLMEvalKit gives local files).
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from codedance.grading import extract_answer
from codedance.policy.base import Policy, SamplingParams
from codedance.prompts import image_from_bytes
from codedance.rollout import EVAL_MAX_TURNS, EXEC_TIMEOUT_S, EpisodeConfig, run_episode
from codedance.types import Task, Trajectory

FAIL_MSG = "Failed to obtain answer via API."  # VLMEvalKit's marker for a sample to retry


def prediction_of(trajectory: Trajectory, mode: str = "answer") -> str:
    """What VLMEvalKit should score: see the module docstring for ``mode``."""
    last = trajectory.turns[-1].text if trajectory.turns else ""
    if mode == "text":
        return last
    if mode != "answer":
        raise ValueError(f"prediction must be 'answer' or 'text', got {mode!r}")
    extracted = extract_answer(last).text
    if extracted is None:
        extracted = trajectory.answer
    return extracted if extracted is not None and extracted.strip() else last


def trajectory_record(trajectory: Trajectory) -> dict:
    """A small JSON-able summary of a trajectory (VLMEvalKit's ``extra_records``)."""
    calls = trajectory.tool_calls
    return {
        "turns": len(trajectory.turns),
        "tool_calls": len(calls),
        "tool_call_status": [c.status.value for c in calls],
        "stop_reason": trajectory.stop_reason.value,
        "answer": trajectory.answer,
        "last_message": trajectory.turns[-1].text if trajectory.turns else "",
    }


class CodeDanceModel:
    """A VLMEvalKit-style model without VLMEvalKit: ``generate(message, dataset=None) -> str``.

    ``message`` must already be VLMEvalKit's normalized form (a list of type/value dicts, images
    as local paths). Safe to call from several threads at once: nothing per-sample is kept on
    the instance (use ``on_trajectory`` to see trajectories). Exceptions propagate; the
    VLMEvalKit subclass turns them into VLMEvalKit's fail message.
    """

    INTERLEAVE = False
    is_api = True

    def __init__(
        self,
        model_url: str = "",
        model_name: str = "",
        *,
        policy: Policy | None = None,
        config: EpisodeConfig | None = None,
        max_turns: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        exec_timeout_s: float = EXEC_TIMEOUT_S,
        runner_factory=None,
        prediction: str = "answer",
        records: bool = False,
        on_trajectory: Callable[[str | None, Trajectory], None] | None = None,
    ) -> None:
        if prediction not in ("answer", "text"):
            raise ValueError(f"prediction must be 'answer' or 'text', got {prediction!r}")
        config = config or EpisodeConfig(max_turns=EVAL_MAX_TURNS)
        if max_turns is not None:
            config = replace(config, max_turns=max_turns)
        if policy is None:
            from codedance.policy import OpenAIChatPolicy

            sampling = SamplingParams()
            if temperature is not None:
                sampling = replace(sampling, temperature=temperature)
            if max_tokens is not None:
                sampling = replace(sampling, max_tokens=max_tokens)
            policy = OpenAIChatPolicy(model_url, model_name or "?", sampling)
            if not model_name:
                policy.model = policy.list_models()[0]
        self.policy = policy
        self.config = config
        self.exec_timeout_s = exec_timeout_s
        self.runner_factory = runner_factory
        self.prediction = prediction
        self.records = records
        self.on_trajectory = on_trajectory

    def use_custom_prompt(self, dataset: str | None) -> bool:
        return False

    def task_of(self, message: list[dict], dataset: str | None = None, system: str = "") -> Task:
        """The `Task` for one VLMEvalKit message (system texts first, then the other texts)."""
        kinds = {m["type"] for m in message} - {"text", "image"}
        if kinds:
            raise ValueError(f"codedance handles text and image inputs only, got {sorted(kinds)}")
        images = tuple(
            image_from_bytes(Path(m["value"]).read_bytes(), origin=f"input:{k}")
            for k, m in enumerate(x for x in message if x["type"] == "image")
        )
        texts = [m["value"] for m in message if m["type"] == "text" and m.get("role") == "system"]
        texts = ([system.strip()] if system and system.strip() else []) + texts
        texts += [m["value"] for m in message if m["type"] == "text" and m.get("role") != "system"]
        return Task(id=dataset or "vlmeval", question="\n".join(texts), images=images, answer="")

    def run(self, message: list[dict], dataset: str | None = None, system: str = "") -> Trajectory:
        """One episode for one message, in our sandbox (or ``runner_factory(images)``)."""
        task = self.task_of(message, dataset, system)
        model_images = self.config.images_of(task)
        if self.runner_factory is not None:
            runner = self.runner_factory(model_images)
        else:
            from codedance.sandbox import Sandbox

            runner = Sandbox(images=model_images, timeout_s=self.exec_timeout_s)
        try:
            trajectory = run_episode(self.policy, task, runner, self.config)
        finally:
            runner.close()
        if self.on_trajectory is not None:
            self.on_trajectory(dataset, trajectory)
        return trajectory

    def generate(self, message: list[dict], dataset: str | None = None) -> str:
        return prediction_of(self.run(message, dataset), self.prediction)


@functools.cache
def vlmeval_model_class() -> type:
    """`CodeDanceModel` as a subclass of VLMEvalKit's ``BaseAPI`` (one class per process)."""
    try:
        from vlmeval.api.base import BaseAPI
    except ImportError as exc:
        raise ImportError(
            "VLMEvalKit is not installed: see docs/eval.md, section VLMEvalKit "
            "(optional for codedance)"
        ) from exc

    class CodeDance(CodeDanceModel, BaseAPI):  # type: ignore[misc, valid-type]
        """codedance in VLMEvalKit. ``retry`` (default 1: an episode is not rerun), ``verbose``,
        ``system_prompt`` and ``fail_msg`` are BaseAPI's; the rest are `CodeDanceModel`'s."""

        allowed_types = ("text", "image")
        INTERLEAVE = False
        is_api = True

        def __init__(
            self,
            model_url: str = "",
            model_name: str = "",
            *,
            retry: int = 1,
            wait: int = 1,
            verbose: bool = False,
            system_prompt: str | None = None,
            fail_msg: str = FAIL_MSG,
            **kwargs,
        ) -> None:
            BaseAPI.__init__(
                self,
                retry=retry,
                wait=wait,
                system_prompt=system_prompt,
                verbose=verbose,
                fail_msg=fail_msg,
            )
            CodeDanceModel.__init__(self, model_url, model_name, **kwargs)

        def generate(self, message, **kwargs):  # BaseAPI's, not CodeDanceModel's
            return BaseAPI.generate(self, message, **kwargs)

        def generate_inner(self, inputs, **kwargs):
            """BaseAPI's contract: (0, answer, log) on success, (-1, fail message, log) else."""
            try:
                trajectory = self.run(inputs, kwargs.get("dataset"), self.system_prompt or "")
            except Exception as exc:  # noqa: BLE001 - an escaped exception aborts VLMEvalKit's whole run
                return -1, f"{self.fail_msg} {type(exc).__name__}: {exc}", repr(exc)
            answer = prediction_of(trajectory, self.prediction)
            log = trajectory_record(trajectory) if self.records else trajectory.stop_reason.value
            return 0, answer, log

    return CodeDance


def register(name: str = "codedance", **kwargs) -> partial:
    """Make ``--model NAME`` work in VLMEvalKit's ``run.py`` in this process.

    ``kwargs`` go to the class (``model_url``, ``model_name``, ``max_turns``, ``records``, ...);
    ``retry`` and ``verbose`` are always present so ``run.py --retry/--verbose`` override them.
    Also sets ``vlmeval.api.CodeDance`` so a ``run.py --config`` file can name the class
    ``"CodeDance"``.
    """
    cls = vlmeval_model_class()
    import vlmeval.api
    from vlmeval.config import supported_VLM

    kwargs.setdefault("retry", 1)
    kwargs.setdefault("verbose", False)
    entry = partial(cls, **kwargs)
    supported_VLM[name] = entry
    vlmeval.api.CodeDance = cls
    return entry


def main(argv: list[str] | None = None) -> None:
    """``python -m codedance.integrations.vlmeval_adapter [options] -- <run.py arguments>``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, rest = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(
        prog="python -m codedance.integrations.vlmeval_adapter",
        description="Register codedance in VLMEvalKit and run its run.py.",
    )
    parser.add_argument(
        "--vlmevalkit", required=True, type=Path, help="VLMEvalKit checkout (holds run.py)"
    )
    parser.add_argument(
        "--model-url", required=True, help="OpenAI-compatible server, e.g. http://localhost:8000/v1"
    )
    parser.add_argument(
        "--model-name", default="", help="served model name (default: the server's first)"
    )
    parser.add_argument("--name", default="codedance", help="the name to give run.py --model")
    parser.add_argument("--max-turns", type=int, default=EVAL_MAX_TURNS)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--exec-timeout", type=float, default=EXEC_TIMEOUT_S)
    parser.add_argument("--prediction", choices=("answer", "text"), default="answer")
    parser.add_argument(
        "--records", action="store_true", help="write an extra_records column (turns, calls)"
    )
    args = parser.parse_args(ours)
    run_py = args.vlmevalkit / "run.py"
    if not run_py.is_file():
        parser.error(f"{run_py} does not exist")
    register(
        args.name,
        model_url=args.model_url,
        model_name=args.model_name,
        max_turns=args.max_turns,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        exec_timeout_s=args.exec_timeout,
        prediction=args.prediction,
        records=args.records,
    )
    sys.argv = [str(run_py), *rest]
    runpy.run_path(str(run_py), run_name="__main__")


if __name__ == "__main__":
    main()
