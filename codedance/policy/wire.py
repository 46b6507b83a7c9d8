"""OpenAI chat wire format for `Message`s: images as base64 PNG data URLs.

Only the HTTP backend uses this. Encoding is cached per message object (a conversation resends
every earlier message each turn, so each image is base64-encoded once, not once per turn); the
cache holds the last 4096 messages, and at most 64 MiB of their image data URLs (a long run of
large images would otherwise keep gigabytes), and checks identity, so a new message is never
confused with an old one that had the same ``id``.
"""

from __future__ import annotations

import base64
from collections import OrderedDict

from codedance.types import Image, Message

_CACHE: OrderedDict[int, tuple[Message, dict[str, object], int]] = OrderedDict()
_CACHE_SIZE = 4096
_CACHE_BYTES = 64 << 20
_cached_bytes = 0


def data_url(image: Image) -> str:
    """``data:image/png;base64,...`` for `image`.

    >>> data_url(Image(png=b"\\x89PNG"))
    'data:image/png;base64,iVBORw=='
    """
    return "data:image/png;base64," + base64.b64encode(image.png).decode("ascii")


def _encode(message: Message) -> dict[str, object]:
    if message.role in ("system", "assistant") and all(isinstance(p, str) for p in message.parts):
        return {"role": message.role, "content": message.text}
    content: list[dict[str, object]] = []
    for part in message.parts:
        if isinstance(part, Image):
            content.append({"type": "image_url", "image_url": {"url": data_url(part)}})
        elif part:
            content.append({"type": "text", "text": part})
    return {"role": message.role, "content": content}


def message_json(message: Message) -> dict[str, object]:
    """The wire dict for one message (shared between calls; do not mutate it)."""
    global _cached_bytes
    key = id(message)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is message:
        _CACHE.move_to_end(key)
        return hit[1]
    encoded = _encode(message)
    size = (
        sum(
            len(p["image_url"]["url"])
            for p in encoded["content"]
            if isinstance(p, dict) and "image_url" in p
        )
        if isinstance(encoded["content"], list)
        else 0
    )
    old = _CACHE.pop(key, None)
    _cached_bytes += size - (old[2] if old else 0)
    _CACHE[key] = (message, encoded, size)
    while len(_CACHE) > _CACHE_SIZE or (_cached_bytes > _CACHE_BYTES and len(_CACHE) > 1):
        _cached_bytes -= _CACHE.popitem(last=False)[1][2]
    return encoded
