"""The Redis backend against a real redis-server: task records, the cancel bus, outages.

Real time, real sockets on 127.0.0.1, every wait bounded; the server is
started by the test on a port the kernel picked (see ``_support.deploy``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_mcp_cancel import Event, Registry, cancelled, checkpoint_cancelled
from trio_mcp_cancel.backends import BackendEvent, MemoryTaskStore, TaskStoreFull
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.lowlevel.wire import TOO_MANY_REQUESTS
from trio_mcp_cancel.server import Context, McpServer, ServerLimits, Tasks
from trio_mcp_cancel.testing import EventRecorder, McpError

from _support.asgi import (
    AsgiClient,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_request,
)
from _support.deploy import WITH_TASKS, RedisServer, redis_server
from _support.redis import (
    client_of,
    prefix,
    record,
    redis,
    running,
    task_process,
    wait_status,
)

__all__ = ["prefix", "redis"]  # the fixtures, for pytest


async def test_task_records_round_trip_and_settle_once(redis: RedisServer, prefix: str) -> None:
    async with running(RedisBackend(redis.url, prefix=prefix)) as backend:
        store = backend.tasks
        assert await store.get("missing") is None
        original = record("a")
        await store.create(original)
        loaded = await store.get("a")
        assert loaded is not None and loaded.to_wire() == original.to_wire()
        assert loaded.owner == "o" and loaded.instance == "i" and not loaded.cancel_requested
        result = {"content": [], "isError": False, "structuredContent": {}}
        settled = await store.settle("a", "completed", result=result, message="done")
        assert settled is not None and settled.status == "completed"
        assert settled.result == result and settled.status_message == "done"
        # Terminal states never change, and a cancel request on them does nothing.
        again = await store.settle("a", "failed", error={"code": -1, "message": "x"})
        assert again is not None and again.status == "completed" and again.error is None
        cancelled = await store.request_cancel("a")
        assert cancelled is not None and not cancelled.cancel_requested
        assert await store.request_cancel("missing") is None
        assert await store.settle("missing", "cancelled") is None
        # The key expires by itself at createdAt + ttlMs (wall-clock).
        ttl = await backend.client.pttl(backend.keys.task("a"))
        assert 0 < ttl <= 60_000


async def test_both_stores_keep_only_the_payload_of_the_status(
    redis: RedisServer, prefix: str
) -> None:
    """The memory and the Redis store settle by one rule (``settled_payload``)."""
    asking = {"ok": {"method": "elicitation/create", "params": {}}}
    async with running(RedisBackend(redis.url, prefix=prefix)) as backend:
        for store in (MemoryTaskStore(), backend.tasks):
            await store.create(record("a"))
            parked = await store.settle(
                "a", "input_required", input_requests=asking, result={"x": 1}, error={"code": 1}
            )
            assert parked is not None and parked.input_requests == asking
            assert parked.result is None and parked.error is None
            with pytest.raises(ValueError):
                await store.settle("a", "completed")  # a completed task needs its result
            with pytest.raises(ValueError):
                await store.settle("a", "failed")  # a failed task needs its error
            resumed = await store.settle("a", "working", input_requests=asking)
            assert resumed is not None and resumed.status == "working"
            assert resumed.input_requests is None
            done = await store.settle("a", "completed", result={"content": []}, error={"code": 1})
            assert done is not None and done.result == {"content": []}
            assert done.error is None and done.input_requests is None


async def test_expired_records_are_gone(redis: RedisServer, prefix: str) -> None:
    offset = 0.0
    backend = RedisBackend(redis.url, prefix=prefix, clock=lambda: time.time() + offset)
    async with running(backend):
        await backend.tasks.create(record("old", ttl_ms=5_000))
        await backend.tasks.create(record("forever", ttl_ms=None))
        assert await backend.tasks.get("old") is not None
        offset = 10.0  # wall-clock moves past the TTL
        assert await backend.tasks.get("old") is None
        assert await backend.tasks.get("forever") is not None
        assert await backend.client.pttl(backend.keys.task("forever")) == -1


async def test_the_bus_reaches_other_instances_only(redis: RedisServer, prefix: str) -> None:
    a, b = RedisBackend(redis.url, prefix=prefix), RedisBackend(redis.url, prefix=prefix)
    seen_a: list[dict[str, Any]] = []
    seen_b: list[dict[str, Any]] = []
    a.bus.subscribe(seen_a.append)
    b.bus.subscribe(seen_b.append)
    async with running(a), running(b):
        await a.bus.publish({"type": "task.cancel", "task": "x"})
        with trio.fail_after(10):
            while not seen_b:
                await trio.sleep(0.01)
        assert seen_b == [{"type": "task.cancel", "task": "x", "origin": a.instance_id}]
        await trio.sleep(0.1)
        assert seen_a == []


def make_server(manager: TaskManager, stopped: list[str]) -> McpServer:
    server = McpServer("redis-tasks", extensions=[Tasks(manager)])

    @server.tool(task="optional")
    async def count(ctx: Context, n: int = 10_000, delay: float = 0.01) -> str:
        try:
            for _ in range(n):
                await checkpoint_cancelled()
                await trio.sleep(delay)
        finally:
            stopped.append("cancelled" if cancelled() else "done")
        return f"counted to {n}"

    return server


@asynccontextmanager
async def instance(
    redis: RedisServer, prefix: str, stopped: list[str], **manager: Any
) -> AsyncIterator[tuple[McpServer, RedisBackend]]:
    """One "server process": its backend, task manager (counting in Redis) and server."""
    server = make_server(TaskManager(**manager), stopped)
    async with task_process(redis, prefix, server, counters=True) as backend:
        yield server, backend


async def test_tasks_cancel_on_one_instance_stops_the_work_on_another(
    redis: RedisServer, prefix: str
) -> None:
    stopped: list[str] = []
    # No re-reading of records: only the bus can carry this cancel.
    async with instance(redis, prefix, stopped, cancel_poll_interval=1000) as (a, _):
        async with instance(redis, prefix, stopped, cancel_poll_interval=1000) as (b, _):
            async with client_of(a) as on_a, client_of(b) as on_b:
                created = await on_a.request("tools/call", {"name": "count", "arguments": {}})
                task_id = created["taskId"]
                assert a.dispatcher.extension(Tasks).manager.running_here(
                    task_id
                ) and not b.dispatcher.extension(Tasks).manager.running_here(task_id)
                assert (await on_b.request("tasks/get", {"taskId": task_id}))["status"] == "working"
                assert (await on_b.request("tasks/cancel", {"taskId": task_id}))["resultType"]
                # Settled well inside the 30 s grace period: the flag stopped it.
                await wait_status(on_b, task_id, "cancelled")
                assert stopped == ["cancelled"]
                assert await a.dispatcher.extension(Tasks).manager.store.get(task_id) is not None
                assert on_a.registry.in_flight_count == 0


async def test_a_cancel_whose_message_was_lost_is_found_by_the_poll(
    redis: RedisServer, prefix: str
) -> None:
    stopped: list[str] = []
    async with instance(redis, prefix, stopped, cancel_poll_interval=0.1) as (a, backend):
        async with client_of(a) as client:
            task_id = (await client.request("tools/call", {"name": "count", "arguments": {}}))[
                "taskId"
            ]
            # Another process recorded the cancel, but its bus message never came.
            await backend.tasks.request_cancel(task_id)
            await wait_status(client, task_id, "cancelled")
            assert stopped == ["cancelled"]


@pytest.mark.redis
async def test_redis_down_then_back(prefix: str) -> None:
    stopped: list[str] = []
    with redis_server() as redis:
        async with instance(redis, prefix, stopped) as (a, backend_a):
            async with instance(redis, prefix, stopped) as (b, _):
                events: list[BackendEvent] = []
                backend_a.events.subscribe(events.append)  # type: ignore[arg-type]
                async with client_of(a) as on_a, client_of(b) as on_b:
                    first = await on_a.request("tools/call", {"name": "count", "arguments": {}})
                    redis.kill()
                    # Cross-process operations fail with a clear error...
                    for _ in range(3):
                        with pytest.raises(McpError) as caught:
                            await on_a.request("tasks/get", {"taskId": first["taskId"]})
                        assert caught.value.code == -32603
                        assert "unavailable" in caught.value.message
                    # ... reported once per outage ...
                    assert [e.name for e in events] == ["backend.unavailable"]
                    # ... while the task runs on, and local cancellation still works.
                    assert a.dispatcher.extension(Tasks).manager.running_here(first["taskId"])
                    await on_a.request("tasks/cancel", {"taskId": first["taskId"]})
                    with trio.fail_after(10):
                        while a.dispatcher.extension(Tasks).manager.running_here(first["taskId"]):
                            await trio.sleep(0.01)
                    assert stopped == ["cancelled"]
                    # An optional task tool is called the ordinary way meanwhile.
                    quick = {"name": "count", "arguments": {"n": 1}}
                    ordinary = await on_a.request("tools/call", quick)
                    assert ordinary["resultType"] == "complete"
                    redis.start()  # same port, empty: the old records are gone
                    with trio.fail_after(15):
                        while True:
                            try:
                                await on_a.request("tasks/get", {"taskId": "probe"})
                            except McpError as exc:
                                if exc.code == -32602:  # "not found": the store answers
                                    break
                            await trio.sleep(0.1)
                    created = await on_a.request("tools/call", {"name": "count", "arguments": {}})
                    assert created["resultType"] == "task"
                    assert events[-1].name == "backend.recovered"
                    # The subscription came back too: a cancel through b reaches a.
                    await on_b.request("tasks/cancel", {"taskId": created["taskId"]})
                    await wait_status(on_b, created["taskId"], "cancelled")
                    assert stopped == ["cancelled", "done", "cancelled"]


async def test_quota_counters_sum_over_live_instances(redis: RedisServer, prefix: str) -> None:
    a = RedisBackend(redis.url, prefix=prefix)
    b = RedisBackend(redis.url, prefix=prefix)
    crashing = RedisBackend(redis.url, prefix=prefix, liveness=0.3)
    async with running(a), running(b):
        assert await a.counters.acquire("calls:t", 3)
        assert await b.counters.acquire("calls:t", 3)
        async with running(crashing):
            assert await crashing.counters.acquire("calls:t", 3)
            assert not await a.counters.acquire("calls:t", 3)
            assert not await b.counters.acquire("calls:t", 3)
        # It stopped without releasing, as a crash would: its unit lapses with it.
        with trio.fail_after(10):
            while not await a.counters.acquire("calls:t", 3):
                await trio.sleep(0.05)
        assert not await b.counters.acquire("calls:t", 3)
        await b.counters.release("calls:t")
        assert await b.counters.acquire("calls:t", 3)
        assert await a.counters.acquire("calls:other", 1)  # counters are independent


async def test_a_task_quota_cannot_be_bypassed_through_another_instance(
    redis: RedisServer, prefix: str
) -> None:
    stopped: list[str] = []
    async with instance(redis, prefix, stopped, max_running_per_owner=1) as (a, _):
        async with instance(redis, prefix, stopped, max_running_per_owner=1) as (b, _):
            async with client_of(a) as on_a, client_of(b) as on_b:
                first = await on_a.request("tools/call", {"name": "count", "arguments": {}})
                with pytest.raises(McpError) as caught:
                    await on_b.request("tools/call", {"name": "count", "arguments": {}})
                assert (
                    caught.value.code == TOO_MANY_REQUESTS
                    and caught.value.data["limit"] == "tenant"
                )
                await on_a.request("tasks/cancel", {"taskId": first["taskId"]})
                await wait_status(on_b, first["taskId"], "cancelled")
                # Its unit was given back: b may run one now.
                again = await on_b.request("tools/call", {"name": "count", "arguments": {}})
                await on_b.request("tasks/cancel", {"taskId": again["taskId"]})
                await wait_status(on_a, again["taskId"], "cancelled")


async def test_the_per_tenant_call_cap_counts_every_process(
    redis: RedisServer, prefix: str
) -> None:
    stopped: list[str] = []
    apps = []
    for _ in range(2):
        server = make_server(TaskManager(), stopped)
        server.limits = ServerLimits(max_calls_per_tenant=1)
        apps.append(McpHttpApp(server, backend=RedisBackend(redis.url, prefix=prefix)))
    async with trio.open_nursery() as nursery:
        one, two = (AsgiClient(app, nursery, client=("192.0.2.7", 1)) for app in apps)
        async with one.lifespan(), two.lifespan():
            long = modern_call(1, "count", {"n": 100_000, "delay": 0.01})
            busy = one.start("POST", headers_of(long), long)
            await busy.wait_started()
            refused = await two.post(headers_of(long), modern_call(2, "count", {"n": 1}))
            assert refused.status == 429 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == TOO_MANY_REQUESTS  # the modern code
            assert refused.json()["error"]["data"] == {"limit": "tenant", "max": 1}
            # Another tenant is not affected.
            other = AsgiClient(apps[1], nursery, client=("192.0.2.8", 1))
            quick = modern_call(3, "count", {"n": 1, "delay": 0.0})
            served = await other.post(headers_of(quick), quick)
            assert served.status == 200
            busy.disconnect()
            await busy.done.wait()
            with trio.fail_after(10):
                while True:
                    retried = await two.post(headers_of(quick), quick)
                    if retried.status == 200:
                        break
                    await trio.sleep(0.02)


async def test_a_task_whose_process_died_is_settled_failed(redis: RedisServer, prefix: str) -> None:
    stopped: list[str] = []
    async with instance(redis, prefix, stopped) as (a, backend):
        async with client_of(a) as client:
            # A record left "working" by a process that died (no liveness key).
            ghost = record("ghost-task")
            ghost.owner, ghost.instance = client.namespace, "dead-instance"
            await backend.tasks.create(ghost)
            await backend.client.delete([backend.keys.alive("dead-instance")])
            status = await client.request("tasks/get", {"taskId": "ghost-task"})
            assert status["status"] == "failed"
            assert status["error"]["message"] == "The server process running it stopped"
            # A live instance's task is left alone.
            live = await client.request("tools/call", {"name": "count", "arguments": {}})
            status = await client.request("tasks/get", {"taskId": live["taskId"]})
            assert status["status"] == "working"
            await client.request("tasks/cancel", {"taskId": live["taskId"]})
            await wait_status(client, live["taskId"], "cancelled")


async def test_task_records_per_owner_are_bounded(redis: RedisServer, prefix: str) -> None:
    offset = 0.0
    backend = RedisBackend(redis.url, prefix=prefix, clock=lambda: time.time() + offset)
    async with running(backend):
        store = backend.tasks
        await store.create(record("one", ttl_ms=5_000), 2)
        await store.create(record("two", ttl_ms=5_000), 2)
        with pytest.raises(TaskStoreFull):
            await store.create(record("three", ttl_ms=5_000), 2)
        assert await store.get("three") is None
        await store.create(record("uncapped", ttl_ms=5_000))  # no cap asked for
        offset = 10.0  # the first ones expired: room again
        await store.create(record("four", ttl_ms=5_000, now=time.time() + offset), 2)
        pattern = backend.keys.base + ":owner:*"
        index = [key async for key in backend.client.scan_iter(pattern)]
        assert len(index) == 1 and 0 < await backend.client.pttl(index[0]) <= 15_000


async def test_sessions_per_tenant_count_every_process(redis: RedisServer, prefix: str) -> None:
    backends = [RedisBackend(redis.url, prefix=prefix) for _ in range(2)]
    apps = [
        McpHttpApp(
            make_server(TaskManager(), []),
            backend=backend,
            http_limits=HttpLimits(max_sessions_per_tenant=2),
        )
        for backend in backends
    ]
    async with trio.open_nursery() as nursery:
        one, two = (AsgiClient(app, nursery, client=("192.0.2.9", 1)) for app in apps)
        async with one.lifespan(), two.lifespan():
            first = await initialize(one)
            second = await initialize(one)
            # The tenant is at its cap, counted over both processes: a new
            # session on the other one makes room by ending the tenant's least
            # recently used idle session, which lives on the first (a tenant
            # whose sessions are all busy is refused: see
            # test_tenant_sessions_across_workers.py).
            await initialize(two)
            evicted = await one.post(legacy_headers(first), legacy_call(4, "count", {"n": 1}))
            assert evicted.status == 404
            # Another tenant is not affected.
            other = AsgiClient(apps[1], nursery, client=("192.0.2.10", 1))
            await initialize(other)
            # Ending a session anywhere frees its place everywhere.  The other
            # process learns it from the bus's session-end message: wait for
            # it (the app's own handler was subscribed first, so it has run).
            ended = trio.Event()
            backends[0].bus.subscribe(
                lambda message: ended.set() if message.get("type") == "session.end" else None
            )
            deleted = await two.request("DELETE", legacy_headers(second))
            assert deleted.status == 204
            with trio.fail_after(10):
                await ended.wait()
            gone = await one.post(legacy_headers(second), legacy_call(5, "count", {"n": 1}))
            assert gone.status == 404
            third = await initialize(two)
            reply = await one.post(legacy_headers(third), legacy_call(6, "count", {"n": 1}))
            assert reply.status == 200  # and usable from the other process
            assert reply.messages()[-1]["result"]["content"][0]["text"] == "counted to 1"


async def test_an_app_whose_redis_is_unreachable_still_serves() -> None:
    """Redis down from the start: the app starts, serves what needs no Redis, says what fails."""
    stopped: list[str] = []
    backend = RedisBackend("redis://127.0.0.1:1/0", op_timeout=0.5, reconnect_delay=0.2)
    events: list[BackendEvent] = []
    backend.events.subscribe(events.append)  # type: ignore[arg-type]
    app = McpHttpApp(make_server(TaskManager(), stopped), backend=backend)
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            quick = modern_call(1, "count", {"n": 1, "delay": 0.0}, capabilities=WITH_TASKS)
            served = await client.post(headers_of(quick), quick)
            assert served.status == 200  # called the ordinary way, not as a task
            assert served.messages()[-1]["result"]["resultType"] == "complete"
            get = modern_request(2, "tasks/get", {"taskId": "x"}, capabilities=WITH_TASKS)
            failed = await client.post(headers_of(get), get)
            assert failed.json()["error"]["code"] == -32603
            session = await initialize(client)  # legacy sessions work on this worker
            reply = await client.post(legacy_headers(session), legacy_call(3, "count", {"n": 1}))
            assert reply.messages()[-1]["result"]["content"][0]["text"] == "counted to 1"
    assert events and events[0].name == "backend.unavailable"
    assert stopped == ["done", "done"]


async def test_shutdown_records_running_tasks_failed_in_redis(
    redis: RedisServer, prefix: str
) -> None:
    stopped: list[str] = []
    async with instance(redis, prefix, stopped) as (a, _):
        async with client_of(a) as client:
            task_id = (await client.request("tools/call", {"name": "count", "arguments": {}}))[
                "taskId"
            ]
    # That process is gone; another one reads what it recorded on its way out.
    async with instance(redis, prefix, stopped) as (b, _), client_of(b) as client:
        status = await client.request("tasks/get", {"taskId": task_id})
        assert status["status"] == "failed"
        assert status["error"] == {"code": -32603, "message": "The server shut down"}
    assert stopped == ["done"]


async def test_backend_events_reach_the_registry_and_are_logged_once(
    caplog: pytest.LogCaptureFixture,
    mcp_registry: Registry,
) -> None:
    """One mcp_registry subscriber sees the backend's events with all the others."""
    backend = RedisBackend("redis://127.0.0.1:1/0", op_timeout=0.5, reconnect_delay=0.2)
    own: list[Event] = []
    backend.events.subscribe(own.append)
    app_events = EventRecorder()
    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel"):
        async with trio.open_nursery() as nursery:
            mcp_registry.events.subscribe(app_events)
            app = McpHttpApp(make_server(TaskManager(), []), mcp_registry, backend=backend)
            client = AsgiClient(app, nursery)
            async with client.lifespan():
                get = modern_request(1, "tasks/get", {"taskId": "x"}, capabilities=WITH_TASKS)
                assert (await client.post(headers_of(get), get)).json()["error"]["code"] == -32603
            # Detached at shutdown: later backend events stay with the backend.
            backend.events.emit(BackendEvent("backend.recovered", "test", ""))
    assert app_events.names()[:1] == ["backend.unavailable"]
    assert "backend.recovered" not in app_events.names()
    assert [e.name for e in own][:1] == ["backend.unavailable"]
    logged = [r for r in caplog.records if r.getMessage().startswith("backend.unavailable")]
    assert len(logged) == 1
