"""The OpenAI client against real vLLM 0.32 replies, replayed over real HTTP.

``fixtures/vllm_recordings/`` holds 14 request/response pairs recorded between this client and a
real vLLM 0.32 CPU server (``shared/reports/2026-12-01-real_vllm.md``). Each test serves the
recorded status and body verbatim and checks what the client makes of it; where the client sent
the request, it also checks that today's client builds the same body.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codedance.policy import (
    ContextOverflowError,
    ImageLimitError,
    ModelNotFoundError,
    OpenAIChatPolicy,
    PolicyHTTPError,
    RetrySettings,
    SamplingParams,
)
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.rollout import run_episode
from codedance.types import Image, Message, StopReason, Task

pytestmark = pytest.mark.tier("integration")

FOLDER = Path(__file__).parent / "fixtures" / "vllm_recordings"


def recording(name: str) -> dict:
    return json.loads(next(FOLDER.glob(f"{name}_*.json")).read_text(encoding="utf-8"))


def served(name: str) -> ServerReply:
    response = recording(name)["response"]
    return ServerReply(status=response["status"], raw=json.dumps(response["body"]).encode())


def policy(server: ReplayServer, model: str = "tiny", **sampling: object) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        server.url, model, SamplingParams(**sampling), retry=RetrySettings(max_retries=0)
    )  # type: ignore[arg-type]


TEXT = (Message("system", ("You are a helpful assistant.",)), Message("user", ("Say something.",)))


def test_stop_string_cuts_the_text_mid_token_and_the_loop_trusts_the_text():
    rec = recording("04")
    with ReplayServer([served("04")], model_names=("tiny",)) as server:
        p = policy(server, temperature=1.0, max_tokens=60, stop=("e",), seed=0, logprobs=True)
        assert p.request_body(TEXT) == rec["request"]["body"]  # the request as recorded
        completion = p.complete(TEXT)
    assert completion.text == "</answe" and completion.token_ids == (
        343,
    )  # id 343 is the whole "</answer>"
    assert completion.finish_reason == "stop" and completion.stop_reason == "e"
    assert (
        completion.prompt_tokens == 33
        and completion.completion_tokens == 1
        and len(completion.logprobs) == 1
    )
    with ReplayServer([served("04")], model_names=("tiny",)) as server:
        task = Task("t", "q", (), "4")
        trajectory = run_episode(policy(server), task, sandbox=None)  # type: ignore[arg-type]
    # the loop parsed the text (an unclosed tag is a format error), not the ids' "</answer>"
    assert (
        trajectory.stop_reason is StopReason.FORMAT_ERROR and trajectory.turns[0].text == "</answe"
    )
    assert trajectory.turns[0].token_ids == (343,)


def test_eos_and_special_tokens_are_in_the_ids_but_not_the_text():
    for name, last in (("05", 2), ("03", 2)):
        with ReplayServer([served(name)], model_names=("tiny",)) as server:
            completion = policy(server).complete(TEXT)
        body = recording(name)["response"]["body"]
        assert completion.token_ids[-1] == last and completion.stop_reason is None
        assert completion.text == body["choices"][0]["message"]["content"]
        assert len(completion.token_ids) == len(body["choices"][0]["token_ids"])
    with ReplayServer([served("12")], model_names=("tiny",)) as server:
        completion = policy(server).complete(TEXT)
    assert {0, 3} <= set(completion.token_ids)  # <|endoftext|>, <|vision_start|> sampled
    assert "<|endoftext|>" not in completion.text and "<|vision_start|>" not in completion.text


def test_logprobs_tokens_as_token_ids_give_the_ids_when_token_ids_are_null():
    with ReplayServer([served("11")], model_names=("tiny",)) as server:
        completion = policy(server).complete(TEXT)
    entries = recording("11")["response"]["body"]["choices"][0]["logprobs"]["content"]
    assert completion.token_ids == tuple(int(e["token"].split(":")[1]) for e in entries)
    assert completion.prompt_token_ids == ()


def test_image_reply_keeps_logprobs_ids_and_prompt_ids():
    with ReplayServer([served("01"), served("02")], model_names=("tiny",)) as server:
        first, second = policy(server).complete(TEXT), policy(server).complete(TEXT)
    body = recording("01")["response"]["body"]
    assert first.finish_reason == "length" and first.truncated
    assert len(first.logprobs) == len(first.token_ids) == len(body["choices"][0]["token_ids"])
    assert first.prompt_token_ids == tuple(body["prompt_token_ids"])
    assert first.prompt_tokens == body["usage"]["prompt_tokens"]
    assert second.text == recording("02")["response"]["body"]["choices"][0]["message"]["content"]


def test_prompt_plus_max_tokens_over_the_context_is_a_length_stop():
    with ReplayServer([served("10")], model_names=("tiny",)) as server:
        trajectory = run_episode(policy(server), Task("t", "q", (), "4"), sandbox=None)  # type: ignore[arg-type]
    assert trajectory.stop_reason is StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    "name,error",
    [
        ("06", ContextOverflowError),
        ("07", ContextOverflowError),
        ("08", ImageLimitError),
        ("09", ModelNotFoundError),
    ],
)
def test_error_replies_map_to_their_errors(name, error):
    model = recording(name)["request"]["body"]["model"]
    with (
        ReplayServer([served(name)], model_names=(model,)) as server,
        pytest.raises(error) as caught,
    ):
        policy(server, model=model).complete(TEXT)
    assert caught.value.status == recording(name)["response"]["status"]


def test_too_many_images_stops_the_episode_cleanly_with_a_named_reason():
    task = Task("t", "q", (Image.from_png(_png(), "input:0"),), "4")
    with ReplayServer([served("08")], model_names=("tiny",)) as server:
        trajectory = run_episode(policy(server), task, sandbox=None)  # type: ignore[arg-type]
    assert trajectory.stop_reason is StopReason.IMAGE_LIMIT and trajectory.turns == ()
    assert any(k == "error" and "At most 8 image(s)" in v for k, v in trajectory.metadata)


def test_models_list_and_wrong_path():
    models = recording("13")["response"]
    with ReplayServer([], model_names=("tiny",)) as server:
        assert policy(server).list_models() == ("tiny",)
        wrong = OpenAIChatPolicy(
            server.url.replace("/v1", "/v2"), "tiny", retry=RetrySettings(max_retries=0)
        )
        with pytest.raises(PolicyHTTPError, match="OpenAI-compatible /v1 endpoint"):
            wrong.complete(TEXT)
    assert [m["id"] for m in models["body"]["data"]] == ["tiny"]
    assert recording("14")["response"]["body"] == {"detail": "Not Found"}


def test_the_stand_in_server_answers_in_vllms_shapes():
    """ReplayServer's bodies have the keys real vLLM 0.32 sent (recordings 04, 08, 14)."""
    import httpx

    with ReplayServer(
        [
            ServerReply("hi", token_ids=(1, 2), logprobs=(-0.1, -0.2)),
            ServerReply(status=400, error="At most 8 image(s) may be provided in one prompt."),
        ],
        model_names=("tiny",),
    ) as server:
        ok = httpx.post(
            f"{server.url}/chat/completions", json={"model": "tiny", "messages": []}
        ).json()
        bad = httpx.post(
            f"{server.url}/chat/completions", json={"model": "tiny", "messages": []}
        ).json()
        missing = httpx.get(f"{server.url}/nothing").json()
    real_ok = recording("04")["response"]["body"]
    assert set(ok) == set(real_ok) - {
        "prompt_text",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    }
    assert set(ok["choices"][0]) == set(real_ok["choices"][0])
    assert set(ok["choices"][0]["message"]) == set(real_ok["choices"][0]["message"])
    assert set(ok["usage"]) == set(real_ok["usage"])
    assert set(ok["choices"][0]["logprobs"]["content"][0]) == set(
        real_ok["choices"][0]["logprobs"]["content"][0]
    )
    assert isinstance(ok["choices"][0]["logprobs"]["content"][0]["bytes"], list)
    assert (
        set(bad["error"]) == set(recording("08")["response"]["body"]["error"])
        and bad["error"]["type"] == "BadRequestError"
    )
    assert missing == recording("14")["response"]["body"]


def _png() -> bytes:
    import io

    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.new("RGB", (32, 32), (10, 20, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_per_conversation_image_cap_counts_the_tasks_own_images():
    """A 1-image task with cap 3 shows at most 2 feedback images: the server never sees a 4th."""
    from codedance.policy.base import Completion
    from codedance.prompts import FeedbackLimits
    from codedance.rollout import Episode, EpisodeConfig
    from codedance.types import ExecResult, ExecStatus

    task = Task("t", "q", (Image.from_png(_png(), "input:0"),), "4")
    episode = Episode(
        task,
        EpisodeConfig(feedback=FeedbackLimits(max_images_per_turn=4, max_images_per_trajectory=3)),
    )
    crops = tuple(Image.from_png(_png(), f"turn:1:{k}") for k in range(4))
    assert episode.on_completion(Completion("<code>\n```python\nshow()\n```\n</code>")) is not None
    episode.on_result(ExecResult(ExecStatus.OK, images=crops))
    sent = sum(1 for m in episode.messages for p in m.parts if isinstance(p, Image))
    assert sent == 3 and "more image(s) not shown" in episode.messages[-1].parts[-1]
