"""Legacy sessions shared through a slow Redis (a latency-injecting proxy in front of
a real redis-server): a slow backend never ends a session.

Two apps (two "workers") share one Redis through :mod:`_support.latency_proxy`,
served in memory.  Below the request path's timeout every Redis operation
a request waits for is one round trip (scripts preloaded, pipelines), so
nothing times out and the breaker never opens; above it, a session the
worker holds keeps being served and one it cannot confirm gets a retryable
``503`` with ``Retry-After``, never the ``404`` that tells a client to start
over (that is only for an id Redis says does not exist).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

from trio_mcp_cancel._core.events import BackendEvent
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.transports.http.shared import session_key

from _support.asgi import AsgiClient, initialize, legacy_call, legacy_headers, served
from _support.deploy import RedisServer
from _support.latency_proxy import LatencyProxy, latency_proxy
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

pytestmark = pytest.mark.timeout(60)


def echo_server() -> McpServer:
    server = McpServer("slow-redis")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


@attrs.define
class Workers:
    proxy: LatencyProxy
    backends: list[RedisBackend]
    on_a: AsgiClient
    on_b: AsgiClient
    events: list[BackendEvent]


@asynccontextmanager
async def two_workers(
    redis: RedisServer, prefix: str, hot_timeout: float
) -> AsyncIterator[Workers]:
    """Two apps on one Redis behind a proxy (no delay yet), their scripts loaded."""
    async with latency_proxy(redis.port) as proxy:
        backends = [RedisBackend(proxy.url, prefix=prefix, hot_timeout=hot_timeout) for _ in "ab"]
        events: list[BackendEvent] = []
        for backend in backends:
            backend.events.subscribe(events.append)  # type: ignore[arg-type]
        a, b = (McpHttpApp(echo_server(), backend=backend) for backend in backends)
        async with served(a, no_leaks=False) as on_a, served(b, no_leaks=False) as on_b:
            acquire = backends[0].counters._acquire.sha
            with trio.move_on_after(5):  # the heartbeat loads them at start
                while not (await backends[0].client.script_exists([acquire]))[0]:
                    await trio.sleep(0.02)
            yield Workers(proxy, backends, on_a, on_b, events)


async def call(client: AsgiClient, session_id: str, n: int) -> int:
    exchange = await client.post(legacy_headers(session_id), legacy_call(n, "echo", {"text": "x"}))
    assert exchange.status is not None
    if exchange.status == 503:
        assert exchange.headers.get("retry-after") == "1", exchange.headers
    return exchange.status


async def test_a_redis_slower_than_usual_but_within_the_hot_timeout_never_opens_the_breaker(
    redis: RedisServer, prefix: str
) -> None:
    # 200 ms away, 350 ms allowed: every operation must be one round trip.
    async with two_workers(redis, prefix, hot_timeout=0.35) as w:
        w.proxy.delay = 0.2
        session = await initialize(w.on_a)
        statuses = [await call((w.on_b, w.on_a)[n % 2], session, n) for n in range(4)]
        deleted = await w.on_b.request("DELETE", legacy_headers(session))
        assert statuses == [200] * 4
        assert deleted.status in (200, 204), deleted.content
        assert [e.name for e in w.events] == [], w.events  # no timeout: no breaker opened


async def test_sessions_are_served_or_answered_503_never_404_while_redis_is_too_slow(
    redis: RedisServer, prefix: str
) -> None:
    async with two_workers(redis, prefix, hot_timeout=0.1) as w:
        mine, elsewhere = await initialize(w.on_a), await initialize(w.on_a)
        unknown = await call(w.on_b, "no-such-session-anywhere", 1)
        assert unknown == 404  # Redis says it does not exist
        w.proxy.delay = 0.3  # three times the 100 ms hot timeout
        seen: dict[str, list[int]] = {"held": [], "not held": []}
        for n in range(6):
            seen["held"].append(await call(w.on_a, mine, n))
            seen["not held"].append(await call(w.on_b, elsewhere, n))
        assert seen["held"] == [200] * 6, seen
        assert 404 not in seen["not held"] and 503 in seen["not held"], seen
        assert any(e.name == "backend.unavailable" for e in w.events)
        # Fast again: the breaker closes (probes in a row) and the session is found.
        w.proxy.delay = 0.0
        with trio.fail_after(15):
            while (status := await call(w.on_b, elsewhere, 99)) != 200:
                assert status == 503
                await trio.sleep(0.1)


async def test_a_session_created_while_redis_is_too_slow_is_shared_once_redis_answers(
    redis: RedisServer, prefix: str
) -> None:
    async with two_workers(redis, prefix, hot_timeout=0.1) as w:
        first = await initialize(w.on_a)
        w.proxy.delay = 0.3
        assert await call(w.on_a, first, 1) == 200  # A's quota check times out: its breaker opens
        late = await initialize(w.on_a)  # its write-through cannot finish: kept on A
        assert await call(w.on_b, late, 2) == 503  # B cannot confirm it: not 404
        w.proxy.delay = 0.0
        record = w.backends[0].keys.session(session_key(late))
        with trio.fail_after(10):  # A writes it in the background once Redis answers
            while not await w.backends[1].client.exists([record]):
                await trio.sleep(0.05)
        with trio.fail_after(15):  # and B finds it once its own breaker closed again
            while (status := await call(w.on_b, late, 3)) != 200:
                assert status == 503
                await trio.sleep(0.1)
