"""`ClientShards`: least-busy leasing, shards made only when all are full, the connection budget."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from codedance.policy import OpenAIChatPolicy
from codedance.policy.http_pool import ClientShards
from codedance.policy.replay_server import ReplayServer
from codedance.types import Message

pytestmark = pytest.mark.tier("unit")


class Fake:
    def __init__(self, limits: httpx.Limits, verify: object) -> None:
        self.size = limits.max_connections
        self.verify = verify


def test_one_request_at_a_time_uses_one_client() -> None:
    shards: ClientShards[Fake] = ClientShards(Fake, max_connections=64, per_shard=4)
    seen = set()
    for _ in range(10):
        with shards.lease() as client:
            seen.add(id(client))
    assert len(seen) == 1 and len(shards.clients) == 1


def test_new_shard_only_when_all_are_full_and_budget_respected() -> None:
    shards: ClientShards[Fake] = ClientShards(Fake, max_connections=10, per_shard=4)
    leases = [shards.lease() for _ in range(13)]
    clients = [lease.__enter__() for lease in leases]
    assert [c.size for c in shards.clients] == [4, 4, 2]  # 10 connections in all
    assert [clients.count(c) for c in shards.clients] == [5, 4, 4]  # past the budget: least busy
    assert len({id(c.verify) for c in shards.clients}) == 1  # one SSL context shared
    leases[0].__exit__(None, None, None)
    leases[1].__exit__(None, None, None)  # shard 0 now has 3 in flight, the least busy
    with shards.lease() as client:
        assert client is shards.clients[0]
    taken = shards.take_all()
    assert len(taken) == 3 and shards.clients == ()
    for lease in leases[2:]:
        lease.__exit__(None, None, None)  # releasing after take_all is harmless
    with shards.lease() as client:
        assert client not in taken


def test_concurrent_requests_over_http_spread_over_shards() -> None:
    with ReplayServer(lambda body: "<answer>1</answer>") as server:
        policy = OpenAIChatPolicy(server.url, "scripted", max_connections=40)

        async def main() -> list[str]:
            out = await asyncio.gather(
                *(policy.acomplete((Message("user", (f"q{i}",)),)) for i in range(40))
            )
            shards = policy._aclients
            assert (
                shards is not None and 1 <= len(shards.clients) <= 3
            )  # 16 + 16 + 8 connections at most
            await policy.aclose()
            return [c.text for c in out]

        assert asyncio.run(main()) == ["<answer>1</answer>"] * 40
        assert sorted(r["messages"][0]["content"][0]["text"] for r in server.requests) == sorted(
            f"q{i}" for i in range(40)
        )
        assert policy.complete((Message("user", ("sync",)),)).text == "<answer>1</answer>"
        policy.close()
