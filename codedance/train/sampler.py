"""Batched local sampling and lock-step episodes: many rollouts per ``generate`` call on CPU.

`BatchedSampler.complete_many` continues N conversations in one left-padded ``model.generate``
call and returns one `Completion` each with the sampled ``token_ids`` (cut after the first
end-of-turn token) and their log-probabilities, like `TransformersPolicy` does for one.
`run_lockstep` drives N `codedance.rollout.Episode`s (the loop's own per-turn decisions:
parsing, feedback, stop reasons) in rounds: every still-running episode gets its next reply
from one batched call, then the code of every episode that wrote some runs in its own sandbox
(a few in parallel threads). The trajectories are exactly those `run_episode` would give for
the same replies.

``suppress`` token ids (the vision placeholders) are never sampled: a sampled
``<|image_pad|>`` would break the model's image-token count on the training forward pass.
A conversation whose prompt exceeds ``max_prompt_tokens`` ends with ``max_tokens`` (as a
server's context overflow does). ``on_reply(n)`` hears of replies as they end (a row's
end-of-turn token, looked for at every generated token; the rest when its ``generate`` call
returns), and `run_lockstep`'s ``on_turns`` counts turns from it, so a progress bar moves
within a long first turn. Not handled: several processes sharing one model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codedance.policy.base import Completion, SamplingParams
from codedance.policy.transformers_qwen import chat_template_messages
from codedance.rollout import CodeRunner, Episode, EpisodeConfig
from codedance.train.device import to_model
from codedance.types import Image, Message, Task, Trajectory


class BatchedSampler:
    """Sample from an in-process Qwen2.5-VL with an `ImageTextProcessor`-like processor."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        sampling: SamplingParams = SamplingParams(),  # noqa: B008  (frozen)
        *,
        suppress: Sequence[int] = (),
        max_prompt_tokens: int = 4096,
        batch_size: int = 32,
    ) -> None:
        self.model, self.processor, self.sampling = model, processor, sampling
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id
        self.suppress = list(suppress)
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self.calls = 0

    def encode_prompt(self, messages: tuple[Message, ...]) -> tuple[list[int], list[Image]]:
        chat, images = chat_template_messages(messages)
        text = self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out = self.processor(text=[text], images=images or None, return_tensors="pt")
        return out["input_ids"][0].tolist(), images

    def complete_many(
        self,
        conversations: Sequence[tuple[Message, ...]],
        on_reply: Callable[[int], None] | None = None,
    ) -> list[Completion | None]:
        """One completion per conversation; None where the prompt is over ``max_prompt_tokens``.
        ``on_reply(n)``: ``n`` more replies ended (those over the limit at once)."""
        report = on_reply or (lambda n: None)
        encoded = [self.encode_prompt(c) for c in conversations]
        out: list[Completion | None] = [None] * len(encoded)
        fits = [i for i, (ids, _) in enumerate(encoded) if len(ids) <= self.max_prompt_tokens]
        if len(fits) < len(encoded):
            report(len(encoded) - len(fits))
        for start in range(0, len(fits), self.batch_size):
            chunk = fits[start : start + self.batch_size]
            for i, completion in zip(
                chunk, self._generate([encoded[i] for i in chunk], report), strict=True
            ):
                out[i] = completion
        return out

    def _generate(
        self, prompts: list[tuple[list[int], list[Image]]], report: Callable[[int], None]
    ) -> list[Completion]:
        import torch
        from transformers import StoppingCriteriaList

        width = max(len(ids) for ids, _ in prompts)
        ended = _Ended(width, self.eos_id, report)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        images: list[Image] = []
        for row, (ids, imgs) in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
            images += imgs
        s = self.sampling
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "max_new_tokens": s.max_tokens,
            "return_dict_in_generate": True,
            "output_scores": True,
            "pad_token_id": self.pad_id,
            "eos_token_id": self.eos_id,
            "stopping_criteria": StoppingCriteriaList([ended]),
        }
        if images:
            kwargs.update(self.processor.pixel_inputs(images))
        kwargs = to_model(kwargs, self.model)
        if self.suppress:
            kwargs["suppress_tokens"] = self.suppress
        if s.temperature > 0:
            kwargs.update(
                do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or 0
            )
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            result = self.model.generate(**kwargs)
            scores = self.model.compute_transition_scores(
                result.sequences, result.scores, normalize_logits=True
            )
        self.calls += 1
        report(len(prompts) - ended.seen)  # the rows cut at max_tokens
        completions = []
        for row in range(len(prompts)):
            new = result.sequences[row, width:].tolist()
            lps = scores[row].tolist()
            end = new.index(self.eos_id) + 1 if self.eos_id in new else len(new)
            new, lps = new[:end], lps[:end]
            ended = bool(new) and new[-1] == self.eos_id
            completions.append(
                Completion(
                    text=self.tokenizer.decode(new, skip_special_tokens=True),
                    finish_reason="stop" if ended else "length",
                    token_ids=tuple(int(t) for t in new),
                    logprobs=tuple(float(x) for x in lps),
                    prompt_token_ids=tuple(prompts[row][0]),
                    model="local",
                )
            )
        return completions


class _Ended:
    """A stopping criterion that stops nothing: at each generated token it reports how many more
    rows have written their end-of-turn token (those rows are then only padded)."""

    def __init__(self, width: int, eos_id: int, report: Callable[[int], None]) -> None:
        self.width, self.eos_id, self.report, self.seen = width, eos_id, report, 0

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        ended = int((input_ids[:, self.width :] == self.eos_id).any(dim=1).sum())
        if ended > self.seen:
            self.report(ended - self.seen)
            self.seen = ended
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


RunnerFactory = Callable[[tuple[Image, ...]], Any]


def run_lockstep(
    sampler: BatchedSampler,
    tasks: Sequence[Task],
    make_runner: RunnerFactory,
    config: EpisodeConfig = EpisodeConfig(),
    *,
    threads: int = 4,
    on_turns: Callable[[int], None] | None = None,
) -> list[Trajectory]:
    """One trajectory per entry of `tasks` (repeat a task for G rollouts), in order.
    ``on_turns(n)`` (a progress bar) hears the turns done out of ``len(tasks) × max_turns`` as
    each reply ends: a turn is done when its reply is, and an ended episode's unused turns are
    done with it, so the count reaches the total exactly when the last episode ends."""
    episodes = [Episode(task, config) for task in tasks]
    runners: list[Any] = [None] * len(episodes)
    calls = [0] * len(episodes)
    turns_done = 0

    def done(n: int) -> None:
        nonlocal turns_done
        turns_done += n
        if on_turns is not None:
            on_turns(turns_done)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        try:
            runners = list(pool.map(lambda ep: make_runner(ep.images), episodes))
            active = list(range(len(episodes)))
            while active:
                replies = sampler.complete_many(
                    [episodes[i].messages for i in active], on_reply=done
                )
                pending = []
                for i, reply in zip(active, replies, strict=True):
                    if reply is None:
                        episodes[i].on_context_overflow(
                            RuntimeError("prompt over max_prompt_tokens")
                        )
                        continue
                    code = episodes[i].on_completion(reply)
                    if code is not None:
                        pending.append((i, code))
                for (i, _), outcome in zip(
                    pending,
                    pool.map(lambda job: _run(runners[job[0]], job[1]), pending),
                    strict=True,
                ):
                    if isinstance(outcome, BaseException):
                        episodes[i].on_runner_error(outcome)
                    else:
                        episodes[i].on_result(outcome)
                for i in active:
                    calls[i] += 1
                ended = [i for i in active if episodes[i].done]
                active = [i for i in active if not episodes[i].done]
                if ended:
                    done(sum(max(0, config.max_turns - calls[i]) for i in ended))
        finally:
            for runner in runners:
                if runner is not None:
                    runner.close()
    return [episode.trajectory() for episode in episodes]


def _run(runner: CodeRunner, code: str) -> Any:
    try:
        return runner.run(code)
    except Exception as exc:  # noqa: BLE001  (the sandbox's own failure: a stop reason, not a crash of the batch)
        return exc
