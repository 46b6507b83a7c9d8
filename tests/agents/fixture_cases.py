"""The recorded peer cases (``fixtures/<agent>.jsonl``, ``scripts/record_agent_fixtures.py``) as
codedance tasks, and requests reduced to the form the recorder stores (images as pixel hashes)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import pytest

from codedance.prompts import image_from_bytes
from codedance.types import AnswerKind, Task

pytestmark = pytest.mark.tier("unit")

FIXTURES = Path(__file__).parent / "fixtures"


def cases(agent: str) -> list[dict]:
    lines = (FIXTURES / f"{agent}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def image_bytes(case: dict) -> bytes:
    return (FIXTURES / "images" / case["image"]).read_bytes()


def task_of(case: dict, benchmark: str = "vstar") -> Task:
    """The case as a V*-style task: its image, question and lettered options."""
    choices = tuple((chr(ord("A") + k), option) for k, option in enumerate(case["options"]))
    return Task(
        id=f"{benchmark}/{case['id']}",
        question=case["question"],
        images=(image_from_bytes(image_bytes(case), origin="input:0"),),
        answer="B",
        kind=AnswerKind.CHOICE,
        choices=choices,
        metadata=(("raw_question", case["question"]),),
    )


def pixel_key(data: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        return f"{rgb.width}x{rgb.height}:{hashlib.sha256(rgb.tobytes()).hexdigest()}"


def normal(messages: list[dict]) -> list[dict]:
    """Wire messages (OpenAI chat JSON) with images as pixel keys, contents as lists of parts."""
    out = []
    for message in messages:
        content = message["content"]
        parts = [{"text": content}] if isinstance(content, str) else []
        for part in content if isinstance(content, list) else ():
            if part["type"] == "text":
                parts.append({"text": part["text"]})
            else:
                parts.append(
                    {
                        "image": pixel_key(
                            base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                        )
                    }
                )
        out.append({"role": message["role"], "parts": parts})
    return out


def deltas(requests: list[list[dict]]) -> list[list[dict]]:
    """Each request's messages beyond the previous request's."""
    out, before = [], []
    for messages in requests:
        assert messages[: len(before)] == before, "a later request rewrote earlier messages"
        out.append(messages[len(before) :])
        before = messages
    return out


def joined(messages: list[dict]) -> list[dict]:
    """Messages with adjacent text parts joined (the chat template renders them back to back)."""
    out = []
    for message in messages:
        parts: list[dict] = []
        for part in message["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            elif part.get("text") != "":
                parts.append(dict(part))
        out.append({"role": message["role"], "parts": parts})
    return out
