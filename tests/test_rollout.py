"""Episodes end to end: scripted model choices, real HTTP client, real sandbox.

The model's replies are scripted (a `ReplayServer` over real HTTP, or `ScriptedPolicy`); the
snippets run in ``codedance.sandbox.Sandbox``.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image as PILImage

from codedance.policy import OpenAIChatPolicy, PolicyError, RetrySettings, ScriptedPolicy
from codedance.policy.base import Completion
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.policy.wire import message_json
from codedance.prompts import PAPER, VisionLimits, conversation
from codedance.rollout import (
    MAX_TURNS,
    CodeRunner,
    Episode,
    EpisodeConfig,
    EpisodeSettings,
    arun_episode,
    drive_episode,
    run_episode,
)
from codedance.sandbox import Sandbox
from codedance.types import AnswerKind, ExecStatus, Image, StopReason, Task

pytestmark = pytest.mark.tier("integration")

FAST = RetrySettings(max_retries=2, backoff_s=0.01)
TASK = Task(
    id="t1",
    question="How wide is the image?",
    images=(Image.from_pil(PILImage.new("RGB", (300, 200), "white"), origin="input:0"),),
    answer="308",
    kind=AnswerKind.NUMBER,
)


def code(snippet: str, think: str = "let me check") -> str:
    return f"<think>{think}</think>\n<code>\n```python\n{snippet}\n```\n</code>"


def answer(value: str) -> str:
    return f"<think>done</think>\n<answer>{value}</answer>"


def sandbox_for(task: Task, config: EpisodeConfig = EpisodeConfig()) -> Sandbox:
    return Sandbox(images=Episode(task, config).images, timeout_s=10)


def test_sandbox_satisfies_the_runner_protocol() -> None:
    with sandbox_for(TASK) as sb:
        assert isinstance(sb, CodeRunner)


def test_direct_answer_over_http() -> None:
    with ReplayServer([answer("308")]) as server, sandbox_for(TASK) as sb:
        trajectory = run_episode(OpenAIChatPolicy(server.url, "scripted", retry=FAST), TASK, sb)
    assert trajectory.stop_reason is StopReason.ANSWERED and trajectory.answer == "308"
    assert len(trajectory.turns) == 1 and trajectory.tool_calls == ()
    assert trajectory.prompt[1].images[0].size == (308, 196)  # smart-resized for the model


def test_code_then_answer_and_the_trajectory_is_what_the_server_received() -> None:
    script = [
        ServerReply(
            text=code("print(input_image.size)"), token_ids=(11, 12), logprobs=(-0.5, -0.25)
        ),
        ServerReply(text=answer("308"), token_ids=(13,), logprobs=(-0.1,)),
    ]
    with ReplayServer(script) as server, sandbox_for(TASK) as sb:
        trajectory = run_episode(OpenAIChatPolicy(server.url, "scripted", retry=FAST), TASK, sb)
        requests = server.requests
    first, last = trajectory.turns
    assert trajectory.stop_reason is StopReason.ANSWERED
    assert first.result is not None and first.result.status is ExecStatus.OK
    assert "(308, 196)" in first.result.stdout and "(308, 196)" in first.feedback_text
    assert first.feedback_text.startswith("<tool_response>")
    assert (first.token_ids, first.logprobs, last.token_ids) == ((11, 12), (-0.5, -0.25), (13,))
    # Exactness: the rebuilt conversation, minus the final answer, is the last request's messages.
    rebuilt = [message_json(m) for m in conversation(trajectory)[:-1]]
    assert requests[-1]["messages"] == rebuilt


def test_error_feedback_lets_the_model_correct_itself() -> None:
    policy = ScriptedPolicy(
        [code("x = 1"), code("x = 5\ny = x / 0"), code("print(x + 1)"), answer("2")]
    )
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(policy, TASK, sb)
    _, failed, fixed, _ = trajectory.turns
    assert failed.result is not None and failed.result.status is ExecStatus.ERROR
    assert failed.result.rolled_back and "ZeroDivisionError" in failed.feedback_text
    assert "y = x / 0" in failed.feedback_text  # the last frame of the model's own code
    assert fixed.result is not None and fixed.result.stdout.strip() == "2"  # x = 5 was rolled back
    assert [r.ok for r in trajectory.tool_calls] == [True, False, True]
    assert "ZeroDivisionError" in policy.seen[2][-1].text  # what the model was shown


def test_max_turns_injects_the_turn_limit_before_the_last_turn() -> None:
    policy = ScriptedPolicy([code(f"print({i})") for i in range(3)])
    config = EpisodeConfig(max_turns=3, profile=PAPER)
    with sandbox_for(TASK, config) as sb:
        trajectory = run_episode(policy, TASK, sb, config)
    assert trajectory.stop_reason is StopReason.MAX_TURNS and len(trajectory.turns) == 3
    assert [t.feedback_has_turn_limit for t in trajectory.turns] == [False, True, False]
    assert "Turn limit reached" in trajectory.turns[1].feedback_text
    assert trajectory.turns[2].result is None and len(trajectory.tool_calls) == 2
    assert trajectory.turns[0].feedback_text.startswith("<interpreter>")


def test_prose_reply_is_a_format_error_with_boxed_fallback() -> None:
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(ScriptedPolicy([r"<think>hm</think> it is \boxed{308}"]), TASK, sb)
    assert trajectory.stop_reason is StopReason.FORMAT_ERROR and trajectory.answer == "308"
    assert "boxed answer without answer tags" in trajectory.turns[0].verdict.reasons


def test_empty_reply_is_a_format_error() -> None:
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(ScriptedPolicy([""]), TASK, sb)
    assert trajectory.stop_reason is StopReason.FORMAT_ERROR and trajectory.answer is None


def test_truncated_reply_stops_with_max_tokens() -> None:
    cut = Completion(text="<think>a very long thought", finish_reason="length")
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(ScriptedPolicy([cut]), TASK, sb)
    assert trajectory.stop_reason is StopReason.MAX_TOKENS


def test_context_overflow_from_the_server_stops_with_max_tokens() -> None:
    overflow = ServerReply(status=400, error="This model's maximum context length is 8192 tokens.")
    with ReplayServer([code("print(1)"), overflow]) as server, sandbox_for(TASK) as sb:
        trajectory = run_episode(OpenAIChatPolicy(server.url, "scripted", retry=FAST), TASK, sb)
    assert trajectory.stop_reason is StopReason.MAX_TOKENS and len(trajectory.turns) == 1
    assert any(key == "error" and "context" in value for key, value in trajectory.metadata)


def test_a_broken_sandbox_stops_with_sandbox_error() -> None:
    sb = sandbox_for(TASK)
    sb.close()
    trajectory = run_episode(ScriptedPolicy([code("print(1)")]), TASK, sb)
    assert trajectory.stop_reason is StopReason.SANDBOX_ERROR
    assert trajectory.turns[0].result is None and trajectory.tool_calls == ()


def test_drive_episode_reports_each_turn_as_it_ends_and_keeps_them_on_a_server_error() -> None:
    script = [
        code("print(input_image.size)"),
        ServerReply(status=400, error="GPU fell over (scripted)"),
    ]
    seen: list[tuple[str | None, int]] = []
    episode = Episode(TASK)
    with ReplayServer(script) as server, sandbox_for(TASK) as sb:
        policy = OpenAIChatPolicy(server.url, "scripted", retry=FAST)

        def on_turn(turn) -> None:  # type: ignore[no-untyped-def]
            seen.append((turn.code.strip(), len(server.requests)))  # called before the next request

        with pytest.raises(PolicyError, match="GPU fell over"):
            drive_episode(episode, policy, sb, on_turn=on_turn)
    assert seen == [("print(input_image.size)", 1)]
    episode.interrupt(RuntimeError("GPU fell over"))
    trajectory = episode.trajectory()
    assert trajectory.stop_reason is StopReason.INTERRUPTED and len(trajectory.tool_calls) == 1
    assert ("error", "interrupted: RuntimeError: GPU fell over") in trajectory.metadata


def test_interrupt_keeps_the_pending_code_without_a_result_and_ignores_a_finished_episode() -> None:
    episode = Episode(TASK)
    assert episode.on_completion(Completion(text=code("print(1)"))).strip() == "print(1)"
    episode.interrupt(KeyboardInterrupt())
    (turn,) = episode.trajectory().turns
    assert (
        turn.code.strip() == "print(1)"
        and turn.result is None
        and episode.stop_reason is StopReason.INTERRUPTED
    )
    done = Episode(TASK)
    done.on_completion(Completion(text=answer("3")))
    done.interrupt(KeyboardInterrupt())
    assert done.stop_reason is StopReason.ANSWERED


def test_code_and_answer_in_one_turn_answers_without_running() -> None:
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(
            ScriptedPolicy([code("print(1)") + "<answer>3</answer>"]), TASK, sb
        )
    assert trajectory.stop_reason is StopReason.ANSWERED and trajectory.tool_calls == ()
    assert not trajectory.turns[0].verdict.ok


def test_output_images_come_back_as_feedback_images() -> None:
    snippet = "crop = input_image.crop((0, 0, 100, 100))\ncrop.show()"
    with sandbox_for(TASK) as sb:
        trajectory = run_episode(ScriptedPolicy([code(snippet), answer("x")]), TASK, sb)
    turn = trajectory.turns[0]
    assert turn.result is not None and turn.result.ok, turn.result
    assert len(turn.feedback_images) == 1 and turn.feedback_images[0].width % 28 == 0
    assert "Output image:" in turn.feedback_text


async def test_concurrent_async_episodes_over_http() -> None:
    def reply(body: dict) -> str:
        assistant_turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        question = body["messages"][1]["content"][-1]["text"].split("\n")[0]
        return code(f"print({question!r}[::-1])") if assistant_turns == 0 else answer(question)

    tasks = [
        Task(id=f"t{i}", question=f"item {i}", images=TASK.images, answer=str(i)) for i in range(6)
    ]
    with ReplayServer(reply) as server:
        policy = OpenAIChatPolicy(server.url, "scripted", retry=FAST)

        async def one(task: Task):  # type: ignore[no-untyped-def]
            with sandbox_for(task) as sb:
                return await arun_episode(policy, task, sb)

        trajectories = await asyncio.gather(*(one(t) for t in tasks))
        await policy.aclose()
    for task, trajectory in zip(tasks, trajectories):
        assert trajectory.task_id == task.id and trajectory.stop_reason is StopReason.ANSWERED
        assert trajectory.answer == task.question
        assert trajectory.turns[0].result is not None
        assert trajectory.turns[0].result.stdout.strip() == task.question[::-1]


def test_episode_methods_refuse_out_of_order_calls() -> None:
    episode = Episode(TASK)
    with pytest.raises(RuntimeError):
        episode.on_result(None)  # type: ignore[arg-type]
    assert episode.on_completion(Completion(text=code("print(1)"))) == "print(1)\n"
    with pytest.raises(RuntimeError):
        episode.on_completion(Completion(text=answer("1")))
    with pytest.raises(RuntimeError):
        episode.trajectory()


def test_one_default_per_episode_knob() -> None:
    """The settings every command takes and the episode config they make start from the same
    defaults (the paper's training budget of 6 turns, the release's 15 s per execution)."""
    assert EpisodeSettings().episode_config() == EpisodeConfig()
    assert EpisodeConfig().max_turns == MAX_TURNS == 6 and EpisodeSettings().exec_timeout_s == 15.0


def test_the_sandbox_gets_the_images_the_model_sees() -> None:
    buffer = io.BytesIO()
    PILImage.new("RGB", (600, 300), (10, 20, 30)).save(buffer, format="PNG")
    task = Task(id="t", question="q", images=(Image.from_png(buffer.getvalue()),), answer="")
    config = EpisodeConfig(vision=VisionLimits(max_pixels=112 * 56))
    images = config.images_of(task)
    assert images == Episode(task, config).images and images[0].width * images[0].height <= 112 * 56
