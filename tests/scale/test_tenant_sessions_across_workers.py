"""A tenant at its session cap, counted across workers, makes room wherever its idle sessions live.

``max_sessions_per_tenant`` counts a tenant's legacy sessions across every
worker (in Redis), and a new one makes room by ending the tenant's least
recently used *idle* session.  Only the worker holding a session knows
whether it has calls in flight, so the eviction used to look at the
initializing worker's sessions only: a client alternating workers got 429
for ``initialize`` while idle sessions of its own sat on the other worker.
Now the oldest idle one is ended wherever it lives (asked over the bus), and
``initialize`` is refused only when every session of the tenant is busy.

Two apps (two "workers") on one real redis-server, served in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import McpServer

from _support.asgi import (
    AsgiClient,
    initialize,
    initialize_message,
    legacy_call,
    legacy_headers,
)
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

CAP = 4


class Gate:
    """A tool that holds its session busy until released."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.running = 0


def make_server(gate: Gate) -> McpServer:
    server = McpServer("tenant-cap")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def hold() -> str:
        gate.running += 1
        await gate.release.wait()
        return "released"

    return server


@asynccontextmanager
async def two_workers(
    redis: RedisServer, prefix: str, gate: Gate
) -> AsyncIterator[tuple[AsgiClient, AsgiClient, list[RedisBackend]]]:
    backends = [RedisBackend(redis.url, prefix=prefix) for _ in "ab"]
    apps = [
        McpHttpApp(
            make_server(gate), backend=backend, http_limits=HttpLimits(max_sessions_per_tenant=CAP)
        )
        for backend in backends
    ]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            a, b = (AsgiClient(app, nursery) for app in apps)
            async with a.lifespan(), b.lifespan():
                yield a, b, backends
                gate.release.set()
                await a.wait_all_done()
                await b.wait_all_done()


async def initialize_in_order(client: AsgiClient) -> str:
    """A new session, a little after the last one: the shared index orders sessions by
    millisecond scores, so two made in the same millisecond have no order to test."""
    session = await initialize(client)
    await trio.sleep(0.003)
    return session


async def init_status(client: AsgiClient) -> int:
    reply = await client.post(legacy_headers(version=None), initialize_message())
    assert reply.status is not None
    return reply.status


async def echo_status(client: AsgiClient, session: str) -> int:
    reply = await client.post(legacy_headers(session), legacy_call(1, "echo", {"text": "x"}))
    assert reply.status is not None
    return reply.status


async def sessions_in_redis(backend: RedisBackend) -> int:
    return int(await backend.client.zcard(backend.keys.sessions_of("ip:127.0.0.1")))


async def test_a_client_alternating_workers_past_its_cap_is_never_refused_while_idle_ones_exist(
    redis: RedisServer, prefix: str
) -> None:
    async with two_workers(redis, prefix, Gate()) as (a, b, backends):
        sessions = [await initialize_in_order((a, b)[n % 2]) for n in range(3 * CAP)]
        assert await sessions_in_redis(backends[0]) == CAP
        # The newest CAP sessions live on, from either worker; the oldest were ended.
        for session in sessions[-CAP:]:
            assert await echo_status(a, session) == 200
            assert await echo_status(b, session) == 200
        for session in sessions[:CAP]:
            assert await echo_status(a, session) == 404
            assert await echo_status(b, session) == 404


async def test_the_oldest_idle_session_on_another_worker_makes_room(
    redis: RedisServer, prefix: str
) -> None:
    async with two_workers(redis, prefix, Gate()) as (a, b, backends):
        on_a = [await initialize_in_order(a) for _ in range(CAP)]
        newcomer = await initialize(b)  # every session of the tenant lives on A
        assert await sessions_in_redis(backends[0]) == CAP
        assert await echo_status(a, on_a[0]) == 404  # the least recently used one
        for session in [*on_a[1:], newcomer]:
            assert await echo_status(b, session) == 200


async def test_initialize_is_refused_only_when_every_session_everywhere_is_busy(
    redis: RedisServer, prefix: str
) -> None:
    gate = Gate()
    async with two_workers(redis, prefix, gate) as (a, b, backends):
        sessions = [await initialize((a, b)[n % 2]) for n in range(CAP)]
        for n, session in enumerate(sessions):
            (a, b)[n % 2].start("POST", legacy_headers(session), legacy_call(2, "hold"))
        with trio.fail_after(10):
            while gate.running < CAP:
                await trio.sleep(0.01)
        assert await init_status(a) == 429
        refused = await b.post(legacy_headers(version=None), initialize_message())
        assert refused.status == 429
        assert refused.json()["error"]["data"] == {"limit": "tenant", "max": CAP}
        assert "mcp-session-id" not in refused.headers
        assert await sessions_in_redis(backends[0]) == CAP
        gate.release.set()
        await a.wait_all_done()
        await b.wait_all_done()
        assert await init_status(b) == 200  # idle again: room is made
        assert await init_status(a) == 200


async def test_a_busy_session_elsewhere_is_kept_and_an_idle_one_here_makes_room(
    redis: RedisServer, prefix: str
) -> None:
    gate = Gate()
    async with two_workers(redis, prefix, gate) as (a, b, backends):
        busy = await initialize(a)
        on_b = [await initialize(b) for _ in range(CAP - 1)]
        a.start("POST", legacy_headers(busy), legacy_call(2, "hold"))
        with trio.fail_after(10):
            while gate.running < 1:
                await trio.sleep(0.01)
        # The oldest (on A) is busy: nobody ends it; one of B's own idle ones goes
        # (which one depends on the index's millisecond scores, which can tie).
        assert await init_status(b) == 200
        assert await sessions_in_redis(backends[0]) == CAP
        statuses = [await echo_status(b, session) for session in on_b]
        assert sorted(statuses) == [200] * (CAP - 2) + [404], statuses
        assert await echo_status(b, busy) == 200


async def test_malformed_requests_to_make_room_are_ignored(redis: RedisServer, prefix: str) -> None:
    async with two_workers(redis, prefix, Gate()) as (a, b, backends):
        session = await initialize(a)
        for garbage in (
            {"type": "session.make_room", "request": "r", "sessions": "all", "cap": 1},
            {"type": "session.make_room", "request": "r", "sessions": [7, None], "cap": 1},
            {"type": "session.make_room", "request": "r", "sessions": [], "cap": "1"},
            {"type": "session.make_room", "request": 5, "sessions": [], "cap": 1},
            {"type": "session.room", "request": ["x"]},
        ):
            await backends[1].bus.publish(garbage)
        await trio.sleep(0.2)
        assert await echo_status(a, session) == 200
        assert await echo_status(b, session) == 200
