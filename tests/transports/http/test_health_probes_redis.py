"""``/readyz`` follows a real Redis: ready, not ready while it is gone, ready again.

A redis-server of its own (killed and restarted here), the app in memory
(:mod:`asgi_harness`) on real time: the readiness check is a ``PING``
through the backend's circuit breaker, at most once a second, however
many probes arrive (counted by Redis itself).
"""

from __future__ import annotations

import json
import re

import pytest
import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http.health import CHECK_TTL

from _support.asgi import AsgiClient, served
from _support.deploy import redis_server
from _support.redis import _command

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


def ping_calls(port: int) -> int:
    """How many ``PING``s Redis has answered (``INFO commandstats``)."""
    stats = _command(port, "INFO", "commandstats").decode()
    found = re.search(r"cmdstat_ping:calls=(\d+)", stats)
    return 0 if found is None else int(found.group(1))


async def test_a_probe_flood_sends_redis_about_one_ping_a_second(mcp_registry: Registry) -> None:
    with redis_server() as redis:
        backend = RedisBackend(redis.url, prefix="flood", hot_timeout=0.5)
        async with served(McpHttpApp(McpServer("health"), mcp_registry, backend=backend)) as client:
            await until_status(client, 200)
            before, began = ping_calls(redis.port), trio.current_time()
            for _ in range(20):  # 2 s of 100 probes every 0.1 s
                for _ in range(100):
                    client.start("GET", path="/readyz")
                await trio.sleep(0.1)
            await client.wait_all_done()
            pings, seconds = ping_calls(redis.port) - before, trio.current_time() - began
    assert all(exchange.status == 200 for exchange in client.exchanges)
    assert len(client.exchanges) > 2000
    assert 1 <= pings <= seconds / CHECK_TTL + 1
