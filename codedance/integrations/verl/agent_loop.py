"""The CodeDance agent loop for verl 0.9.1, registered as ``codedance``.

verl instantiates `CodeDanceAgentLoop` once per sample (``actor_rollout_ref.rollout.agent
.default_agent_loop=codedance``, or the row's ``agent_name``; keyword settings come from the agent
loop YAML, `codedance/presets/verl/agent_loop.yaml`). `run` drives `codedance.rollout.Episode`,
the same per-turn decisions as our own runner:

1. the prompt (`Episode.messages`: profile text, the task's images sized as Qwen2.5-VL expects)
   is rendered once through verl's Continuous Token builder (the model's processor);
2. each turn is generated through verl's server manager *token ids in, token ids out*; the sampled
   ids are appended as they are (mask 1) and decoded only to be parsed, never re-tokenized;
3. the first snippet runs in the sandbox through `Sandbox.arun` (a thread pool bounded by
   ``max_running``: the event loop never blocks);
4. the feedback message (text and images) is appended as a user turn through the builder's
   incremental render (mask 0, like the chat-template boundary tokens), and every image the model
   saw goes to ``multi_modal_data["images"]``.

The output's ``extra_fields["codedance"]`` is a `RolloutRecord`: per-turn token spans in the
response, each call's sandbox status, no-op flags, the answer, the stop reason. Beside it are the
fields verl's own loops return (the v1 trainer's contract): the server's ``global_steps`` /
``min_global_steps`` / ``max_global_steps`` (`merge_server_fields`) and empty ``turn_scores`` /
``tool_rewards``; ``metrics.num_preempted`` sums the server's counts (-1 when unknown).

Stop reasons are the Episode's; two are decided here: ``max_tokens`` when a turn ends at its
``max_tokens`` without an end-of-turn token, or when the response budget
(``rollout.response_length``) is spent (the feedback that would overflow it is not appended).
Departures from the release: no re-tokenization, sandbox status instead of output substrings,
no re-sampling of empty replies (``format_error``). Not handled: videos; several images per
prompt are handled but only single-image tasks are tested. CPU tests drive it against a scripted
server behind verl's own ``LLMServerClient``, and inside a full verl GRPO step on the CPU backend
(`codedance.integrations.verl.cpu`); it has not been run against a live vLLM/SGLang server here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import fields
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from codedance.config import build
from codedance.integrations.verl.record import EXTRA_KEY, RolloutRecord, TurnRecord
from codedance.integrations.verl.tasks import TASK_KEY, images_from_prompt, pil, task_from_fields
from codedance.policy.base import Completion
from codedance.rollout import Episode, EpisodeSettings
from codedance.sandbox.pool import SandboxPool
from codedance.types import Image, Message

_POOLS: dict[int, SandboxPool] = {}


def set_sandbox_pool(pool: SandboxPool | None) -> None:
    """Use `pool` for every episode of this process (tests, or a pool sized by hand);
    ``None`` returns to the default (one pool per process, created on first use)."""
    _POOLS.clear()
    if pool is not None:
        _POOLS[0] = pool


def sandbox_pool(max_running: int | None) -> SandboxPool:
    """This process's pool: at most ``max_running`` snippets execute at once (default: CPUs)."""
    if 0 not in _POOLS:
        _POOLS[0] = SandboxPool(max_running=max_running)
    return _POOLS[0]


def merge_server_fields(fields: dict[str, Any], turn: dict[str, Any]) -> None:
    """Fold one turn's ``TokenOutput.extra_fields`` into the trajectory's, as verl's own
    ``tool_agent_loop.py:261-267`` does: the first turn's fields as they are (``global_steps``,
    ``min_global_steps``, ...: the v1 trainer casts the last two to int, ``trainer_base.py:1897``),
    then only ``max_global_steps`` moves (the newest weights version that generated a turn)."""
    if not fields:
        fields.update(turn or {})
    elif (turn or {}).get("max_global_steps") is not None:
        fields["max_global_steps"] = turn["max_global_steps"]


def verl_message(message: Message) -> dict[str, Any]:
    """A codedance `Message` as the chat-template dict verl's processor renders (PIL images)."""
    if all(isinstance(p, str) for p in message.parts):
        return {"role": message.role, "content": message.text}
    content = [
        {"type": "image", "image": pil(p)} if isinstance(p, Image) else {"type": "text", "text": p}
        for p in message.parts
    ]
    return {"role": message.role, "content": content}


@register("codedance")
class CodeDanceAgentLoop(AgentLoopBase):
    """One CodeDance episode per sample (see the module docstring). Keyword settings: the episode
    knobs of `codedance.rollout.EpisodeSettings` with its defaults (``max_turns``,
    ``exec_timeout_s``, ``prompt_profile``: a built-in name or one in ``prompt_profiles``,
    ``min_pixels`` / ``max_pixels``, ``inject_turn_limit``; null keeps the default), and this
    loop's own: ``prompt_profiles`` (None, or a YAML file of user profiles such as the
    ``profiles.yaml`` of ``codedance data import codedance-rl``, whose ``codedance-rl`` profile is
    the release's RL prompt), ``turn_max_tokens`` (None: the remaining response budget),
    ``max_running`` (None: CPUs)."""

    def __init__(
        self,
        *args,
        prompt_profiles: str | None = None,
        turn_max_tokens: int | None = None,
        max_running: int | None = None,
        **kwargs,
    ) -> None:
        knobs = {f.name: kwargs.pop(f.name) for f in fields(EpisodeSettings) if f.name in kwargs}
        super().__init__(*args, **kwargs)
        settings = build(EpisodeSettings(), {k: v for k, v in knobs.items() if v is not None})
        self.episode_config = settings.episode_config(profiles=prompt_profiles or None)
        self.exec_timeout_s = settings.exec_timeout_s
        self.turn_max_tokens = int(turn_max_tokens) if turn_max_tokens else None
        self.max_running = max_running
        self.response_length = int(self.rollout_config.response_length)
        ends = {
            self.tokenizer.eos_token_id,
            *(self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")),
        }
        self.end_ids = {i for i in ends if isinstance(i, int) and i != self.tokenizer.unk_token_id}

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        if TASK_KEY not in extra_info:
            raise KeyError(
                f"row has no extra_info[{TASK_KEY!r}]; prepare data with "
                "'codedance verl prepare-data'"
            )
        task, domain = task_from_fields(
            extra_info[TASK_KEY], images_from_prompt(kwargs["raw_prompt"])
        )
        episode = Episode(task, self.episode_config)
        pool = sandbox_pool(self.max_running)
        sandbox = await pool.asandbox(
            images=[image.png for image in episode.images], timeout_s=self.exec_timeout_s
        )
        try:
            return await self._drive(episode, sandbox, sampling_params, domain)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, sandbox.close)

    async def _drive(
        self, episode: Episode, sandbox, sampling_params: dict[str, Any], domain: str
    ) -> AgentLoopOutput:
        messages = [verl_message(m) for m in episode.messages]
        images = [pil(image) for image in episode.images]
        self._assert_mm_supported(bool(images))
        prompt_ids = await self.ct_build_initial_tokens(messages, images=images or None)
        runtime, mask = list(prompt_ids), []
        want_logprobs = bool(sampling_params.get("logprobs"))
        logprobs: list[float] | None = [] if want_logprobs else None
        spans: list[tuple[int, int]] = []
        request_id = uuid4().hex
        timing = {"generate": 0.0, "tools": 0.0}
        server_fields: dict[str, Any] = {}
        preempted: list[int] = []
        while not episode.done:
            budget = self.response_length - len(mask)
            if budget <= 0:
                episode.on_context_overflow(RuntimeError("response budget spent"))
                break
            max_new = min(self.turn_max_tokens or budget, budget)
            started = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=runtime,
                sampling_params={**sampling_params, "max_tokens": max_new},
                image_data=images or None,
            )
            timing["generate"] += time.perf_counter() - started
            merge_server_fields(server_fields, out.extra_fields)
            if out.num_preempted is not None:
                preempted.append(int(out.num_preempted))
            ids = [int(i) for i in out.token_ids]
            merge, mask, logprobs = await self.ct_merge_assistant_token(
                runtime,
                ids,
                mask,
                logprobs,
                assistant_logprobs=list(out.log_probs) if want_logprobs else None,
            )
            runtime = merge.token_ids
            spans.append((len(mask) - merge.appended_token_count, len(mask)))
            truncated = len(ids) >= max_new and (not ids or ids[-1] not in self.end_ids)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            completion = Completion(
                text=text,
                finish_reason="length" if truncated else "stop",
                token_ids=tuple(ids),
                logprobs=tuple(out.log_probs or ()),
            )
            code = episode.on_completion(completion)
            if code is None:
                break
            started = time.perf_counter()
            try:
                result = await sandbox.arun(code)
            except Exception as exc:  # noqa: BLE001  (the sandbox's own failure: a stop reason)
                episode.on_runner_error(exc)
                break
            finally:
                timing["tools"] += time.perf_counter() - started
            before = [*messages, {"role": "assistant", "content": text}]
            episode.on_result(result)
            feedback = episode.messages[-1]
            updated = [*before, verl_message(feedback)]
            self._assert_mm_supported(bool(feedback.images))
            merge, new_mask, new_logprobs = await self.ct_merge_context_msg(
                before, updated, runtime, mask, logprobs
            )
            if len(new_mask) >= self.response_length:
                episode.on_context_overflow(
                    RuntimeError("feedback does not fit the response budget")
                )
                break
            runtime, mask, logprobs, messages = merge.token_ids, new_mask, new_logprobs, updated
            images += [pil(image) for image in feedback.images]
        return self._output(
            episode,
            prompt_ids,
            runtime,
            mask,
            logprobs,
            spans,
            images,
            timing,
            domain,
            server_fields,
            sum(preempted) if preempted else -1,
        )

    def _output(
        self,
        episode: Episode,
        prompt_ids: list[int],
        runtime: list[int],
        mask: list[int],
        logprobs: list[float] | None,
        spans: list[tuple[int, int]],
        images: list,
        timing: dict,
        domain: str,
        server_fields: dict[str, Any],
        preempted: int,
    ) -> AgentLoopOutput:
        trajectory = episode.trajectory()
        limit = self.response_length
        response = runtime[len(prompt_ids) :]
        cut = max(0, len(response) - limit)
        turns = tuple(
            TurnRecord(
                text=turn.text,
                span=(min(start, limit), min(end, limit)),
                status=turn.result.status.value if turn.result is not None else None,
                executed_nothing=bool(turn.result and turn.result.executed_nothing),
                injected_turn_limit=turn.feedback_has_turn_limit,
                verdict_ok=turn.verdict.ok,
                verdict_reasons=turn.verdict.reasons,
                feedback_images=len(turn.feedback_images),
            )
            for turn, (start, end) in zip(trajectory.turns, spans, strict=True)
        )
        record = RolloutRecord(
            task_id=trajectory.task_id,
            turns=turns,
            stop_reason=trajectory.stop_reason.value,
            answer=trajectory.answer,
            domain=domain,
            truncated_tokens=cut,
        )
        n_user = sum(1 for turn in trajectory.turns if turn.feedback_text)
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=response[:limit],
            response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs is not None else None,
            multi_modal_data={"images": images} if images else {},
            num_turns=1 + len(trajectory.turns) + n_user,
            metrics=AgentLoopMetrics(
                generate_sequences=timing["generate"],
                tool_calls=timing["tools"],
                num_preempted=preempted,
            ),
            extra_fields={
                **server_fields,
                "turn_scores": [],
                "tool_rewards": [],
                EXTRA_KEY: record.to_json(),
            },
        )
