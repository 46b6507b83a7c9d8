"""A thread-safe cache of judge verdicts keyed by (question, gold, prediction, judge).

The key is a SHA-256 over those four strings (``judge`` names the model and prompt version), so a
changed prompt or judge model never reuses old verdicts. With a ``path`` the cache is also an
append-only JSONL file, loaded at start: one ``{"key": ..., "verdict": true|false}`` per line.
Only verdicts are cached, never errors.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path


def judge_cache_key(*, question: str, gold: str, prediction: str, judge: str) -> str:
    """Stable hex key of one judgement.

    >>> k = judge_cache_key(question="q", gold="a", prediction="a", judge="m/v1")
    >>> len(k), k == judge_cache_key(question="q", gold="a", prediction="b", judge="m/v1")
    (64, False)
    """
    payload = json.dumps([question, gold, prediction, judge], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class JudgeCache:
    """In-memory verdicts, optionally persisted to a JSONL file.

    >>> cache = JudgeCache()
    >>> cache.get("k") is None
    True
    >>> cache.put("k", True); cache.get("k"), len(cache)
    (True, 1)
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[str, bool] = {}
        self.path = Path(path) if path is not None else None
        if self.path is not None and self.path.exists():
            with self.path.open(encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                        self._verdicts[str(record["key"])] = bool(record["verdict"])
                    except (ValueError, KeyError, TypeError) as exc:
                        raise ValueError(f"{self.path}:{number}: not a judge cache line") from exc

    def get(self, key: str) -> bool | None:
        with self._lock:
            return self._verdicts.get(key)

    def put(self, key: str, verdict: bool) -> None:
        with self._lock:
            if self._verdicts.get(key) == verdict:
                return
            self._verdicts[key] = verdict
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"key": key, "verdict": verdict}) + "\n")

    def __len__(self) -> int:
        with self._lock:
            return len(self._verdicts)
