"""`ScriptedPolicy`: replies in order, or from a function of the conversation."""

from __future__ import annotations

import pytest

from codedance.policy import Completion, Policy, ScriptedPolicy, ScriptExhaustedError
from codedance.types import Message

pytestmark = pytest.mark.tier("unit")

HELLO = (Message("user", ("hello",)),)


def test_replays_in_order_records_what_it_saw_and_ends() -> None:
    policy = ScriptedPolicy(["a", Completion(text="b", token_ids=(1,))])
    assert isinstance(policy, Policy)
    assert policy.complete(HELLO).text == "a"
    assert policy.complete(HELLO).token_ids == (1,)
    assert policy.seen == [HELLO, HELLO]
    with pytest.raises(ScriptExhaustedError):
        policy.complete(HELLO)


async def test_reacts_to_the_conversation() -> None:
    policy = ScriptedPolicy(lambda messages: f"saw {messages[-1].text}")
    assert (await policy.acomplete(HELLO)).text == "saw hello"
