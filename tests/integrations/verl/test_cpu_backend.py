"""The CPU backend's parts against the installed verl, and a guard on every monkeypatch.

verl resolves its platform once per process, so the checks run in one fresh interpreter with
``VERL_PLATFORM=cpu`` and the plugin loaded as verl loads it (``VERL_USE_EXTERNAL_MODULES``); it
prints one JSON object the tests read. Each patch guard fails when verl changes under the patch:
the patched name is gone, or the problem it works around no longer exists (then the patch should
go). The full step is ``test_cpu_step.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tier("verl")

pytest.importorskip("verl")

CHECKS = textwrap.dedent("""
    import asyncio, inspect, json, os, socket, sys
    import torch
    import verl  # loads codedance.integrations.verl through VERL_USE_EXTERNAL_MODULES
    from verl.utils import device, distributed
    from verl.workers import engine_workers
    from verl.workers.config import model as model_config_module
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import (
        FSDPEngineWithLMHead,
        FSDPEngineWithValueHead,
    )
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import get_rollout_replica_class
    from codedance.integrations.verl import processor as cd_processor
    from codedance.integrations.verl.cpu import hf_rollout
    from codedance.integrations.verl.launch import tiny_model
    from PIL import Image

    out = {}
    out["device"] = [
        device.get_device_name(),
        device.get_nccl_backend(),
        str(device.get_device_id()),
        device.get_resource_name(),
    ]
    module = device.get_torch_device()
    out["device_module"] = [
        module.memory_allocated() > 0,
        module.mem_get_info()[1] > 0,
        module.is_available(),
    ]
    out["engines"] = [
        EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead,
        EngineRegistry.get_engine_cls("value_model", "fsdp") is FSDPEngineWithValueHead,
    ]
    out["rollout"] = [
        rollout_base.get_rollout_class("hf", "async") is hf_rollout.HFServerAdapter,
        get_rollout_replica_class("hf") is hf_rollout.HFReplica,
        ("vllm", "async") in rollout_base._ROLLOUT_REGISTRY,
    ]

    # gloo patch: the name it wraps, the call site that uses it, and the problem it fixes
    patched = engine_workers.initialize_global_process_group_ray
    out["gloo_wraps"] = (
        getattr(patched, "__wrapped__", None) is distributed.initialize_global_process_group_ray
    )
    out["gloo_call_site"] = (
        "initialize_global_process_group_ray(timeout_second=None)"
        in inspect.getsource(engine_workers.TrainingWorker.__init__)
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        distributed.initialize_global_process_group_ray(timeout_second=None)
        out["gloo_unpatched"] = "initialized"
        torch.distributed.destroy_process_group()
    except Exception as exc:
        out["gloo_unpatched"] = repr(exc)
    patched(timeout_second=None)
    out["gloo_patched"] = torch.distributed.get_backend()
    torch.distributed.destroy_process_group()

    # processor patch: needed without torchvision, and verl's model config gets a usable processor
    import pathlib

    path = sys.argv[1]
    tiny_model(pathlib.Path(path), ["<think>a</think><answer>1</answer>", "How many dots?"])
    out["processor_wrapped"] = hasattr(model_config_module.hf_processor, "__wrapped__")
    out["torchvision"] = cd_processor.torchvision_available()
    out["verl_processor_alone"] = repr(model_config_module.hf_processor.__wrapped__(path))
    config = HFModelConfig(path=path)
    proc = config.processor
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    image = Image.new("RGB", (56, 56), (10, 200, 30))
    batch = proc(text=[text], images=[image], return_tensors="pt")
    extra = (
        {"mm_token_type_ids": batch["mm_token_type_ids"]} if "mm_token_type_ids" in batch else {}
    )
    positions, _ = proc.get_rope_index(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        image_grid_thw=batch["image_grid_thw"],
        video_grid_thw=None,
        **extra,
    )
    out["processor"] = [
        type(proc).__name__,
        list(batch["image_grid_thw"][0].tolist()),
        list(positions.shape),
    ]

    # the hf server without Ray: scripted first rollout, sampled second, weight loading
    rollout = RolloutConfig(
        name="hf",
        prompt_length=512,
        response_length=256,
        custom={"hf_server": {"test_policy": "scripted-first"}},
    )
    server = hf_rollout.HFServer(rollout, config, replica_rank=0)
    prompt = batch["input_ids"][0].tolist()
    params = {"temperature": 1.0, "logprobs": True, "max_tokens": 200}
    first = asyncio.run(server.generate(prompt, dict(params), "r1", image_data=[image]))
    second = asyncio.run(server.generate(prompt, dict(params), "r2", image_data=[image]))
    cont = asyncio.run(
        server.generate(
            prompt + list(server.script.code_ids) + proc.tokenizer.encode("ok"),
            dict(params),
            "r3",
            image_data=[image],
        )
    )
    out["scripted"] = [
        list(first.token_ids) == list(server.script.code_ids),
        len(first.log_probs) == len(first.token_ids),
        all(lp <= 0 for lp in first.log_probs),
        list(cont.token_ids) == list(server.script.answer_ids),
    ]
    vision = set(server.suppress)
    out["sampled"] = [
        list(second.token_ids) != list(server.script.code_ids),
        len(second.log_probs) == len(second.token_ids) > 0,
        not vision & set(second.token_ids),
        bool(vision),
    ]
    state = {k: v + 0.5 for k, v in server.model.state_dict().items() if v.is_floating_point()}
    record = server.load_weights(state, global_steps=3)
    after = asyncio.run(server.generate(prompt, dict(params), "r4", image_data=[image]))
    out["weights"] = [
        record["max_abs_delta"],
        record["unknown"],
        after.extra_fields["global_steps"],
    ]
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    env.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="codedance.integrations.verl")
    done = subprocess.run(
        [sys.executable, "-c", CHECKS, str(tmp_path_factory.mktemp("tiny") / "model")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_platform_answers_for_the_cpu(checks):
    assert checks["device"] == ["cpu", "gloo", "cpu", "GPU"]
    assert checks["device_module"] == [True, True, True]


def test_fsdp_engines_and_hf_rollout_are_registered(checks):
    assert checks["engines"] == [True, True]
    assert checks["rollout"] == [True, True, True]


def test_gloo_patch_still_needed_and_applied(checks):
    assert checks["gloo_wraps"] and checks["gloo_call_site"]
    assert "Duplicate device type cpu" in checks["gloo_unpatched"]  # verl's own string fails on cpu
    assert checks["gloo_patched"] == "gloo"


def test_processor_without_torchvision(checks):
    assert checks["processor_wrapped"]
    if not checks["torchvision"]:
        assert checks["verl_processor_alone"] == "None"  # what the wrapper exists for
    name, grid, positions = checks["processor"]
    assert name == "Qwen2_5_VLProcessor"  # the name verl dispatches on
    assert grid == [1, 4, 4] and positions[0] == 3  # 56 px = 4 patches of 14; M-RoPE (t, h, w)


def test_hf_server_scripted_then_sampled(checks):
    assert checks["scripted"] == [True, True, True, True]
    assert checks["sampled"] == [True, True, True, True]


def test_hf_server_loads_weights(checks):
    delta, unknown, steps = checks["weights"]
    assert delta == pytest.approx(0.5) and unknown == [] and steps == 3
