"""Show one trajectory: readable in a terminal (rich), and as a self-contained HTML page.

The terminal view prints each turn (as it ends, `print_turn`): think, code, the sandbox output and
where each image was saved; the HTML page (the one renderer, `codedance.runs.html`) has every
message in order with the images inline (data URLs), so it opens anywhere without the image files.
Both show exactly the trajectory's text (escaped in HTML).
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from codedance.cli.console import untrusted
from codedance.policy.wire import data_url
from codedance.runs.html import conversation_page
from codedance.types import Message, Trajectory, Turn


def save_input_images(trajectory_prompt: tuple[Message, ...], out_dir: Path) -> dict[int, Path]:
    """Write the task's images as ``input_<k>.png``; returns id(image) -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = [image for message in trajectory_prompt for image in message.images]
    return {
        id(image): _write(image.png, out_dir / f"input_{k}.png") for k, image in enumerate(images)
    }


def save_turn_images(turn: Turn, number: int, out_dir: Path) -> dict[int, Path]:
    """Write one turn's feedback images as ``turn<m>_image<k>.png``; returns id(image) -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        id(image): _write(image.png, out_dir / f"turn{number}_image{k}.png")
        for k, image in enumerate(turn.feedback_images)
    }


def _write(data: bytes, path: Path) -> Path:
    path.write_bytes(data)
    return path


def print_turn(turn: Turn, number: int, console: Console, image_paths: dict[int, Path]) -> None:
    """One turn: think, code, the sandbox's output, where each image was saved, the answer."""
    console.rule(f"turn {number}")
    # the model's words and the sandbox's output are text, never rich markup (a "[/bold]" in them
    # would raise MarkupError; "[link=...]" would draw a link the model chose:
    # tests/test_console.py)
    if turn.think:
        console.print(Panel(Text(untrusted(turn.think)), title="think", border_style="cyan"))
    if turn.code:
        console.print(
            Panel(
                Syntax(untrusted(turn.code), "python", line_numbers=True),
                title="code",
                border_style="magenta",
            )
        )
    if turn.result is not None:
        r = turn.result
        style = "green" if r.ok else "red"
        body = r.stdout.strip() or "(no output)"
        if r.error is not None:
            body += f"\n{r.error.type}: {r.error.message}"
        console.print(
            Panel(
                Text(untrusted(body)),
                title=f"{r.status.value} in {r.duration_s:.2f}s",
                border_style=style,
            )
        )
    for image in turn.feedback_images:
        console.print(f"  image {image.width}x{image.height} -> {image_paths.get(id(image), '?')}")
    if turn.feedback_has_turn_limit:
        console.print("  [yellow](turn limit message sent)[/yellow]")
    if turn.answer is not None:
        console.print(
            Panel(Text(untrusted(turn.answer)), title="answer", border_style="bold green")
        )
    if not turn.verdict.ok:
        console.print(
            f"  [yellow]format: {escape(untrusted(', '.join(turn.verdict.reasons)))}[/yellow]"
        )


def print_ending(trajectory: Trajectory, console: Console) -> None:
    console.rule(f"stop: {trajectory.stop_reason.value}")
    for key, value in trajectory.metadata:
        if key == "error":
            console.print(f"  [yellow]{escape(untrusted(value))}[/yellow]", highlight=False)
    console.print(Text(f"answer: {untrusted(repr(trajectory.answer))}"))


def render_html(trajectory: Trajectory, title: str = "") -> str:
    """A standalone HTML page of the whole conversation (`codedance.runs.html`), images inline."""
    meta = ", ".join(f"{html.escape(k)}={html.escape(v)}" for k, v in trajectory.metadata)
    summary = (
        f"<p>stop reason: <b>{trajectory.stop_reason.value}</b>; answer: "
        f"<b>{html.escape(str(trajectory.answer))}</b>; turns: {len(trajectory.turns)}; "
        "tool calls: "
        f"{trajectory.n_calls} ({trajectory.n_successful_calls} ok); {meta}</p>"
    )
    return conversation_page(trajectory, data_url, title or trajectory.task_id, summary)
