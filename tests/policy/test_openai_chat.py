"""`OpenAIChatPolicy` over real HTTP against a local replay server (scripted replies)."""

from __future__ import annotations

import asyncio
import base64
import socket
import time

import pytest
from PIL import Image as PILImage

from codedance.policy import (
    ContextOverflowError,
    MalformedResponseError,
    ModelNotFoundError,
    OpenAIChatPolicy,
    PolicyConnectionError,
    PolicyHTTPError,
    RetrySettings,
    SamplingParams,
)
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.types import Image, Message

pytestmark = pytest.mark.tier("unit")

FAST = RetrySettings(max_retries=3, backoff_s=0.01, max_backoff_s=0.05)
IMAGE = Image.from_pil(PILImage.new("RGB", (28, 28), "blue"), origin="input:0")
CONVERSATION = (
    Message("system", ("sys",)),
    Message("user", (IMAGE, "What colour?")),
)


def policy(server: ReplayServer, **kwargs: object) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(server.url, "scripted", retry=kwargs.pop("retry", FAST), **kwargs)  # type: ignore[arg-type]


def test_request_carries_images_sampling_and_stop_strings() -> None:
    sampling = SamplingParams(
        temperature=0.7, top_p=0.9, max_tokens=64, stop=("</code>",), seed=3, logprobs=True
    )
    with ReplayServer(["<think>blue</think><answer>blue</answer>"]) as server:
        completion = policy(server, sampling=sampling).complete(CONVERSATION)
        body = server.requests[0]
    assert completion.text == "<think>blue</think><answer>blue</answer>"
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    image_part, text_part = body["messages"][1]["content"]
    assert text_part == {"type": "text", "text": "What colour?"}
    url = image_part["image_url"]["url"]
    assert (
        url.startswith("data:image/png;base64,")
        and base64.b64decode(url.split(",", 1)[1]) == IMAGE.png
    )
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.7,
        0.9,
        64,
        3,
    )
    assert body["stop"] == ["</code>"] and body["include_stop_str_in_output"] is True
    assert body["logprobs"] is True and body["return_token_ids"] is True


def test_a_continued_last_message_is_sent_for_vllm_to_continue() -> None:
    open_turn = Message("assistant", ("<code>x</code>", "<sandbox_output>", IMAGE), continued=True)
    with ReplayServer(["first", "more"]) as server:
        client = policy(server)
        client.complete(CONVERSATION)
        assert client.complete((*CONVERSATION, open_turn)).text == "more"
        first, second = server.requests
    assert "continue_final_message" not in first and "add_generation_prompt" not in first
    assert (second["continue_final_message"], second["add_generation_prompt"]) == (True, False)
    assert second["messages"][-1]["role"] == "assistant"
    assert [p["type"] for p in second["messages"][-1]["content"]] == ["text", "text", "image_url"]


def test_the_replay_server_refuses_continuing_with_a_generation_prompt_as_vllm_does() -> None:
    with ReplayServer(["x"]) as server:
        client = policy(server)
        body = {**client.request_body(CONVERSATION), "continue_final_message": True}
        assert client.send(body).text == "x"  # an absent add_generation_prompt is not set
        with pytest.raises(PolicyHTTPError, match="Cannot set both") as raised:
            client.send({**body, "add_generation_prompt": True})
    assert raised.value.status == 400 and len(server.requests) == 1


def test_plain_openai_mode_sends_no_server_extras() -> None:
    with ReplayServer(["x"]) as server:
        policy(server, server_extras=False).complete(CONVERSATION)
        assert "return_token_ids" not in server.requests[0]


def test_token_ids_logprobs_and_finish_reason_are_kept() -> None:
    reply = ServerReply(
        text="abc",
        token_ids=(5, 6, 7),
        logprobs=(-0.1, -0.2, -0.3),
        prompt_token_ids=(1, 2),
        finish_reason="length",
    )
    with ReplayServer([reply]) as server:
        completion = policy(server).complete(CONVERSATION)
    assert completion.token_ids == (5, 6, 7) and completion.logprobs == (-0.1, -0.2, -0.3)
    assert (
        completion.prompt_token_ids == (1, 2)
        and completion.truncated
        and completion.model == "scripted"
    )


def test_retries_429_and_500_then_succeeds() -> None:
    script = [
        ServerReply(status=429, error="slow down", retry_after="0"),
        ServerReply(status=500, error="boom"),
        "ok",
    ]
    with ReplayServer(script) as server:
        assert policy(server).complete(CONVERSATION).text == "ok"
        assert len(server.requests) == 3


def test_gives_up_after_max_retries_with_the_status() -> None:
    with ReplayServer([ServerReply(status=503, error="overloaded")] * 10) as server:
        with pytest.raises(PolicyHTTPError, match="503") as info:
            policy(server, retry=RetrySettings(max_retries=2, backoff_s=0.0)).complete(CONVERSATION)
        assert info.value.status == 503 and len(server.requests) == 3


def test_400_is_not_retried_and_overflow_is_recognised() -> None:
    overflow = (
        "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens."
    )
    with ReplayServer(
        [ServerReply(status=400, error=overflow), ServerReply(status=400, error="bad temperature")]
    ) as server:
        with pytest.raises(ContextOverflowError):
            policy(server).complete(CONVERSATION)
        with pytest.raises(PolicyHTTPError, match="bad temperature") as info:
            policy(server).complete(CONVERSATION)
        assert not isinstance(info.value, ContextOverflowError) and len(server.requests) == 2


def test_wrong_model_name_says_so_and_models_are_listed() -> None:
    with ReplayServer(["x"], model_names=("qwen",)) as server:
        wrong = OpenAIChatPolicy(server.url, "qwne", retry=FAST)
        with pytest.raises(ModelNotFoundError, match="qwne"):
            wrong.complete(CONVERSATION)
        assert wrong.list_models() == ("qwen",)


def test_malformed_bodies_raise_malformed_response() -> None:
    script = [ServerReply(raw=b"<html>gateway</html>"), ServerReply(raw=b'{"choices": []}')]
    with ReplayServer(script) as server:
        for _ in script:
            with pytest.raises(MalformedResponseError):
                policy(server).complete(CONVERSATION)


def test_empty_and_null_content_become_empty_text() -> None:
    with ReplayServer([ServerReply(text=None), ""]) as server:
        assert policy(server).complete(CONVERSATION).text == ""
        assert policy(server).complete(CONVERSATION).text == ""


def test_unreachable_server_raises_connection_error_after_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIChatPolicy(
        f"http://127.0.0.1:{port}", "m", retry=RetrySettings(max_retries=1, backoff_s=0.0)
    )
    with pytest.raises(PolicyConnectionError, match="cannot reach"):
        p.complete(CONVERSATION)


def test_request_timeout_is_enforced_then_retried() -> None:
    # the late reply would take 60 s: a client that waited for it could not finish within 30
    with ReplayServer([ServerReply(text="late", delay_s=60.0), "on time"]) as server:
        start = time.monotonic()
        text = policy(server, timeout_s=0.2).complete(CONVERSATION).text
        assert text == "on time" and time.monotonic() - start < 30.0


async def test_async_path_retries_and_runs_concurrently() -> None:
    arrivals: list[float] = []

    def script(body: dict) -> ServerReply:
        arrivals.append(time.monotonic())
        question = body["messages"][-1]["content"][-1]["text"]
        return ServerReply(text=f"answer to {question}", delay_s=0.5)

    with ReplayServer(script) as server:
        p = policy(server)
        conversations = [(Message("user", (f"q{i}",)),) for i in range(8)]
        results = await asyncio.gather(*(p.acomplete(c) for c in conversations))
        await p.aclose()
    assert [r.text for r in results] == [f"answer to q{i}" for i in range(8)]
    spread = max(arrivals) - min(arrivals)
    assert spread < 2.5, f"requests arrived over {spread:.2f} s: one after another takes 3.5 s"


async def test_async_retry_on_500() -> None:
    with ReplayServer([ServerReply(status=502, error="bad gateway"), "fine"]) as server:
        p = policy(server)
        assert (await p.acomplete(CONVERSATION)).text == "fine"
        await p.aclose()


def test_server_side_tool_calls_are_written_back_as_hermes_text() -> None:
    from codedance.policy.openai_chat import parse_completion

    body = {
        "model": "m",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": "<think>t</think>",
                    "tool_calls": [
                        {
                            "function": {
                                "name": "execute_python_code",
                                "arguments": '{"code": "print(1)"}',
                            }
                        }
                    ],
                },
            }
        ],
    }
    text = parse_completion(body).text
    assert text.startswith("<think>t</think>\n<tool_call>") and '"code": "print(1)"' in text
