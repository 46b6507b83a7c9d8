"""The ``scripted-first`` test policy of the CPU rollout server: a model's *choices* scripted for
one rollout per prompt, so that a randomly initialised model still yields GRPO groups with
different rewards (non-zero advantages).

A random model never writes a well-formed turn, so every rollout of a group would earn the same
format penalty and every advantage would be 0. With this policy the first request the server sees
for a new prompt is answered with `CODE_TURN` (a snippet the real sandbox runs), and the request
that continues that trajectory after the sandbox's feedback is answered with `ANSWER_TURN`; every
other request (the group's other rollouts, and validation) is sampled from the model. Only the
token *choices* are scripted: their log-probs are the model's own (the server scores them with a
forward pass, scaled by the temperature; top-k/top-p are not applied to them), and the agent
loop, sandbox, reward, estimator and update are the real ones.

Recognising a trajectory needs no request metadata: the server sees token ids only, so a prompt
that extends a known scripted prefix continues that trajectory, a prompt that extends (or equals)
a known first prompt belongs to a group already scripted, and anything else is a new prompt.
For tests and the CPU smoke run only (``actor_rollout_ref.rollout.custom.hf_server.test_policy``).
"""

from __future__ import annotations

import threading

NAME = "scripted-first"
CODE_TURN = (
    "<think>I will look at the image size first.</think>\n<code>\n```python\n"
    "print(input_image.size)\n```\n</code>"
)
ANSWER_TURN = "<think>The program printed the size.</think>\n<answer>0</answer>"


def _starts_with(ids: list[int], prefix: tuple[int, ...]) -> bool:
    return len(ids) >= len(prefix) and tuple(ids[: len(prefix)]) == prefix


class ScriptedFirstRollout:
    """Decides, per request, whether the reply is scripted (see the module docstring)."""

    def __init__(self, tokenizer, end_id: int) -> None:
        def encode(text: str) -> tuple[int, ...]:
            return (*tokenizer.encode(text, add_special_tokens=False), int(end_id))

        self.code_ids, self.answer_ids = encode(CODE_TURN), encode(ANSWER_TURN)
        self._first_prompts: list[tuple[int, ...]] = []
        self._scripted_prefixes: list[tuple[int, ...]] = []
        self._lock = threading.Lock()

    def reply(self, prompt_ids: list[int]) -> tuple[int, ...] | None:
        """The scripted reply's ids for this request, or None to sample from the model."""
        with self._lock:
            if any(_starts_with(prompt_ids, p) for p in self._scripted_prefixes):
                return self.answer_ids
            if any(_starts_with(prompt_ids, p) for p in self._first_prompts):
                return None
            first = tuple(prompt_ids)
            self._first_prompts.append(first)
            self._scripted_prefixes.append(first + self.code_ids)
            return self.code_ids
