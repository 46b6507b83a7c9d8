"""The ``hf`` rollout backend: a verl token-in/token-out server on ``transformers.generate``.

verl 0.9.1 knows only vLLM, SGLang and TensorRT-LLM (``verl/workers/rollout/replica.py:388-390``,
``verl/workers/rollout/base.py:89-93``), all GPU engines; its ``HFRollout`` is dead code for the
removed sync mode. This backend implements the same interfaces as vLLM's, so everything around
it is verl's own (``LLMServerManager``, the load balancer, ``LLMServerClient``, the agent loop
workers, the ``naive`` weight sync of the hybrid worker):

- `HFServer` (a Ray actor, one per replica): ``generate(prompt_ids, sampling_params, request_id,
  image_data, ...) -> TokenOutput`` as ``LLMServerClient.generate`` calls it
  (``verl/workers/rollout/llm_server.py:150-159``): the prompt ids already hold the expanded
  image pads, the images go through the processor's image processor, and the sampled ids come
  back with their log-probs (temperature/top-k/top-p processed, as vLLM's default
  ``processed_logprobs``) and ``extra_fields["global_steps"]``, the weights version. It also
  answers the control calls ``RolloutReplica`` and the checkpoint manager make (``replica.py:
  265-309``): nothing to free on CPU, so they are no-ops. ``load_weights`` swaps in the actor's
  tensors and records what changed (``custom.hf_server.weight_log``, one JSON line per load).
- `HFReplica` (``RolloutReplicaRegistry.register("hf", ...)``): launches one named server.
- `HFServerAdapter` (the hybrid worker's ``BaseRollout``, ``rollout.name=hf``): receives the
  actor's weights after each update; every rank iterates the generator (FSDP2's
  ``full_tensor()`` is collective) and each replica's first rank sends a CPU state dict to its
  server.

Settings under ``actor_rollout_ref.rollout.custom.hf_server``: ``test_policy`` (None, or
``scripted-first``, see `codedance.integrations.verl.cpu.scripted_first`), ``weight_log`` (a path).
Vision placeholder tokens are never sampled (`codedance.policy.qwen_processor.vision_token_ids`:
a sampled ``<|image_pad|>`` breaks verl's position ids, ``agent_loop.py:953``).

Not handled: batching across requests (one ``generate`` at a time per server), prefix or KV
reuse, videos, LoRA adapters, ``delta_flush`` weight transfer. For tiny models on CPU, not for
throughput.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from codedance.integrations.verl.cpu.scripted_first import NAME as SCRIPTED_FIRST
from codedance.integrations.verl.cpu.scripted_first import ScriptedFirstRollout

logger = logging.getLogger(__name__)
NAME = "hf"


def server_name(replica_rank: int) -> str:
    return f"codedance_hf_server_{ray.get_runtime_context().get_job_id()}_{replica_rank}"


def server_settings(config: Any) -> dict[str, Any]:
    """``rollout.custom.hf_server`` as a plain dict (empty when unset)."""
    custom = getattr(config, "custom", None) or {}
    return dict(custom.get("hf_server", None) or {})


def load_model(path: str):
    """The checkpoint's generation model, float32 on CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path)
    auto = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    model = auto.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


class HFServer:
    """One rollout server on ``transformers.generate`` (see the module docstring)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        from codedance.policy.qwen_processor import vision_token_ids

        config = omega_conf_to_dataclass(config)
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config, self.replica_rank = config, replica_rank
        self.model = load_model(model_config.local_path)
        self.processor = model_config.processor
        self.tokenizer = model_config.tokenizer
        generation = self.model.generation_config
        eos = generation.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [self.tokenizer.eos_token_id])
        self.pad_id = (
            generation.pad_token_id if generation.pad_token_id is not None else self.eos_ids[0]
        )
        self.suppress = vision_token_ids(self.tokenizer)
        settings = server_settings(config)
        policy = settings.get("test_policy")
        if policy not in (None, SCRIPTED_FIRST):
            raise ValueError(
                f"unknown hf_server.test_policy {policy!r}; use {SCRIPTED_FIRST!r} or null"
            )
        self.script = ScriptedFirstRollout(self.tokenizer, self.eos_ids[0]) if policy else None
        self.weight_log = settings.get("weight_log")
        self.global_steps: int | None = None
        self.weights_version = 0
        self._lock = threading.Lock()

    # --- generation ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        **_: Any,
    ) -> TokenOutput:
        if video_data:
            raise NotImplementedError("the hf rollout server does not handle videos")
        return await asyncio.to_thread(
            self._generate, [int(i) for i in prompt_ids], dict(sampling_params), image_data
        )

    def _max_tokens(self, prompt_len: int, params: dict[str, Any]) -> int:
        limit = params.pop("max_tokens", params.pop("max_new_tokens", None))
        budget = self.config.prompt_length + self.config.response_length - prompt_len
        limit = min(self.config.response_length, budget) if limit is None else limit
        return max(1, int(limit))

    def _vision_inputs(self, image_data: list[Any] | None) -> dict[str, Any]:
        if not image_data:
            return {}
        out = self.processor.image_processor(images=list(image_data), return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def _generate(self, prompt_ids: list[int], params: dict[str, Any], image_data) -> TokenOutput:
        max_tokens = self._max_tokens(len(prompt_ids), params)
        temperature = float(params.get("temperature", self.config.temperature))
        want_logprobs = bool(params.get("logprobs"))
        vision = self._vision_inputs(image_data)
        with self._lock:
            scripted = self.script.reply(prompt_ids) if self.script is not None else None
            if scripted is not None:
                ids = list(scripted[:max_tokens])
                logprobs = (
                    self._score(prompt_ids, ids, vision, temperature) if want_logprobs else None
                )
            else:
                ids, logprobs = self._sample(
                    prompt_ids, vision, params, max_tokens, temperature, want_logprobs
                )
        return TokenOutput(
            token_ids=ids,
            log_probs=logprobs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    @torch.no_grad()
    def _sample(self, prompt_ids, vision, params, max_tokens, temperature, want_logprobs):
        input_ids = torch.tensor([prompt_ids])
        greedy = temperature <= 0 or not params.get("do_sample", self.config.do_sample)
        kwargs: dict[str, Any] = {
            "do_sample": not greedy,
            "max_new_tokens": max_tokens,
            "pad_token_id": self.pad_id,
            "return_dict_in_generate": True,
            "output_scores": want_logprobs,
            "suppress_tokens": self.suppress or None,
            "repetition_penalty": float(params.get("repetition_penalty", 1.0)),
        }
        if not greedy:
            top_k, top_p = int(params.get("top_k", -1)), float(params.get("top_p", 1.0))
            kwargs.update(temperature=temperature, top_k=top_k if top_k > 0 else None, top_p=top_p)
        if params.get("ignore_eos", self.config.ignore_eos):
            kwargs["eos_token_id"] = None
        else:
            kwargs["eos_token_id"] = self.eos_ids
        out = self.model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **vision, **kwargs
        )
        ids = out.sequences[0, len(prompt_ids) :].tolist()  # one sequence: no padding
        logprobs = None
        if want_logprobs:
            logprobs = [
                float(torch.log_softmax(score[0].float(), dim=-1)[token])
                for score, token in zip(out.scores, ids, strict=False)
            ]
        return ids, logprobs

    @torch.no_grad()
    def _score(
        self, prompt_ids: list[int], ids: list[int], vision: dict[str, Any], temperature: float
    ) -> list[float]:
        """The model's own log-probs of ``ids`` after ``prompt_ids`` (one forward pass)."""
        sequence = torch.tensor([prompt_ids + ids])
        logits = self.model(
            input_ids=sequence, attention_mask=torch.ones_like(sequence), **vision
        ).logits[0]
        scale = temperature if temperature > 0 else 1.0
        steps = torch.log_softmax(logits[len(prompt_ids) - 1 : -1].float() / scale, dim=-1)
        return steps.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()

    # --- weights ------------------------------------------------------------------------------

    def load_weights(
        self, state: dict[str, torch.Tensor], global_steps: int | None = None
    ) -> dict[str, Any]:
        """Load the actor's tensors (HF names); returns and logs what changed."""
        with self._lock:
            params = self.model.state_dict(keep_vars=True)  # tied weights appear under both names
            unknown = sorted(set(state) - set(params))
            delta = 0.0
            with torch.no_grad():
                for name, tensor in state.items():
                    if name in params:
                        target = params[name]
                        new = tensor.to(dtype=target.dtype).reshape(target.shape)
                        delta = max(
                            delta, float((new - target).abs().max()) if new.numel() else 0.0
                        )
                        target.copy_(new)
            self.weights_version += 1
            self.global_steps = global_steps
            record = {
                "version": self.weights_version,
                "global_steps": global_steps,
                "tensors": len(state),
                "unknown": unknown,
                "not_updated": len(set(params) - set(state)),
                "max_abs_delta": delta,
                "time": time.time(),
            }
        if unknown:
            raise ValueError(
                f"the actor sent tensors the rollout model does not have: {unknown[:5]}"
            )
        if self.weight_log:
            Path(self.weight_log).parent.mkdir(parents=True, exist_ok=True)
            with open(self.weight_log, "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")
        return record

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # --- control calls verl makes on every server: nothing to free or pause on CPU ------------

    async def wake_up(self, tags: list[str] | None = None) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def wait_for_requests_to_drain(self) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **_: Any) -> None: ...
    async def stop_profile(self) -> None: ...

    async def abort_all_requests(self, reject_request: bool = False, **_: Any) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}


class HFReplica(RolloutReplica):
    """One `HFServer` per replica, placed by Ray (see the module docstring)."""

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank)
        server = (
            ray.remote(HFServer)
            .options(name=name, max_concurrency=self.max_concurrency)
            .remote(
                config=self.config, model_config=self.model_config, replica_rank=self.replica_rank
            )
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # no HTTP endpoint: the handle is the interface

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """The hybrid worker's end of the weight sync to its replica's `HFServer`."""

    def __init__(
        self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **_: Any
    ) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // size if replica_rank == -1 else replica_rank
        self.is_sender = rank % size == 0
        self._server = None

    def _handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        """Weights and cache never leave memory on CPU."""

    async def release(self) -> None:
        """Weights and cache never leave memory on CPU."""

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        **_: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full tensors, not {wire_format!r}")
        state = {}
        for name, tensor in weights:  # every rank iterates: full_tensor() is a collective
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            state[name] = full.detach().to("cpu", dtype=torch.float32, copy=True)
        if self.is_sender:
            record = await self._handle().load_weights.remote(state, global_steps)
            logger.info(
                "hf rollout weights v%s: %s tensors, max |delta| %.3g",
                record["version"],
                record["tensors"],
                record["max_abs_delta"],
            )
