"""Show one trajectory: readable in a terminal (rich), and as a self-contained HTML page.

The terminal view prints each turn's think, code, the sandbox output and where each image was
saved; the HTML page has every message in order with the images inline (data URLs), so it opens
anywhere without the image files. Both show exactly the trajectory's text (escaped in HTML).
"""

from __future__ import annotations

import html
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax

from codedance.policy.wire import data_url
from codedance.prompts import conversation
from codedance.types import Image, Trajectory


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


_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
.msg{border-left:4px solid #999;margin:1rem 0;padding:.25rem 1rem;background:#fafafa}
.system{border-color:#888}.user{border-color:#2a7ae2}.assistant{border-color:#2ca02c}
pre{white-space:pre-wrap;word-break:break-word;margin:.5rem 0}img{max-width:100%;border:1px solid #ccc}
.role{font-weight:bold;text-transform:uppercase;font-size:.8rem;color:#555}"""


def _part_html(part: str | Image) -> str:
    if isinstance(part, Image):
        return f'<img alt="{html.escape(part.origin)}" src="{data_url(part)}"><br>'
    return f"<pre>{html.escape(part)}</pre>"


def render_html(trajectory: Trajectory, title: str = "") -> str:
    """A standalone HTML page of the whole conversation."""
    rows = []
    for message in conversation(trajectory):
        parts = "".join(_part_html(p) for p in message.parts)
        rows.append(f'<div class="msg {message.role}"><div class="role">{message.role}</div>{parts}</div>')
    meta = ", ".join(f"{html.escape(k)}={html.escape(v)}" for k, v in trajectory.metadata)
    head = html.escape(title or trajectory.task_id)
    summary = (
        f"<p>stop reason: <b>{trajectory.stop_reason.value}</b>; answer: <b>{html.escape(str(trajectory.answer))}</b>;"
        f" turns: {len(trajectory.turns)}; tool calls: {len(trajectory.tool_calls)}"
        f" ({sum(r.ok for r in trajectory.tool_calls)} ok); {meta}</p>"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{head}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{head}</h1>{summary}{''.join(rows)}</body></html>"
    )
