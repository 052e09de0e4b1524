"""A call that reaches a stopped Redis backend (shutdown) fails as "unavailable".

At shutdown the backend closes its coredis client while a request may
still be finishing (a tenant's call slot released after the answer, a
session record deleted).  coredis then raises a bare ``RuntimeError``
("Connection pool is not initialized or has exited"), which the callers,
written for :class:`BackendUnavailable` (logged at debug, repaired
later), did not expect: it escaped to the HTTP app, which mistook it for
a missing registry.  A stopped backend is unavailable, and not an outage.
"""

from __future__ import annotations

import logging

import pytest
import trio

from trio_mcp_cancel.backends import BackendEvent, BackendUnavailable
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer, ServerLimits

from _support.asgi import AsgiClient, initialize, legacy_call, legacy_headers
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # the fixtures, for pytest

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


async def test_operations_after_the_backend_stopped_are_unavailable_not_runtime_errors(
    redis: RedisServer, prefix: str
) -> None:
    backend = RedisBackend(redis.url, prefix=prefix)
    events: list[BackendEvent] = []
    backend.events.subscribe(events.append)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(backend.run)
        assert await backend.counters.acquire("calls:tenant", 5)
        nursery.cancel_scope.cancel()
    with pytest.raises(BackendUnavailable, match="stopped"):
        await backend.counters.release("calls:tenant")
    with pytest.raises(BackendUnavailable):
        await backend.sessions.delete("k", tenant="tenant")
    with pytest.raises(BackendUnavailable):
        await backend.bus.publish({"type": "session.end", "session": "k"})
    assert [e.name for e in events if e.name == "backend.unavailable"] == []  # not an outage


async def test_a_stopped_backend_runs_again(redis: RedisServer, prefix: str) -> None:
    backend = RedisBackend(redis.url, prefix=prefix)
    for _ in range(2):
        async with trio.open_nursery() as nursery:
            await nursery.start(backend.run)
            assert await backend.counters.acquire("calls:tenant", 5)
            await backend.counters.release("calls:tenant")
            nursery.cancel_scope.cancel()


async def test_a_call_finishing_after_the_lifespan_ended_logs_no_registry_error(
    redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The call holds one of its tenant's call slots in Redis; it finishes
    # after the lifespan stopped the backend, and releasing the slot then
    # must neither raise nor be mistaken for a missing registry.
    server = McpServer("late-call", limits=ServerLimits(max_calls_per_tenant=8))
    release, running = trio.Event(), trio.Event()

    @server.tool()
    async def hold() -> str:
        running.set()
        await release.wait()
        return "done"

    app = McpHttpApp(
        server,
        backend=RedisBackend(redis.url, prefix=prefix),
        resume_window=None,  # the answer is not kept for a resume: the exchange ends with it
    )
    with trio.fail_after(30), caplog.at_level(logging.DEBUG):
        async with trio.open_nursery() as nursery:
            client = AsgiClient(app, nursery)
            async with client.lifespan():
                session = await initialize(client)
                call = client.start("POST", legacy_headers(session), legacy_call(1, "hold"))
                await running.wait()
            release.set()  # the lifespan (and the backend) ended: now the call finishes
            await call.done.wait()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not any("no registry" in message for message in errors), errors
