"""`ScriptedPolicy`: replays given replies, for tests and the offline demo.

Replies are strings or `Completion`s, returned in order; or a function of the conversation that
returns one (to react to feedback). Every conversation it was asked to continue is kept in
``seen`` so tests can check exactly what a model would have received. Asking past the end of a
fixed script raises `ScriptExhaustedError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from codedance.policy.base import Completion, ScriptExhaustedError
from codedance.types import Message

Reply = str | Completion


class ScriptedPolicy:
    """A `Policy` whose choices are scripted.

    >>> p = ScriptedPolicy(["<think>x</think><answer>1</answer>"])
    >>> p.complete(()).text
    '<think>x</think><answer>1</answer>'
    """

    def __init__(self, replies: Sequence[Reply] | Callable[[tuple[Message, ...]], Reply]) -> None:
        self._replies = replies
        self._next = 0
        self._lock = threading.Lock()
        self.seen: list[tuple[Message, ...]] = []

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        with self._lock:
            self.seen.append(messages)
            if callable(self._replies):
                reply = self._replies(messages)
            else:
                if self._next >= len(self._replies):
                    raise ScriptExhaustedError(f"script has only {len(self._replies)} replies")
                reply = self._replies[self._next]
                self._next += 1
        return reply if isinstance(reply, Completion) else Completion(text=reply)

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        return self.complete(messages)
