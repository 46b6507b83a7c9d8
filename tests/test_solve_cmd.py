"""`codedance solve` end to end: real HTTP to a replay server, the real sandbox, files written."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result
from PIL import Image as PILImage
from typer.testing import CliRunner

from codedance.cli import app as root
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.records import load_trajectories
from codedance.types import StopReason

pytestmark = pytest.mark.tier("integration")

SCRIPT = [
    (
        "<think>zoom</think>\n<code>\n```python\ncrop = input_image.crop((0, 0, 20, 20))\n"
        "crop.show()\nprint(crop.size)\n```\n</code>"
    ),
    "<think>it is red</think>\n<answer>red</answer>",
]


def solve(url: str, image: Path, question: str, out: Path | None = None) -> Result:
    """``codedance solve`` with the server, one image and the question (and ``--out``)."""
    args = ["--model", url, "--image", str(image), "--question", question]
    return CliRunner().invoke(root, ["solve", *args, *(["--out", str(out)] if out else [])])


def red_picture(path: Path) -> Path:
    PILImage.new("RGB", (80, 60), "red").save(path)
    return path


def test_solve_prints_the_episode_and_writes_html_and_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    picture = red_picture(tmp_path / "in.jpg")
    out = tmp_path / "out"
    with ReplayServer(SCRIPT, model_names=("codedance-7b",)) as server:
        result = solve(server.url, picture, "Which colour?", out)
        assert server.requests[0]["model"] == "codedance-7b"  # found through /v1/models
    assert result.exit_code == 0, result.output
    assert (
        "codedance-7b" in result.output
        and "(20, 20)" in result.output
        and "answered" in result.output
    )
    page = (out / "trajectory.html").read_text()
    assert (
        page.count("data:image/png;base64,") == 2
        and "Which colour?" in page
        and "&lt;answer&gt;red" in page
    )
    assert (out / "turn1_image0.png").exists() and (out / "input_0.png").exists()
    ((_, trajectory),) = load_trajectories(out)
    assert trajectory.stop_reason is StopReason.ANSWERED and trajectory.answer == "red"


def test_solve_reports_an_unreachable_server_and_a_bad_image(tmp_path) -> None:  # type: ignore[no-untyped-def]
    picture = red_picture(tmp_path / "in.png")
    result = solve("http://127.0.0.1:9", picture, "q", tmp_path / "o")
    assert result.exit_code == 2 and "cannot reach" in result.output
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"garbage")
    result = solve("http://127.0.0.1:9", bad, "q")
    assert result.exit_code == 2 and f"--image {bad}: not a readable image" in result.output


def test_solve_saves_the_turns_done_before_a_server_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    picture = red_picture(tmp_path / "in.png")
    out = tmp_path / "out"
    script = [SCRIPT[0], ServerReply(status=400, error="GPU fell over (scripted)")]
    with ReplayServer(script, model_names=("m",)) as server:
        result = solve(server.url, picture, "q", out)
    assert result.exit_code == 2 and "GPU fell over" in result.output
    assert result.output.index("(20, 20)") < result.output.index(
        "stop: interrupted"
    )  # turn 1 shown
    ((_, trajectory),) = load_trajectories(out)
    assert trajectory.stop_reason is StopReason.INTERRUPTED and len(trajectory.tool_calls) == 1
    assert (out / "turn1_image0.png").exists() and "GPU fell over" in (
        out / "trajectory.html"
    ).read_text()


def test_solve_settings_come_from_files_and_overrides(tmp_path) -> None:  # type: ignore[no-untyped-def]
    mine = tmp_path / "solve.yaml"
    mine.write_text("server:\n  url: http://m/v1\n  max_tokens: 4096\nepisode:\n  max_turns: 4\n")
    result = CliRunner().invoke(
        root,
        [
            "solve",
            "-c",
            str(mine),
            "episode.prompt_profile=paper",
            "--max-turns",
            "3",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    assert all(
        s in result.output
        for s in ("url: http://m/v1", "max_tokens: 4096", "max_turns: 3", "paper")
    )
    bad = CliRunner().invoke(root, ["solve", "server.colour=red"])
    assert bad.exit_code == 2 and "server.colour" in bad.output
    bad = CliRunner().invoke(root, ["solve", "--model", "http://127.0.0.1:9/v1"])
    assert bad.exit_code == 2 and "--question" in bad.output


def test_ctrl_c_keeps_the_finished_turns(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from codedance.policy.openai_chat import OpenAIChatPolicy

    real = OpenAIChatPolicy.complete
    calls = []

    def complete(self, messages):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:  # the user presses Ctrl-C while the second reply is awaited
            raise KeyboardInterrupt
        return real(self, messages)

    monkeypatch.setattr(OpenAIChatPolicy, "complete", complete)
    picture = red_picture(tmp_path / "in.png")
    out = tmp_path / "out"
    with ReplayServer(SCRIPT, model_names=("m",)) as server:
        result = solve(server.url, picture, "q", out)
    assert result.exit_code == 130 and "stop: interrupted" in result.output
    ((_, trajectory),) = load_trajectories(out)
    assert trajectory.stop_reason is StopReason.INTERRUPTED and len(trajectory.tool_calls) == 1
    assert ("error", "interrupted: KeyboardInterrupt") in trajectory.metadata


def test_solve_refuses_an_out_folder_that_holds_a_run(tmp_path):
    image = red_picture(tmp_path / "chart.png")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "trajectories.jsonl").write_text("{}\n")
    with ReplayServer(["<answer>1</answer>"]) as server:
        result = solve(server.url, image, "q", tmp_path / "s")
        assert server.requests == []
    assert result.exit_code == 2 and "already holds a solve run" in result.output
