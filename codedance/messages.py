"""Text for people from text of unknown length: `shorten` cuts at a word, never inside one, and
`error_text` reads a server's JSON error body down to its message, so that a summary is never
cut mid-word or mid-JSON. Only the standard library is imported here.

    >>> shorten("connection refused by the server at http://h:8000/v1", 30)
    'connection refused by the …'
    >>> error_text('{"error": {"message": "server is shutting down", "type": "Unavailable"}}')
    'server is shutting down'
"""

from __future__ import annotations

import json
import textwrap


def shorten(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, cut between words (a word longer than
    ``width``, such as a URL, is cut with the marker)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    cut = textwrap.shorten(flat, width, placeholder=" …")
    return cut if cut != "…" and cut.strip() else flat[: max(0, width - 1)] + "…"


def error_text(body: str, width: int = 300) -> str:
    """The message of an error body: OpenAI's ``{"error": {"message": ...}}``, FastAPI's
    ``{"detail": ...}``, a bare ``{"message": ...}``, else the body itself; `shorten`ed."""
    try:
        data = json.loads(body)
    except ValueError:
        return shorten(body, width)
    error = data.get("error") if isinstance(data, dict) else None
    for value in (
        (error or {}).get("message") if isinstance(error, dict) else error,
        data.get("message") if isinstance(data, dict) else None,
        data.get("detail") if isinstance(data, dict) else None,
    ):
        if isinstance(value, str) and value.strip():
            return shorten(value, width)
    return shorten(body, width)
