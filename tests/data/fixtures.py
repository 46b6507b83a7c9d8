"""Parquet fixtures in exactly the released datasets' schemas (from their cards), with rows that
map and rows that must be skipped, plus the facts the tests check them against."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage
from PIL import ImageDraw

from codedance.prompts.profiles import RELEASE_INSTRUCTION, RELEASE_REMINDER, RELEASE_SYSTEM

pytestmark = pytest.mark.tier("integration")

SFT_SCHEMA = pa.schema(
    [
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("images", pa.list_(pa.binary())),
    ]
)
RL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("messages", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("images", pa.list_(pa.binary())),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("answer", pa.string()),
                    (
                        "detected_objects",
                        pa.struct(
                            [
                                ("label", pa.string()),
                                (
                                    "point",
                                    pa.struct(
                                        [
                                            ("x", pa.list_(pa.float64())),
                                            ("y", pa.list_(pa.float64())),
                                        ]
                                    ),
                                ),
                            ]
                        ),
                    ),
                    ("index", pa.int64()),
                    ("need_tools_kwargs", pa.bool_()),
                    ("question", pa.string()),
                    ("split", pa.string()),
                    (
                        "tools_kwargs",
                        pa.struct(
                            [
                                (
                                    "execute_python_code",
                                    pa.struct(
                                        [
                                            (
                                                "create_kwargs",
                                                pa.struct(
                                                    [
                                                        (
                                                            "image",
                                                            pa.struct(
                                                                [
                                                                    ("bytes", pa.binary()),
                                                                    ("path", pa.string()),
                                                                ]
                                                            ),
                                                        ),
                                                    ]
                                                ),
                                            )
                                        ]
                                    ),
                                )
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)


def picture(size: tuple[int, int] = (64, 48), fmt: str = "PNG", seed: int = 0) -> bytes:
    image = PILImage.new("RGB", size, (240, 240, 230))
    draw = ImageDraw.Draw(image)
    draw.rectangle((8 + seed, 6, 30 + seed, 30), fill=(200, 30, 30))
    draw.ellipse((36, 10, 58, 40), fill=(30, 60, 200))
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def png_of(pil: PILImage.Image) -> bytes:
    buffer = io.BytesIO()
    pil.save(buffer, format="PNG")
    return buffer.getvalue()


def code(body: str) -> str:
    return f"<think>let me check</think>\n<code>\n```python\n{body}\n```\n</code>"


def tool_call(body: str) -> str:
    call = json.dumps({"name": "execute_python_code", "arguments": {"code": body}})
    return f"<think>crop it</think>\n<tool_call>\n{call}\n</tool_call>"


def response(text: str) -> str:
    return f"<tool_response>\n{text}{RELEASE_REMINDER}\n</tool_response>"


ANSWER = "<think>done</think>\n<answer>64x48</answer>"
USER = "<image>What is the size of the image?\n" + RELEASE_INSTRUCTION
SIZE_OK = "Code execution successful, output:\n(64, 48)"


def sft_rows() -> tuple[list[dict], dict]:
    """(rows, expectations): each row's fate by index."""
    png, jpeg = picture(), picture(fmt="JPEG", seed=3)
    crop = png_of(PILImage.open(io.BytesIO(jpeg)).convert("RGB").crop((0, 0, 32, 24)))
    system = {"role": "system", "content": RELEASE_SYSTEM}
    user = {"role": "user", "content": USER}
    rows = [
        # 0: <code> form, feedback as a user <tool_response> block: re-runs to the same text
        {
            "messages": [
                system,
                user,
                {"role": "assistant", "content": code("print(input_image.size)")},
                {"role": "user", "content": response(SIZE_OK)},
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
        # 1: hermes tool call, a tool message with an output image; JPEG input
        {
            "messages": [
                system,
                user,
                {"role": "assistant", "content": tool_call("input_image.crop((0, 0, 32, 24))")},
                {"role": "tool", "content": "Output image:\n<image>" + RELEASE_REMINDER},
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [jpeg, crop],
        },
        # 2: broken code, recorded as the release's tool words a failure
        {
            "messages": [
                system,
                user,
                {"role": "assistant", "content": code("print(input_image.size")},
                {
                    "role": "user",
                    "content": "<tool_response>\n--- Execution Error (Error) ---\n"
                    "SyntaxError: '(' was never closed (line 1)\n</tool_response>",
                },
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
        # 3: the recorded output is not what the code prints
        {
            "messages": [
                system,
                user,
                {"role": "assistant", "content": code("print(input_image.size)")},
                {
                    "role": "user",
                    "content": response("Code execution successful, output:\n(10, 10)"),
                },
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
        # 4: an image placeholder and no images at all
        {"messages": [user, {"role": "assistant", "content": ANSWER}], "images": []},
        # 5: more placeholders than images
        {
            "messages": [
                {"role": "user", "content": "<image><image>Compare."},
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
        # 6: a tool call that never got a response
        {
            "messages": [
                user,
                {"role": "assistant", "content": code("print(1)")},
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
        # 7: image bytes that do not decode
        {"messages": [user, {"role": "assistant", "content": ANSWER}], "images": [b"not an image"]},
        # 8: ms-swift agent roles, no placeholder (the image goes before the first user text)
        {
            "messages": [
                {"role": "user", "content": "What is the size of the image?"},
                {"role": "assistant", "content": "<think>measure</think>"},
                {
                    "role": "tool_call",
                    "content": json.dumps(
                        {
                            "name": "execute_python_code",
                            "arguments": {"code": "print(input_image.size)"},
                        }
                    ),
                },
                {"role": "tool_response", "content": SIZE_OK},
                {"role": "assistant", "content": ANSWER},
            ],
            "images": [png],
        },
    ]
    expect = {
        "imported": [0, 1, 2, 3, 8],
        "skipped": {
            4: "more placeholders than images",
            5: "more placeholders than images",
            6: "tool call without a response",
            7: "image does not decode",
        },
        "verify": {0: "faithful", 1: "faithful", 2: "faithful", 3: "diverged", 8: "faithful"},
        "steps": {
            0: "text_equal",
            1: "images_equal",
            2: "both_fail",
            3: "diverged",
            8: "text_equal",
        },
        "crop": crop,
    }
    return rows, expect


def write(rows: list[dict], schema: pa.Schema, path, row_group_size: int = 4):  # type: ignore[no-untyped-def]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=row_group_size)
    return path


RL_SYSTEM = "You are a helpful assistant. Use the `execute_python_code` tool when it helps."


CAT = {"label": "cat", "point": {"x": [1.0], "y": [2.0]}}


def rl_row(
    source: str,
    ability: str,
    question: str,
    gold: str,
    *,
    images: list[bytes] | None = None,
    tool_image: dict | None = None,
    extra_question: str | None = None,
    index: int = 0,
    objects: dict | None = CAT,
) -> dict:
    return {
        "data_source": source,
        "messages": [
            {"content": RL_SYSTEM, "role": "system"},
            {
                "content": "<image>" * len(images or [b""]) + question + "\n" + RELEASE_INSTRUCTION,
                "role": "user",
            },
        ],
        "images": images or [],
        "ability": ability,
        "reward_model": {"ground_truth": gold, "style": "rule"},
        "extra_info": {
            "answer": gold,
            "detected_objects": objects,
            "index": index,
            "need_tools_kwargs": True,
            "question": question if extra_question is None else extra_question,
            "split": "train",
            "tools_kwargs": {"execute_python_code": {"create_kwargs": {"image": tool_image}}},
        },
    }


def rl_rows() -> tuple[list[dict], dict]:
    png = picture()
    rows = [
        rl_row(
            "thinklite_eureka",
            "math",
            "What is half of one?",
            "\\frac{1}{2}",
            images=[png],
            tool_image={"bytes": png, "path": None},
            index=0,
        ),
        rl_row(
            "pixmo",
            "counting",
            "How many shapes are there?",
            "2",
            images=[],
            tool_image={"bytes": picture(seed=5), "path": "img/5.jpg"},
            index=1,
        ),
        rl_row(
            "vstar",
            "vqa",
            "What colour is the circle?\n(A) red\n(B) blue",
            "(B)",
            images=[png],
            index=2,
        ),
        rl_row(
            "chart",
            "chart",
            "What is the value of the bar?",
            "23.5",
            images=[png],
            index=3,
            objects={"label": "bar", "point": {"x": [10.5, 20.0], "y": [5.0, 6.0]}},
        ),
        rl_row(
            "vl_agent",
            "vqa",
            "What is in the picture?",
            "a red square",
            images=[png],
            index=4,
            objects=None,
        ),
        rl_row("vl_agent", "vqa", "No picture here?", "yes", images=[], tool_image=None, index=5),
        rl_row("vl_agent", "vqa", "What is it?", "", images=[png], index=6),
        rl_row(
            "vl_agent",
            "vqa",
            "Where is it?",
            "left",
            images=[],
            tool_image={"bytes": None, "path": "/mnt/their/disk/7.jpg"},
            index=7,
        ),
        rl_row(
            "vl_agent",
            "vqa",
            "Which shape is red?",
            "the square",
            images=[png],
            extra_question="",
            index=8,
        ),
    ]
    expect = {
        "kinds": {
            0: ("math", "math"),
            1: ("count", "general"),
            2: ("choice", "general"),
            3: ("relaxed", "general"),
            4: ("text", "general"),
            8: ("text", "general"),
        },
        "skipped": {5: "no image", 6: "no ground truth", 7: "image only by a path missing here"},
        "question_8": "Which shape is red?",
        "objects": {
            0: (("detected_label", "cat"), ("detected_points", "[[1.0, 2.0]]")),
            3: (("detected_label", "bar"), ("detected_points", "[[10.5, 5.0], [20.0, 6.0]]")),
            4: (),
        },
    }
    return rows, expect
