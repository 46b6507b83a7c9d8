"""Images as Qwen2.5-VL's processor expects them: sides multiples of 28, pixels within bounds.

`smart_resize` is qwen-vl-utils' rule (``qwen_vl_utils.vision_process.smart_resize``): round each
side to the nearest multiple of ``factor``, then scale both down (floor) when the area exceeds
``max_pixels`` or up (ceil) when it is under ``min_pixels``; aspect ratios over 200 are refused.
`fit_image` applies it with bicubic resampling after converting to RGB (transparent pixels on
white, as qwen-vl-utils' ``to_rgb`` does). An image already at its target size is returned
unchanged, bytes and all, so resizing is idempotent. Results are kept for the last 64 distinct
(bytes, origin, limits), so the G rollouts of one task decode, resize and re-encode its images
once, not G times (the returned `Image` is shared; `Image` is frozen). Failures are not kept.

Departure from the release: its eval calls ``smart_resize(width, height)`` with the arguments
swapped; we pass (height, width) as qwen-vl-utils defines them.
"""

from __future__ import annotations

import io
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from codedance.errors import SettingsError
from codedance.types import Image

IMAGE_FACTOR = 28
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28
MAX_RATIO = 200


@dataclass(frozen=True)
class VisionLimits:
    """Resize settings; the defaults are qwen-vl-utils' (and the release eval's)."""

    factor: int = IMAGE_FACTOR
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS
    max_ratio: float = MAX_RATIO


def smart_resize(height: int, width: int, limits: VisionLimits = VisionLimits()) -> tuple[int, int]:
    """Target (height, width) for an image of the given size.

    >>> smart_resize(100, 200)
    (112, 196)
    >>> smart_resize(10, 10)
    (56, 56)
    >>> h, w = smart_resize(4000, 3000, VisionLimits(max_pixels=1280 * 28 * 28))
    >>> (h % 28, w % 28, h * w <= 1280 * 784)
    (0, 0, True)
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(height, width) / min(height, width) > limits.max_ratio:
        raise ValueError(
            f"aspect ratio {max(height, width) / min(height, width):.0f} of a {width}x{height} "
            f"image exceeds {limits.max_ratio:g}"
        )
    f = limits.factor
    h_bar = max(f, round(height / f) * f)
    w_bar = max(f, round(width / f) * f)
    if h_bar * w_bar > limits.max_pixels:
        beta = math.sqrt((height * width) / limits.max_pixels)
        h_bar = max(f, math.floor(height / beta / f) * f)
        w_bar = max(f, math.floor(width / beta / f) * f)
    elif h_bar * w_bar < limits.min_pixels:
        beta = math.sqrt(limits.min_pixels / (height * width))
        h_bar = math.ceil(height * beta / f) * f
        w_bar = math.ceil(width * beta / f) * f
    return h_bar, w_bar


_FITTED: OrderedDict[tuple[bytes, str, VisionLimits], Image] = OrderedDict()
_FITTED_SIZE = 64
_FITTED_LOCK = threading.Lock()


def fit_image(image: Image, limits: VisionLimits = VisionLimits()) -> Image:
    """`image` resized to `smart_resize`'s target (same origin); raises ValueError when the
    image cannot be decoded or its aspect ratio is refused."""
    key = (image.png, image.origin, limits)
    with _FITTED_LOCK:
        hit = _FITTED.get(key)
        if hit is not None:
            _FITTED.move_to_end(key)
            return hit
    fitted = _fit(image, limits)
    with _FITTED_LOCK:
        _FITTED[key] = fitted
        if len(_FITTED) > _FITTED_SIZE:
            _FITTED.popitem(last=False)
    return fitted


def _fit(image: Image, limits: VisionLimits) -> Image:
    from PIL import Image as PILImage

    try:
        pil = image.to_pil()
    except Exception as exc:  # PIL raises several types for undecodable data
        raise ValueError(f"image {image.origin or '(unnamed)'} cannot be decoded: {exc}") from exc
    height, width = smart_resize(pil.height, pil.width, limits)
    if (width, height) == pil.size and pil.mode == "RGB":
        return image if image.width else Image.from_pil(pil, origin=image.origin)
    if pil.mode in ("RGBA", "LA", "P"):
        pil = pil.convert("RGBA")
        background = PILImage.new("RGB", pil.size, (255, 255, 255))
        background.paste(pil, mask=pil.split()[3])
        pil = background
    elif pil.mode != "RGB":
        pil = pil.convert("RGB")
    if (width, height) != pil.size:
        pil = pil.resize((width, height), resample=PILImage.Resampling.BICUBIC)
    return Image.from_pil(pil, origin=image.origin)


def image_from_bytes(data: bytes, origin: str = "") -> Image:
    """An `Image` from any format Pillow reads (PNG, JPEG, ...), re-encoded as PNG."""
    from PIL import Image as PILImage

    try:
        pil = PILImage.open(io.BytesIO(data))
        pil.load()
    except (
        PILImage.UnidentifiedImageError
    ) as exc:  # its text names the in-memory buffer, not a file
        raise ValueError(
            f"image {origin or '(unnamed)'} cannot be decoded: no image format Pillow reads"
        ) from exc
    except Exception as exc:
        raise ValueError(f"image {origin or '(unnamed)'} cannot be decoded: {exc}") from exc
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return Image(png=data, origin=origin, width=pil.width, height=pil.height)
    return Image.from_pil(pil, origin=origin)


def image_file(path: Path, option: str = "--image") -> bytes:
    """The bytes of an image file a person named, decoded once to check it: an unreadable one is
    a `SettingsError` naming the option and the file, before any sandbox or server is started."""
    try:
        data = Path(path).read_bytes()
        image_from_bytes(data, origin=str(path))
    except OSError as exc:
        raise SettingsError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        reason = str(exc).split("cannot be decoded: ", 1)[-1]
        raise SettingsError(f"{option} {path}: not a readable image ({reason})") from None
    return data
