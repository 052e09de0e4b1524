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

import pytest
import trio
from deploy_harness import RedisServer
from redis_harness import prefix, redis

from trio_mcp_cancel.backends import BackendEvent, BackendUnavailable
from trio_mcp_cancel.backends.redis import RedisBackend

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
