"""What a step shows: bounded text streams and the images it displayed, saved or returned.

Runs inside the jail. Images are captured from
- ``plt.show()`` / ``Figure.show()`` and every figure still open when the step ends;
- ``PIL.Image.Image.show()``;
- ``cv2.imshow()`` (its array is BGR or BGRA, as OpenCV displays it);
- image files created or modified in the working directory;
- the snippet's last expression when it is a PIL image, a figure, or an array that looks like
  an image (arrays are read as RGB, as PIL gives them; only ``cv2.imshow`` arrays are BGR).
Each image comes back once: duplicates (same pixels; for saved PNG files, same bytes) are dropped.
At most ``max_images`` come back per step, at most ``max_bytes`` of PNG in all; images larger than
``max_pixels`` are downscaled. Every cut is reported as a note.

Text streams keep their head and tail and mark the cut; nothing here grows with the output.
"""

from __future__ import annotations

import hashlib
import io
import os

import numpy as np
from PIL import Image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


class BoundedText(io.TextIOBase):
    """A text stream that keeps the first ``head`` and last ``tail`` characters written."""

    def __init__(self, head: int, tail: int):
        self._head_limit, self._tail_limit = head, tail
        self._head: list[str] = []
        self._head_size = 0
        self._tail = ""
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.total += len(text)
        room = self._head_limit - self._head_size
        if room > 0:
            self._head.append(text[:room])
            self._head_size += min(room, len(text))
            text = text[room:]
        if text:
            self._tail = (self._tail + text)[-self._tail_limit :]
        return len(text)

    @property
    def buffer(self) -> _BytesToText:
        return _BytesToText(self)

    def value(self) -> str:
        head = "".join(self._head)
        dropped = self.total - len(head) - len(self._tail)
        if dropped <= 0:
            return head + self._tail
        return f"{head}\n[... {dropped} characters of output cut ...]\n{self._tail}"


class _BytesToText:
    """``sys.stdout.buffer`` for a `BoundedText`: bytes are decoded (undecodable ones replaced)."""

    def __init__(self, text: BoundedText):
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


def read_head(fd: int, limit: int) -> tuple[str, int]:
    """The first ``limit`` bytes of an open file as text, and the file's full size."""
    data = os.pread(fd, limit, 0)
    return data.decode("utf-8", "replace"), os.fstat(fd).st_size


class ImageCollector:
    """Collects the images of one step as PNG bytes, deduplicated and bounded."""

    def __init__(self, max_images: int, max_pixels: int, max_bytes: int = 48 << 20):
        self.max_images, self.max_pixels, self.max_bytes = max_images, max_pixels, max_bytes
        self.images: list[tuple[bytes, int, int, str]] = []  # png, width, height, source
        self.notes: list[str] = []
        self._bytes = 0
        self._seen: set[str] = set()  # digests of pixels (shown images) and of PNG files passed on
        self._pixels_seen = False  # whether any image was deduplicated by its pixels
        self._dropped = 0

    def add_pil(self, image: Image.Image, source: str) -> None:
        if len(self.images) >= self.max_images:
            self._dropped += 1
            return
        image = _displayable(image)
        if image.width * image.height > self.max_pixels:
            original = image.size
            scale = (self.max_pixels / (image.width * image.height)) ** 0.5
            size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
            image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
            self.notes.append(f"image from {source} downscaled from {original} to {image.size}")
        digest = _pixel_digest(image)
        if digest in self._seen:
            return
        self._seen.add(digest)
        self._pixels_seen = True
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=1)
        self._keep(buffer.getvalue(), image.width, image.height, source)

    def _keep(self, png: bytes, width: int, height: int, source: str) -> None:
        if self._bytes + len(png) > self.max_bytes:
            self.notes.append(
                f"image from {source} not returned: {len(png) >> 20} MiB of PNG would pass "
                f"the {self.max_bytes >> 20} MiB per step"
            )
            return
        self._bytes += len(png)
        self.images.append((png, width, height, source))

    def add_file(self, path: str, source: str) -> None:
        """A saved image file. A PNG already in RGB(A)/L within the pixel budget is passed on as
        its own bytes (no decode, no re-encode: saving is the step's slow part, not capture);
        anything else is decoded and re-encoded. Such a PNG is deduplicated by its content and,
        when the step also showed images, by its pixels (decoded only then), so an image both
        shown and saved comes back once."""
        with Image.open(path) as image:
            direct = (image.format == "PNG" and image.mode in ("RGB", "RGBA", "L")
                      and image.width * image.height <= self.max_pixels)  # fmt: skip
            if not direct:
                image.load()
                self.add_pil(image, source)
                return
            size = image.size
            pixels = _pixel_digest(image) if self._pixels_seen else None
        if pixels is not None and pixels in self._seen:
            return
        if len(self.images) >= self.max_images:
            self._dropped += 1
            return
        with open(path, "rb") as handle:
            data = handle.read(self.max_bytes + 1)
        digest = hashlib.sha1(data).hexdigest()
        if digest not in self._seen:
            self._seen.add(digest)
            self._keep(data, size[0], size[1], source)

    def add_array(self, array: np.ndarray, source: str, *, bgr: bool) -> None:
        self.add_pil(array_to_image(array, bgr=bgr), source)

    def add_figure(self, figure, source: str) -> None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        buffer.seek(0)
        with Image.open(buffer) as image:
            self.add_pil(
                image.convert("RGBA") if image.mode == "RGBA" else image.convert("RGB"), source
            )

    def finish_notes(self, max_notes: int = 8) -> list[str]:
        if self._dropped:
            self.notes.append(
                f"{self._dropped} more image(s) not returned: at most {self.max_images} per step"
            )
        if len(self.notes) > max_notes:
            self.notes[max_notes - 1 :] = [
                f"{len(self.notes) - max_notes + 1} more notes about images"
            ]
        return self.notes


def _pixel_digest(image: Image.Image) -> str:
    return hashlib.sha1(image.tobytes() + repr((image.mode, image.size)).encode()).hexdigest()


def looks_like_image(value: object) -> bool:
    if not isinstance(value, np.ndarray) or value.size == 0 or value.ndim not in (2, 3):
        return False
    if value.ndim == 3 and value.shape[2] not in (1, 3, 4):
        return False
    return value.dtype == np.bool_ or np.issubdtype(value.dtype, np.number)


def array_to_image(array: np.ndarray, *, bgr: bool) -> Image.Image:
    """An image array (H×W, H×W×1, H×W×3 or H×W×4) as a PIL image, RGB(A) order."""
    if not looks_like_image(array):
        raise ValueError(f"not an image array: shape {getattr(array, 'shape', None)}")
    data = np.asarray(array)
    if data.ndim == 3 and data.shape[2] == 1:
        data = data[:, :, 0]
    if data.dtype == np.bool_:
        data = data.astype(np.uint8) * 255
    elif data.dtype == np.uint16:
        data = (data >> 8).astype(np.uint8)
    elif np.issubdtype(data.dtype, np.floating):
        finite = np.nan_to_num(data.astype(np.float64))
        scale = 255.0 if finite.max(initial=0.0) <= 1.0 else 1.0
        data = np.clip(finite * scale, 0, 255).astype(np.uint8)
    elif data.dtype != np.uint8:
        data = np.clip(data, 0, 255).astype(np.uint8)
    if bgr and data.ndim == 3:
        data = data[:, :, [2, 1, 0, 3][: data.shape[2]]]
    mode = {2: "L", 3: "RGB", 4: "RGBA"}[data.shape[2] if data.ndim == 3 else 2]
    return Image.fromarray(np.ascontiguousarray(data), mode=mode)


def _displayable(image: Image.Image) -> Image.Image:
    if image.mode in ("RGB", "RGBA", "L"):
        return image
    if image.mode in ("LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        return image.convert("RGBA")
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        return array_to_image(
            np.asarray(image).astype(np.float64) / max(1, np.asarray(image).max()), bgr=False
        )
    return image.convert("RGB")


def list_image_files(
    root: str, limit: int = 10_000, max_depth: int = 32
) -> dict[str, tuple[int, int]]:
    """Image files under ``root`` (relative path -> (size, mtime_ns)): at most ``limit`` entries,
    ``max_depth`` levels down, hidden directories and symlinks skipped."""
    found: dict[str, tuple[int, int]] = {}
    pending = [("", 0)]
    while pending:
        relative_dir, depth = pending.pop()
        try:
            iterator = os.scandir(os.path.join(root, relative_dir) if relative_dir else root)
        except OSError:
            continue
        with iterator:
            for item in iterator:
                relative = os.path.join(relative_dir, item.name)
                try:
                    if item.is_dir(follow_symlinks=False):
                        if depth + 1 < max_depth and not item.name.startswith("."):
                            pending.append((relative, depth + 1))
                    elif item.is_file(follow_symlinks=False) and item.name.lower().endswith(
                        IMAGE_SUFFIXES
                    ):
                        info = item.stat(follow_symlinks=False)
                        found[relative] = (info.st_size, info.st_mtime_ns)
                        if len(found) >= limit:
                            return found
                except OSError:
                    continue
    return found


def show_value(value, collector: ImageCollector, out: BoundedText) -> None:
    """Show a snippet's last value: an image comes back as one, anything else is printed."""
    if value is None:
        return
    if isinstance(value, Image.Image):
        collector.add_pil(value, "last expression")
    elif looks_like_image(value) and image_shaped(value):
        collector.add_array(value, "last expression", bgr=False)
    elif type(value).__name__ in ("Figure", "Axes", "AxesSubplot"):
        figure = value if type(value).__name__ == "Figure" else value.figure
        collector.add_figure(figure, "last expression")
    else:
        out.write(repr(value)[:10_000] + "\n")


def image_shaped(array) -> bool:
    """An array shown as a picture rather than printed: H×W×3/4, or an 8-bit H×W of 16+ pixels."""
    if array.ndim == 3:
        return array.shape[2] in (3, 4) and min(array.shape[:2]) >= 8
    return array.dtype.name in ("uint8", "bool") and min(array.shape) >= 16
