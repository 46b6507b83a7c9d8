"""The codedance agent loop end to end on CPU: verl's real AgentLoopBase and Continuous Token
builder, a tiny locally built Qwen2.5-VL tokenizer/processor, the real sandbox, and a scripted
token-in/token-out server manager standing in for the model's choices only. The contract test
puts the scripted server behind verl's own ``LLMServerClient`` (which stamps the weights version
on every reply) and compares our output with verl's own ``SingleTurnAgentLoop``'s."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("transformers")

from omegaconf import OmegaConf
from PIL import Image as PILImage
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from codedance.errors import SettingsError
from codedance.integrations.verl import agent_loop as al
from codedance.integrations.verl.record import record_from_extra
from codedance.integrations.verl.tasks import TASK_KEY, task_fields
from codedance.rewards import compute_group_rewards
from codedance.rollout import EpisodeSettings
from codedance.sandbox.pool import SandboxPool
from codedance.types import AnswerKind, Image, Task

sys.path.insert(0, str(Path(__file__).parent))
import tiny_qwen

pytestmark = pytest.mark.tier("verl")

CROP = (
    "<think>crop it</think>\n<code>\n```python\nim = input_image.crop((0, 0, 28, 28))\n"
    "im.show()\nprint(im.size)\n```\n</code>"
)
FAIL = "<think>divide</think>\n<code>\n```python\nprint('before')\n1 / 0\n```\n</code>"
NOOP = "<think>nothing</think>\n<code>\n```python\npass\n```\n</code>"
ANSWER = "<think>seven</think>\n<answer>7</answer>"
SLEEP = "<think>wait</think>\n<code>\n```python\nimport time\ntime.sleep(30)\n```\n</code>"


@pytest.fixture(scope="module")
def tok_proc():
    return tiny_qwen.build()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(max_running=2) as p:
        al.set_sandbox_pool(p)
        yield p
        al.set_sandbox_pool(None)


class ScriptedServer:
    """verl's server manager interface: token ids in, token ids out; honours max_tokens."""

    def __init__(self, tokenizer, replies: list[str], global_steps: int | None = None) -> None:
        self.tokenizer, self.replies, self.requests = tokenizer, list(replies), []
        self.global_steps = global_steps
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.sent: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, **_):
        self.requests.append(
            {
                "prompt_ids": list(prompt_ids),
                "images": len(image_data or []),
                "max_tokens": sampling_params.get("max_tokens"),
            }
        )
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False) + [self.end]
        ids = ids[: sampling_params.get("max_tokens") or len(ids)]
        self.sent.append(ids)
        extra = (
            {} if self.global_steps is None else {"global_steps": self.global_steps}
        )  # as vLLM's server
        return TokenOutput(
            token_ids=ids,
            log_probs=[-0.5] * len(ids),
            stop_reason="completed",
            num_preempted=0,
            extra_fields=extra,
        )


class _Remote:
    def __init__(self, fn) -> None:
        self.remote = fn


class VerlClient(LLMServerClient):
    """verl's own client (its ``generate`` is unchanged) with the Ray load balancer replaced by
    one in-process server whose ``generate.remote`` is the scripted server."""

    def __init__(self, server: ScriptedServer) -> None:
        config = OmegaConf.create(
            {"actor_rollout_ref": {"rollout": {"name": "vllm", "full_determinism": False}}}
        )
        super().__init__(config=config)
        self.handle = type("Handle", (), {"generate": _Remote(server.generate)})()

    async def _acquire_server(self, request_id, **_):
        return "scripted", self.handle

    def _release_server(self, server_id, request_id=None) -> None:
        pass


def make_loop(
    tok_proc, server, response_length=4096, cls=None, hf_model_type="qwen2_5_vl", **settings
):
    cls = cls or al.CodeDanceAgentLoop
    tokenizer, processor = tok_proc
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 4096, "response_length": response_length}
            }
        }
    )
    return cls(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=processor,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
        hf_model_type=hf_model_type,
        **settings,
    )


def row(question="How many dots?"):
    buf = io.BytesIO()
    PILImage.new("RGB", (56, 56), (200, 30, 30)).save(buf, format="PNG")
    task = Task(
        id="dots-1",
        question=question,
        images=(Image.from_png(buf.getvalue()),),
        answer="7",
        kind=AnswerKind.COUNT,
    )
    pil = PILImage.open(io.BytesIO(buf.getvalue()))
    return {
        "raw_prompt": [
            {
                "role": "user",
                "content": [{"type": "image", "image": pil}, {"type": "text", "text": question}],
            }
        ],
        "extra_info": {TASK_KEY: task_fields(task)},
    }


def run(tok_proc, server, logprobs=True, cls=None, **settings):
    """Build the loop inside the event loop, as verl's worker does (it binds the running loop)."""

    async def go():
        loop = make_loop(tok_proc, server, cls=cls, **settings)
        return await loop.run({"temperature": 1.0, "logprobs": logprobs}, **row())

    return asyncio.run(go())


def test_episode_masks_spans_images_and_statuses(tok_proc, pool):
    tokenizer, _ = tok_proc
    server = ScriptedServer(tokenizer, [CROP, FAIL, NOOP, ANSWER])
    out = run(tok_proc, server, max_turns=6)
    record = record_from_extra(out.extra_fields)
    resp, mask = out.response_ids, out.response_mask
    assert len(resp) == len(mask) == len(out.response_logprobs)
    # mask-1 tokens are exactly the sampled ids, turn by turn, at the recorded spans
    assert [resp[s:e] for s, e in record.spans] == server.sent
    assert [i for i, m in zip(resp, mask, strict=True) if m] == [
        i for ids in server.sent for i in ids
    ]
    model_text = tokenizer.decode(
        [i for i, m in zip(resp, mask, strict=True) if m], skip_special_tokens=True
    )
    assert model_text == CROP + FAIL + NOOP + ANSWER
    covered = {k for s, e in record.spans for k in range(s, e)}
    assert all(bool(mask[k]) == (k in covered) for k in range(len(mask)))
    feedback = tokenizer.decode([i for i, m in zip(resp, mask, strict=True) if not m])
    assert (
        "<tool_response>" in feedback and "ZeroDivisionError" in feedback and "(28, 28)" in feedback
    )
    assert all(lp == -0.5 for lp, m in zip(out.response_logprobs, mask, strict=True) if m)
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, mask, strict=True) if not m)
    # token-in: each request is the prompt plus everything so far, never re-tokenized
    for k, request in enumerate(server.requests):
        n = record.spans[k][0]
        assert request["prompt_ids"] == out.prompt_ids + resp[:n]
    # images: the input and the crop, each with its vision block in the tokens
    assert len(out.multi_modal_data["images"]) == 2
    assert [r["images"] for r in server.requests] == [1, 2, 2, 2]
    vision_start = tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert (out.prompt_ids + resp).count(vision_start) == 2
    assert [t.status for t in record.turns] == ["ok", "error", "ok", None]
    assert [t.executed_nothing for t in record.turns] == [False, False, True, False]
    assert record.stop_reason == "answered" and record.answer == "7"
    assert out.num_turns == 1 + 4 + 3
    assert out.as_dict()["responses"].shape[0] == len(resp)  # verl's own conversion accepts it


def test_max_turns_and_timeout_status(tok_proc, pool):
    tokenizer, _ = tok_proc
    server = ScriptedServer(tokenizer, [SLEEP, CROP])
    out = run(tok_proc, server, max_turns=2, exec_timeout_s=1.0, logprobs=False)
    record = record_from_extra(out.extra_fields)
    assert record.stop_reason == "max_turns"
    assert [t.status for t in record.turns] == ["timeout", None]  # the last turn's code never runs
    assert record.turns[0].injected_turn_limit
    # the timed-out call whose feedback carries the note counts, for R_seq and R_turn alike
    reward = compute_group_rewards(trajectories=[record.trajectory()], correct=[False])[0]
    assert dict(reward.metrics)["n_total"] == 1.0 and reward.turn_returns == (-0.5, 0.0)
    assert out.response_logprobs is None
    assert "Turn limit reached" in tokenizer.decode(out.response_ids)


def test_the_episode_knobs_are_the_shared_episode_settings(tok_proc):
    """The loop's episode knobs are `EpisodeSettings`' (its defaults, its checks, its config:
    images sized for the model and the feedback alike); null in the YAML keeps a default."""
    server = ScriptedServer(tok_proc[0], [ANSWER])

    async def build(**settings):
        return make_loop(tok_proc, server, **settings)

    loop = asyncio.run(build(prompt_profiles=None))
    assert loop.episode_config == EpisodeSettings().episode_config()
    assert loop.exec_timeout_s == EpisodeSettings().exec_timeout_s
    loop = asyncio.run(
        build(max_turns=3, max_pixels=56 * 56, min_pixels=None, prompt_profile="paper")
    )
    assert (
        loop.episode_config
        == EpisodeSettings(max_turns=3, max_pixels=56 * 56, prompt_profile="paper").episode_config()
    )
    with pytest.raises(SettingsError, match="max_turns: must be at least 1"):
        asyncio.run(build(max_turns=0))


def test_max_tokens_per_turn_and_format_error(tok_proc, pool):
    tokenizer, _ = tok_proc
    out = run(tok_proc, ScriptedServer(tokenizer, [CROP]), turn_max_tokens=20)
    record = record_from_extra(out.extra_fields)
    assert record.stop_reason == "max_tokens" and sum(out.response_mask) == 20
    out = run(tok_proc, ScriptedServer(tokenizer, ["I think it is seven."]))
    assert record_from_extra(out.extra_fields).stop_reason == "format_error"


def test_response_budget_stops_before_overflowing(tok_proc, pool):
    tokenizer, _ = tok_proc
    server = ScriptedServer(tokenizer, [CROP, CROP, ANSWER])
    budget = len(tokenizer.encode(CROP, add_special_tokens=False)) + 30  # the feedback cannot fit
    out = run(tok_proc, server, response_length=budget)
    record = record_from_extra(out.extra_fields)
    assert record.stop_reason == "max_tokens"
    assert len(out.response_ids) <= budget and len(server.requests) == 1
    assert record.turns[0].status == "ok"


def test_output_keeps_the_fields_verls_own_loops_return(tok_proc, pool):
    """The v1 trainer reads ``min_global_steps`` / ``max_global_steps`` from every trajectory's
    ``extra_fields`` and casts them to int (``trainer_base.py:1897``); verl's client stamps them on
    each reply and verl's own loops carry them through. Ours must return every field verl's loop
    returns, with the weights version of its turns."""
    tokenizer, _ = tok_proc

    async def verls_loop():  # text only: verl's image path needs qwen-vl-utils with torchvision
        loop = make_loop(
            (tokenizer, None),
            VerlClient(ScriptedServer(tokenizer, [ANSWER], global_steps=7)),
            cls=SingleTurnAgentLoop,
            hf_model_type="qwen2",
        )
        return await loop.run(
            {"temperature": 1.0, "logprobs": True},
            raw_prompt=[{"role": "user", "content": "How many dots?"}],
        )

    theirs = asyncio.run(verls_loop())
    server = ScriptedServer(tokenizer, [CROP, ANSWER], global_steps=7)
    client = VerlClient(server)
    ours = run(tok_proc, client)
    assert set(theirs.extra_fields) <= set(ours.extra_fields)
    for key in (
        "global_steps",
        "min_global_steps",
        "max_global_steps",
        "turn_scores",
        "tool_rewards",
    ):
        assert ours.extra_fields[key] == theirs.extra_fields[key], key
    assert (
        int(ours.extra_fields["min_global_steps"])
        == int(ours.extra_fields["max_global_steps"])
        == 7
    )
    assert ours.metrics.num_preempted == theirs.metrics.num_preempted == 0
    assert record_from_extra(ours.extra_fields).stop_reason == "answered"
    assert len(server.requests) == 2


def test_newest_weights_version_of_a_trajectory_is_kept():
    fields: dict = {}
    al.merge_server_fields(
        fields, {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3, "n": 1}
    )
    al.merge_server_fields(
        fields, {"global_steps": 4, "min_global_steps": 4, "max_global_steps": 4, "n": 2}
    )
    assert fields == {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 4, "n": 1}


@pytest.mark.parametrize("env", [True, False])
def test_an_imported_profile_through_verls_agent_loop_registry(
    tok_proc, pool, tmp_path, monkeypatch, env
):
    """The release's RL prompt, imported from a CodeDance-RL fixture (the card's schema) as profile
    ``codedance-rl``, chosen in the agent loop YAML that ships (through the environment, as
    ``scripts/train_verl.sh`` passes it) or in a YAML of one's own, then loaded and instantiated as
    verl's ``AgentLoopWorker`` does (``OmegaConf.load``, its registry,
    ``hydra.utils.instantiate``)."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap, _agent_loop_registry

    sys.path.insert(0, str(Path(__file__).parents[2] / "data"))
    from fixtures import RL_SCHEMA, RL_SYSTEM, rl_rows, write

    from codedance.data.rl_import import import_rl

    rows, _ = rl_rows()
    import_rl([write(rows, RL_SCHEMA, tmp_path / "rl.parquet")], tmp_path / "rl")
    profiles = tmp_path / "rl" / "profiles.yaml"
    if env:
        monkeypatch.setenv("CODEDANCE_PROMPT_PROFILE", "codedance-rl")
        monkeypatch.setenv("CODEDANCE_PROFILES", str(profiles))
        loop_yaml = Path(al.__file__).parents[2] / "presets" / "verl" / "agent_loop.yaml"
    else:
        loop_yaml = tmp_path / "agent_loop.yaml"
        loop_yaml.write_text(
            f"- name: codedance\n  _target_: {al.__name__}.CodeDanceAgentLoop\n"
            f"  prompt_profile: codedance-rl\n  prompt_profiles: {profiles}\n"
        )
    saved = dict(_agent_loop_registry)
    tokenizer, processor = tok_proc
    server = ScriptedServer(tokenizer, [ANSWER])
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096}},
            "data": {},
        }
    )

    async def go():
        for entry in OmegaConf.load(loop_yaml):  # AgentLoopWorker.__init__
            _agent_loop_registry[entry.name] = entry
        loop = hydra.utils.instantiate(  # AgentLoopWorker._run_agent_loop
            config=_agent_loop_registry["codedance"],
            trainer_config=DictConfigWrap(config=config),
            server_manager=VerlClient(server),
            tokenizer=tokenizer,
            processor=processor,
            hf_model_type="qwen2_5_vl",
            dataset_cls=None,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        return loop, await loop.run({"temperature": 1.0, "logprobs": True}, **row())

    try:
        loop, out = asyncio.run(go())
    finally:
        _agent_loop_registry.clear()
        _agent_loop_registry.update(saved)
    assert loop.episode_config.profile.name == "codedance-rl"
    prompt = tokenizer.decode(out.prompt_ids)
    assert RL_SYSTEM in prompt and "How many dots?" in prompt
    assert record_from_extra(out.extra_fields).stop_reason == "answered"
    for name in (
        "CODEDANCE_PROMPT_PROFILE",
        "CODEDANCE_PROFILES",
    ):  # unset: the shipped YAML's defaults
        monkeypatch.delenv(name, raising=False)
    shipped = OmegaConf.load(Path(al.__file__).parents[2] / "presets" / "verl" / "agent_loop.yaml")[
        0
    ]
    assert (shipped.prompt_profile, shipped.prompt_profiles) == ("release", None)
