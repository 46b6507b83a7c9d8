"""Turning the caller's images into read-only files in a trajectory's working directory.

Accepts file paths, PNG/JPEG/... bytes, PIL images and ``codedance.types.Image``. Bytes are
written as they are (never decoded here, outside the jail: a corrupt, enormous or non-image
input is found by the holder inside the jail, which reports it). The first image is
``input_image.jpg``, the others ``input_image_1.jpg``, ``input_image_2.jpg``, ...: the name the
authors' prompts use, whatever the format inside (PIL and OpenCV read files by their content).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Union

from codedance.errors import SettingsError
from codedance.types import Image

ImageInput = Union[str, os.PathLike, bytes, bytearray, Image, "PIL.Image.Image"]  # noqa: F821
MAX_INPUT_BYTES = 512 << 20


def input_name(index: int) -> str:
    return "input_image.jpg" if index == 0 else f"input_image_{index}.jpg"


def _as_bytes(image: ImageInput, index: int) -> bytes:
    if isinstance(image, Image):
        return image.png
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise FileNotFoundError(f"input image {index}: no such file {str(path)!r}")
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise SettingsError(f"input image {index}: {path} is over {MAX_INPUT_BYTES >> 20} MiB")
        return path.read_bytes()
    if hasattr(image, "save") and hasattr(image, "mode"):  # a PIL image, without importing PIL
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()
    raise TypeError(
        f"input image {index}: expected a path, image bytes, a PIL image or codedance.types.Image, "
        f"got {type(image).__name__}"
    )


def write_inputs(images: list[ImageInput], workdir: str) -> list[str]:
    """Write each image read-only into ``workdir``; return the file names in order."""
    names = []
    for index, image in enumerate(images):
        data = _as_bytes(image, index)
        if not data:
            raise SettingsError(f"input image {index} is empty")
        if len(data) > MAX_INPUT_BYTES:
            raise SettingsError(f"input image {index} is over {MAX_INPUT_BYTES >> 20} MiB")
        name = input_name(index)
        with open(os.path.join(workdir, name), "wb") as handle:
            handle.write(data)
        os.chmod(os.path.join(workdir, name), 0o444)
        names.append(name)
    return names
