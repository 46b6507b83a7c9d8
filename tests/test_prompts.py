"""Prompt profiles, feedback rendering and image sizing."""

from __future__ import annotations

import dataclasses
import io
import math

import pytest
from PIL import Image as PILImage

from codedance.errors import SettingsError
from codedance.prompts import (
    IMAGE_PLACEHOLDER,
    PAPER,
    RELEASE,
    RELEASE_EVAL,
    FeedbackLimits,
    VisionLimits,
    conversation,
    fit_image,
    get_profile,
    image_from_bytes,
    load_profiles,
    prompt_messages,
    render_feedback,
    smart_resize,
    with_turn_limit,
)
from codedance.types import ExecError, ExecResult, ExecStatus, Image, StopReason, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")


def png(width: int, height: int, mode: str = "RGB") -> Image:
    return Image.from_pil(PILImage.new(mode, (width, height)), origin="test")


def ok(**kwargs: object) -> ExecResult:
    return ExecResult(status=ExecStatus.OK, **kwargs)  # type: ignore[arg-type]


def test_release_prompt_names_the_preloaded_image_and_table_10_instruction() -> None:
    system, user = prompt_messages("<image>How many cats?", (png(28, 28),), RELEASE)
    assert (
        system.role == "system"
        and "`input_image`" in system.text
        and "'input_image.jpg'" in system.text
    )
    assert isinstance(user.parts[0], Image) and user.images == (user.parts[0],)
    assert user.text.startswith("How many cats?\nThink step-by-step within <think></think>.")
    assert "<answer></answer>" in user.text and "<image>" not in user.text


def test_paper_prompt_has_no_system_and_question_prefix() -> None:
    messages = prompt_messages("Q?", (), PAPER)
    assert len(messages) == 1 and messages[0].text.startswith("Question: Q?\n\nThink step-by-step")


def test_success_feedback_in_each_profile() -> None:
    result = ok(stdout="42\n", stderr="warn\n")
    release = render_feedback(result, RELEASE).text
    assert release.startswith("<tool_response>\nCode execution successful, output:\n42")
    assert "Stderr output:\n```\nwarn\n```" in release
    assert "Think with the tool's result" in release and release.endswith("</tool_response>")
    assert render_feedback(result, RELEASE_EVAL).text.startswith("<tool_response>Output:\n42")
    paper = render_feedback(result, PAPER).text
    assert paper.startswith("<interpreter>\n42") and paper.endswith("</interpreter>")


def test_no_output_and_executed_nothing() -> None:
    # the release never shows its "No explicit output" text (unreachable): only the reminder
    silent = render_feedback(ok(), RELEASE).text
    assert "No explicit output" not in silent and "Think with the tool's result" in silent
    assert "No explicit output" in render_feedback(ok(), PAPER).text
    text = render_feedback(ok(executed_nothing=True), RELEASE).text
    assert "no statements" in text and "No explicit output" not in text


def test_long_output_keeps_head_and_tail_and_marks_the_cut() -> None:
    stdout = "HEAD" + "x" * 10_000 + "TAIL"
    text = render_feedback(ok(stdout=stdout), PAPER, FeedbackLimits(max_stdout_chars=100)).text
    assert "HEAD" in text and "TAIL" in text and "characters cut" in text
    assert len(text) < 300


def test_error_feedback_has_type_message_last_frames_and_rollback() -> None:
    frames = tuple((n, f"line_{n}()") for n in range(1, 6))
    error = ExecError(type="ZeroDivisionError", message="division by zero", frames=frames)
    result = ExecResult(status=ExecStatus.ERROR, stdout="partial", error=error, rolled_back=True)
    text = render_feedback(result, RELEASE, FeedbackLimits(max_frames=2)).text
    assert "Output before error:\npartial" in text
    assert "--- Execution Error (ZeroDivisionError) ---\ndivision by zero" in text
    assert "line 4: line_4()" in text and "line 5: line_5()" in text and "line_3()" not in text
    assert "Think with the tool's result" not in text
    said = dataclasses.replace(RELEASE, rolled_back="State restored.")
    assert "State restored." in render_feedback(result, said).text


@pytest.mark.parametrize(
    "status, name",
    [
        (ExecStatus.TIMEOUT, "TimeoutError"),
        (ExecStatus.CRASHED, "ProcessCrashed"),
        (ExecStatus.OOM, "MemoryError"),
    ],
)
def test_failures_without_exception_name_the_status(status: ExecStatus, name: str) -> None:
    text = render_feedback(ExecResult(status=status, notes=("killed at 15 s",)), PAPER).text
    assert f"({name})" in text and "killed at 15 s" in text


def test_images_are_placed_resized_and_budgeted() -> None:
    images = tuple(png(100, 50) for _ in range(5))
    limits = FeedbackLimits(max_images_per_turn=3, max_images_per_trajectory=10)
    fb = render_feedback(ok(images=images), RELEASE, limits, images_so_far=0, turn=2)
    assert len(fb.images) == 3 and fb.dropped_images == 2
    assert fb.text.count(IMAGE_PLACEHOLDER) == 3 and fb.text.count("Output image:") == 3
    assert "2 more image(s) not shown" in fb.text
    assert [i.origin for i in fb.images] == ["turn:2:0", "turn:2:1", "turn:2:2"]
    assert all(i.width % 28 == 0 and i.height % 28 == 0 for i in fb.images)
    late = render_feedback(ok(images=images), RELEASE, limits, images_so_far=9)
    assert len(late.images) == 1


def test_undecodable_image_is_dropped_with_a_note() -> None:
    broken = Image(png=b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, origin="x", width=1, height=1)
    fb = render_feedback(ok(images=(broken, png(56, 56))), PAPER)
    assert len(fb.images) == 1 and "dropped" in fb.text and "cannot be decoded" in fb.text


def test_literal_placeholder_in_output_cannot_fake_an_image() -> None:
    fb = render_feedback(ok(stdout="look: <image>"), PAPER)
    assert fb.text.count(IMAGE_PLACEHOLDER) == 0 and "<image >" in fb.text


def test_turn_limit_text_follows_the_feedback() -> None:
    fb = with_turn_limit(render_feedback(ok(stdout="1"), RELEASE), RELEASE)
    assert fb.text.index("</tool_response>") < fb.text.index("Turn limit reached.")


def _release_smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """qwen-vl-utils' rule as written there, to compare against."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@pytest.mark.parametrize(
    "size", [(1, 1), (27, 29), (480, 640), (1080, 1920), (4000, 6000), (33, 3000)]
)
def test_smart_resize_matches_qwen_vl_utils(size: tuple[int, int]) -> None:
    limits = VisionLimits(min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    h, w = smart_resize(*size, limits)
    assert (h, w) == _release_smart_resize(*size, 28, limits.min_pixels, limits.max_pixels)
    assert h % 28 == 0 and w % 28 == 0 and limits.min_pixels <= h * w <= limits.max_pixels


def test_extreme_aspect_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2100)


def test_fit_image_is_idempotent_and_flattens_transparency() -> None:
    rgba = Image.from_pil(PILImage.new("RGBA", (50, 30), (0, 0, 0, 0)))
    fitted = fit_image(rgba)
    assert fitted.size == (84, 56)  # upscaled to reach min_pixels = 4 * 28 * 28
    assert fitted.to_pil().mode == "RGB" and fitted.to_pil().getpixel((0, 0)) == (255, 255, 255)
    assert fit_image(fitted) is fitted


def test_fit_image_reuses_its_result_for_equal_bytes_only() -> None:
    pil = PILImage.new("RGB", (301, 199), (10, 20, 30))
    a, b = Image.from_pil(pil, origin="input:0"), Image.from_pil(pil, origin="input:0")
    assert a is not b and fit_image(a) is fit_image(b)  # G rollouts of one task: one resize
    assert fit_image(a).size == (308, 196)
    other = fit_image(
        Image.from_pil(PILImage.new("RGB", (301, 199), (10, 20, 31)), origin="input:0")
    )
    assert other is not fit_image(a) and other.to_pil().getpixel((0, 0)) == (10, 20, 31)
    assert fit_image(a, VisionLimits(max_pixels=50 * 28 * 28)).size == (224, 140)
    assert fit_image(Image.from_pil(pil, origin="input:1")).origin == "input:1"
    for _ in range(2):  # a failure is not kept: it raises every time
        with pytest.raises(ValueError, match="cannot be decoded"):
            fit_image(Image(png=b"garbage", origin="bad"))


def test_image_from_bytes_reads_jpeg_and_refuses_garbage() -> None:
    buffer = io.BytesIO()
    PILImage.new("RGB", (30, 20), "red").save(buffer, format="JPEG")
    image = image_from_bytes(buffer.getvalue(), origin="input:0")
    assert image.png.startswith(b"\x89PNG") and image.size == (30, 20)
    with pytest.raises(ValueError, match="cannot be decoded"):
        image_from_bytes(b"not an image", origin="bad.jpg")


def test_user_profiles_from_yaml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "profiles.yaml"
    path.write_text(
        "terse:\n  base: paper\n  feedback_open: '<obs>'\n  feedback_close: '</obs>'\nterser:\n  "
        "base: terse\n  show_frames: false\n"
    )
    profiles = load_profiles(path)
    assert (
        profiles["terser"].feedback_open == "<obs>"
        and profiles["terser"].instruction == PAPER.instruction
    )
    assert get_profile("terse", path).system == "" and get_profile("release") is RELEASE
    path.write_text("bad:\n  feedbak_open: x\n")
    with pytest.raises(ValueError, match="feedbak_open"):
        load_profiles(path)
    with pytest.raises(SettingsError, match="available"):
        get_profile("nope")


def test_conversation_rebuilds_what_the_model_saw() -> None:
    prompt = prompt_messages("Q", (png(28, 28),), PAPER)
    fb = render_feedback(ok(stdout="x", images=(png(56, 56),)), PAPER)
    turn = Turn(
        text="<think>a</think><code>```python\nx\n```</code>",
        feedback_text=fb.text,
        feedback_images=fb.images,
    )
    final = Turn(text="<think>b</think><answer>1</answer>")
    trajectory = Trajectory(
        task_id="t", turns=(turn, final), stop_reason=StopReason.ANSWERED, prompt=prompt
    )
    messages = conversation(trajectory)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2].images == fb.images and IMAGE_PLACEHOLDER not in messages[2].text
    assert messages[2].text.startswith("<interpreter>\nx\nOutput image:\n")
