"""Show one trajectory: readable in a terminal (rich), and as a self-contained HTML page.

The terminal view prints each turn's think, code, the sandbox output and where each image was
saved; the HTML page (the one renderer, `codedance.runs.html`) has every message in order with
the images inline (data URLs), so it opens anywhere without the image files. Both show exactly the trajectory's text (escaped in HTML).
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax

from codedance.policy.wire import data_url
from codedance.runs.html import conversation_page
from codedance.types import Trajectory


def save_images(trajectory: Trajectory, out_dir: Path) -> dict[int, Path]:
    """Write every input and feedback image as a PNG file; returns id(image) -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[int, Path] = {}
    for message in trajectory.prompt:
        for k, image in enumerate(message.images):
            paths[id(image)] = out_dir / f"input_{k}.png"
    for m, turn in enumerate(trajectory.turns, start=1):
        for k, image in enumerate(turn.feedback_images):
            paths[id(image)] = out_dir / f"turn{m}_image{k}.png"
    images = [i for msg in trajectory.prompt for i in msg.images] + [i for t in trajectory.turns for i in t.feedback_images]
    for image in images:
        paths[id(image)].write_bytes(image.png)
    return paths


def print_trajectory(trajectory: Trajectory, console: Console, image_paths: dict[int, Path]) -> None:
    for m, turn in enumerate(trajectory.turns, start=1):
        console.rule(f"turn {m}")
        if turn.think:
            console.print(Panel(turn.think, title="think", border_style="cyan"))
        if turn.code:
            console.print(Panel(Syntax(turn.code, "python", line_numbers=True), title="code", border_style="magenta"))
        if turn.result is not None:
            r = turn.result
            style = "green" if r.ok else "red"
            body = r.stdout.strip() or "(no output)"
            if r.error is not None:
                body += f"\n{r.error.type}: {r.error.message}"
            console.print(Panel(body, title=f"{r.status.value} in {r.duration_s:.2f}s", border_style=style))
        for image in turn.feedback_images:
            console.print(f"  image {image.width}x{image.height} -> {image_paths.get(id(image), '?')}")
        if turn.feedback_has_turn_limit:
            console.print("  [yellow](turn limit message sent)[/yellow]")
        if turn.answer is not None:
            console.print(Panel(turn.answer, title="answer", border_style="bold green"))
        if not turn.verdict.ok:
            console.print(f"  [yellow]format: {', '.join(turn.verdict.reasons)}[/yellow]")
    console.rule(f"stop: {trajectory.stop_reason.value}")
    console.print(f"answer: {trajectory.answer!r}")


def render_html(trajectory: Trajectory, title: str = "") -> str:
    """A standalone HTML page of the whole conversation (`codedance.runs.html`), images inline."""
    meta = ", ".join(f"{html.escape(k)}={html.escape(v)}" for k, v in trajectory.metadata)
    summary = (f"<p>stop reason: <b>{trajectory.stop_reason.value}</b>; answer: "
               f"<b>{html.escape(str(trajectory.answer))}</b>; turns: {len(trajectory.turns)}; tool calls: "
               f"{trajectory.n_calls} ({trajectory.n_successful_calls} ok); {meta}</p>")
    return conversation_page(trajectory, data_url, title or trajectory.task_id, summary)
