"""``/readyz`` follows a real Redis: ready, not ready while it is gone, ready again.

A redis-server of its own (killed and restarted here), the app in memory
(:mod:`asgi_harness`) on real time: the readiness check is a ``PING``
through the backend's circuit breaker, at most once a second.
"""

from __future__ import annotations

import json

import pytest
import trio
from asgi_harness import AsgiClient, served
from deploy_harness import redis_server

from trio_mcp_cancel import Registry
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer

pytestmark = [pytest.mark.slow, pytest.mark.mcp_registry(grace_period=5)]


async def readiness(client: AsgiClient) -> tuple[int | None, dict[str, str]]:
    exchange = await client.request("GET", path="/readyz")
    return exchange.status, json.loads(exchange.content)


async def until_status(client: AsgiClient, status: int) -> dict[str, str]:
    """Probe every 0.2 s until readiness answers *status* (within 10 s); its body."""
    with trio.fail_after(10):
        while True:
            got, body = await readiness(client)
            if got == status:
                return body
            await trio.sleep(0.2)


async def test_readiness_is_503_while_redis_is_down_and_200_once_it_is_back(
    mcp_registry: Registry,
) -> None:
    with redis_server() as redis:
        backend = RedisBackend(redis.url, prefix="health", hot_timeout=0.5, reconnect_delay=0.2)
        async with served(McpHttpApp(McpServer("health"), mcp_registry, backend=backend)) as client:
            await until_status(client, 200)
            redis.kill()
            down = await until_status(client, 503)
            assert (await client.request("GET", path="/healthz")).status == 200
            redis.start()  # the same port
            await until_status(client, 200)
    assert down["status"] == "not ready"
    assert down["reason"].startswith("Redis (the shared backend) is unreachable")
