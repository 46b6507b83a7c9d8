"""PixmoCount images: the HF export lists URLs and sha256 digests, not pixels.

`pixmo_images(items, cache_dir, fetch=...)` returns each item's image bytes from
``cache_dir/<sha256>.img``. With ``fetch=True`` (the CLI's ``--fetch-images``) an image not yet
cached is downloaded once from its ``image_url`` and kept only if its sha256 matches; without it
a missing image is an error naming the cache and the flag (nothing is downloaded silently).
Images that cannot be fetched or whose digest differs (URLs rot) are reported, not guessed: they
come back as None and the caller drops those items, saying how many.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from codedance.eval.sources import DataNotFoundError, RawItem


def _cached(cache: Path, digest: str) -> bytes | None:
    path = cache / f"{digest}.img"
    if path.is_file():
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == digest:
            return data
    return None


def pixmo_images(
    items: Sequence[RawItem], cache_dir: str | Path, *, fetch: bool = False, timeout_s: float = 20.0
) -> tuple[list[bytes | None], list[str]]:
    """(image bytes or None per item, problems as text). See the module docstring."""
    cache = Path(cache_dir)
    out: list[bytes | None] = []
    problems: list[str] = []
    missing = [it for it in items if _cached(cache, it.get("image_sha256").lower()) is None]
    if missing and not fetch:
        raise DataNotFoundError(
            f"{len(missing)} PixmoCount images are not in the cache {cache}; rerun with "
            f"--fetch-images to download them once from their image_url (checked by sha256)"
        )
    client = None
    if missing:
        import httpx

        cache.mkdir(parents=True, exist_ok=True)
        client = httpx.Client(timeout=timeout_s, follow_redirects=True)
    try:
        for item in items:
            digest = item.get("image_sha256").lower()
            data = _cached(cache, digest)
            if data is None and client is not None:
                data = _download(client, item.get("image_url"), digest, cache, problems)
            out.append(data)
    finally:
        if client is not None:
            client.close()
    return out, problems


def _download(client, url: str, digest: str, cache: Path, problems: list[str]) -> bytes | None:
    try:
        response = client.get(url)
        response.raise_for_status()
    except Exception as exc:  # noqa: BLE001 - network errors, 404s: reported per image
        problems.append(f"{url}: {type(exc).__name__}: {exc}")
        return None
    data = response.content
    if hashlib.sha256(data).hexdigest() != digest:
        problems.append(f"{url}: sha256 differs from image_sha256 {digest}")
        return None
    tmp = cache / f"{digest}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, cache / f"{digest}.img")
    return data
