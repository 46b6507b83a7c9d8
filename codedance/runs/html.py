"""The one trajectory renderer: a `Trajectory` as HTML, for the demo report, the eval viewer and
``codedance solve``.

`trajectory_html(trajectory, image_src, turn_notes=...)` returns the conversation exactly as the
model saw it: the prompt messages (system, images, question), then per assistant turn its raw
text, the sandbox's status and time (and the error, or "not run: turn limit" for code the loop did
not run), and the feedback with its images in place; ``turn_notes[m]`` is appended to turn m's
heading (the demo shows R_turn there). ``image_src(image)`` gives each image's ``src``: a path
relative to the page (`image_file`) or a data URL. `STYLE` is the stylesheet the pages share.
Text is always escaped. Not handled: very long runs on one page (callers paginate).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from codedance.prompts import split_placeholders
from codedance.types import Image, StopReason, Trajectory

STYLE = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem}
.msg{border-left:4px solid #999;margin:.8rem 0;padding:.2rem 1rem;background:#fafafa;
overflow:hidden}
.user{border-color:#2a7ae2}.assistant{border-color:#2ca02c}.system{border-color:#888}
.exec{border-color:#9467bd}
.role{font-weight:bold;font-size:.85rem;color:#555;display:block}
pre{white-space:pre-wrap;word-break:break-word;margin:.4rem 0}
img{max-width:100%;border:1px solid #ccc;display:block}
img.thumb{max-width:360px}table{border-collapse:collapse}
td,th{border:1px solid #ddd;padding:.2rem .5rem;font-size:.9rem}
.ok{color:#2ca02c}.bad{color:#d62728}.na{color:#888}
details{margin:6px 0;border:1px solid #ddd;padding:4px 8px}"""


def image_file(image: Image, prefix: str = "images/") -> str:
    """The ``src`` of an image in a run's image store, relative to the page (``prefix``)."""
    return f"{prefix}{image.sha256}.png"


def _parts(parts: Sequence[str | Image], image_src: Callable[[Image], str]) -> str:
    return "".join(
        f"<pre>{html.escape(p)}</pre>"
        if isinstance(p, str)
        else f'<img src="{html.escape(image_src(p))}" alt="{html.escape(p.origin)}">'
        for p in parts
    )


def _message(role: str, title: str, body: str) -> str:
    return f'<div class="msg {role}"><span class="role">{html.escape(title)}</span>{body}</div>'


def trajectory_html(
    trajectory: Trajectory, image_src: Callable[[Image], str], turn_notes: Sequence[str] = ()
) -> str:
    """The conversation of `trajectory` as HTML (see the module docstring).

    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> failed = Turn("<code>x</code>", code="x", result=ExecResult(ExecStatus.ERROR))
    >>> t = Trajectory("q", (failed,), StopReason.MAX_TURNS)
    >>> "sandbox: error" in trajectory_html(t, lambda image: "")
    True
    """
    rows = [_message(m.role, m.role, _parts(m.parts, image_src)) for m in trajectory.prompt]
    last = len(trajectory.turns) - 1
    for m, turn in enumerate(trajectory.turns):
        note = f" · {turn_notes[m]}" if m < len(turn_notes) and turn_notes[m] else ""
        rows.append(
            _message(
                "assistant",
                f"assistant, turn {m + 1}{note}",
                f"<pre>{html.escape(turn.text)}</pre>",
            )
        )
        r = turn.result
        if r is not None:
            error = (
                f"<pre>{html.escape(f'{r.error.type}: {r.error.message}')}</pre>" if r.error else ""
            )
            css = "ok" if r.ok and not r.executed_nothing else "bad"
            rows.append(
                _message(
                    "exec",
                    "",
                    f'<span class="{css}">sandbox: {r.status.value} in {r.duration_s:.2f}s'
                    f"{' (ran nothing)' if r.executed_nothing else ''}</span>{error}",
                )
            )
        elif turn.code and m == last and trajectory.stop_reason is StopReason.MAX_TURNS:
            rows.append(_message("exec", "", '<span class="na">code not run: turn limit</span>'))
        if turn.feedback_text or turn.feedback_images:
            parts = split_placeholders(turn.feedback_text, turn.feedback_images)
            rows.append(_message("user", "feedback", _parts(parts, image_src)))
    return "".join(rows)


def conversation_page(
    trajectory: Trajectory,
    image_src: Callable[[Image], str],
    title: str,
    head: str = "",
    turn_notes: Sequence[str] = (),
) -> str:
    """A standalone page: ``title``, the ``head`` HTML (a summary), then `trajectory_html`."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{head}"
        f"{trajectory_html(trajectory, image_src, turn_notes)}</body></html>"
    )
