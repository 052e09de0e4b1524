"""Hostile clients against the task bounds (issue 20, findings 3 and 4).

Quotas are the *tenant's* (principal, else address bucket, else the
process), so nine connections of one tenant get no more task slots than
one, and never another tenant's; a full store refuses (``TOO_MANY_REQUESTS``,
``data.limit == "task_store"``) instead of evicting somebody's unexpired
record; and creating a task never walks the records that have not expired
(checked structurally, never by timing).  In memory on MockClock, then
over real WebSocket connections on 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import WebSocketConnection, open_websocket_url

from trio_mcp_cancel import Registry
from trio_mcp_cancel.backends.base import TaskStoreFull
from trio_mcp_cancel.backends.memory import PURGE_BATCH, MemoryTaskStore
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.backends.task_records import TaskRecord
from trio_mcp_cancel.http import bearer_auth
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.lowlevel.wire import TOO_MANY_REQUESTS
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import McpError, McpTestClient, open_test_client
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.redis import prefix, redis, running

__all__ = ["prefix", "redis"]  # pytest fixtures

WITH_TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TASKS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
}
EPOCH = 1_800_000_000.0
TIMEOUT = 10


def wall_clock() -> float:
    """Wall-clock seconds that MockClock drives (stores keep wall-clock times)."""
    return EPOCH + trio.current_time()


def make_server(
    release: trio.Event, store: MemoryTaskStore | None = None, **manager: Any
) -> McpServer:
    tasks = TaskManager(
        store=MemoryTaskStore(clock=wall_clock) if store is None else store, **manager
    )
    server = McpServer("hostile-tasks", extensions=[Tasks(tasks)])

    @server.tool(task="optional")
    async def hold(ctx: Context) -> str:
        await release.wait()
        return "released"

    @server.tool(task="optional")
    async def instant(ctx: Context) -> str:
        return "done"

    return server


async def try_task(client: McpTestClient, name: str) -> dict[str, Any] | McpError:
    """The ``CreateTaskResult``, or the refusal."""
    try:
        return await client.request("tools/call", {"name": name, "arguments": {}})
    except McpError as exc:
        return exc


# -- tenant-scoped running caps, in memory ------------------------------------------


async def test_nine_connections_of_one_tenant_share_its_cap_and_leave_the_rest_to_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    server = make_server(release)  # the defaults: 256 server-wide, 32 per tenant
    manager = server.dispatcher.extension(Tasks).manager
    assert manager.max_running_per_owner * 8 <= manager.max_running
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        async with (
            open_test_client(server, principal="alice", client_capabilities=WITH_TASKS) as alice,
        ):
            mallory: list[McpTestClient] = []
            outcomes: list[dict[str, Any] | McpError] = []

            async def connect(task_status: trio.TaskStatus[None]) -> None:
                async with open_test_client(
                    server, principal="mallory", client_capabilities=WITH_TASKS
                ) as client:
                    mallory.append(client)
                    task_status.started()
                    await release.wait()

            for _ in range(9):
                await nursery.start(connect)
            # Each of the nine connections asks for a whole server's worth of slots.
            for client in mallory:
                for _ in range(manager.max_running // 8):
                    outcomes.append(await try_task(client, "hold"))
            created = [o for o in outcomes if isinstance(o, dict)]
            refused = [o for o in outcomes if isinstance(o, McpError)]
            assert len(created) == manager.max_running_per_owner == manager.running_count
            assert refused and all(
                e.code == TOO_MANY_REQUESTS and e.data == {"limit": "tenant", "max": 32}
                for e in refused
            )
            # Another tenant still gets every slot it is entitled to.
            for _ in range(manager.max_running_per_owner):
                answer = await try_task(alice, "hold")
                assert isinstance(answer, dict) and answer["status"] == "working"
            # Quotas are shared, visibility is not: another connection of the
            # same tenant still cannot see a task it did not create.
            first = created[0]["taskId"]
            with pytest.raises(McpError) as caught:
                await mallory[1].request("tasks/get", {"taskId": first})
            assert caught.value.code == -32602
            assert (await mallory[0].request("tasks/get", {"taskId": first}))["status"] == "working"
            release.set()
            await manager.wait_idle()
        nursery.cancel_scope.cancel()


async def test_connections_without_a_principal_are_one_tenant_like_a_stdio_process(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    server = make_server(release, max_running_per_owner=2, max_running=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        async with (
            open_test_client(server, client_capabilities=WITH_TASKS) as a,
            open_test_client(server, client_capabilities=WITH_TASKS) as b,
        ):
            assert isinstance(await try_task(a, "hold"), dict)
            assert isinstance(await try_task(b, "hold"), dict)
            refused = await try_task(b, "hold")
            assert isinstance(refused, McpError)
            assert refused.data == {"limit": "tenant", "max": 2}
            release.set()
            await server.dispatcher.extension(Tasks).manager.wait_idle()
        nursery.cancel_scope.cancel()


# -- a full store refuses; it never evicts ----------------------------------------


async def test_a_full_store_refuses_and_another_tenants_finished_task_stays_readable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryTaskStore(clock=wall_clock, max_tasks=50)
    server = make_server(trio.Event(), store, ttl_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        async with (
            open_test_client(server, principal="alice", client_capabilities=WITH_TASKS) as alice,
            open_test_client(server, principal="mallory", client_capabilities=WITH_TASKS) as mal,
        ):
            kept = await try_task(alice, "instant")
            assert isinstance(kept, dict)
            await server.dispatcher.extension(Tasks).manager.wait_idle()
            await trio.sleep(1.0)
            # Mallory floods instant tasks (each well within her own quota).
            refusals: list[McpError] = []
            for _ in range(100):
                answer = await try_task(mal, "instant")
                await server.dispatcher.extension(Tasks).manager.wait_idle()
                if isinstance(answer, McpError):
                    refusals.append(answer)
            assert len(refusals) == 100 - 49 and len(store) == 50
            assert all(
                e.code == TOO_MANY_REQUESTS and e.data == {"limit": "task_store", "max": 50}
                for e in refusals
            )
            # Alice's finished task is still there, with its result, until its TTL.
            await trio.sleep(58.0)
            status = await alice.request("tasks/get", {"taskId": kept["taskId"]})
            assert status["status"] == "completed" and status["result"]["content"]
            # Past the TTL the expired records make room again (nothing else does).
            await trio.sleep(2.0)
            with pytest.raises(McpError):
                await alice.request("tasks/get", {"taskId": kept["taskId"]})
            assert isinstance(await try_task(alice, "instant"), dict)
            await server.dispatcher.extension(Tasks).manager.wait_idle()
        nursery.cancel_scope.cancel()


# -- the store itself: counts, refusals and the cost of purging ---------------------


class Clock:
    def __init__(self) -> None:
        self.now = EPOCH

    def __call__(self) -> float:
        return self.now


def record(
    task_id: str, now: float, *, owner: str = "o", tenant: str = "", ttl_ms: int | None = 10_000
) -> TaskRecord:
    return TaskRecord(
        task_id=task_id, owner=owner, tenant=tenant, created_at=now, updated_at=now, ttl_ms=ttl_ms
    )


class NoScan(dict[str, TaskRecord]):
    """A record table that fails the test if anybody walks it."""

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the store walked its records")

    def values(self) -> Any:
        raise AssertionError("the store walked its records")

    def items(self) -> Any:
        raise AssertionError("the store walked its records")


async def test_creating_in_a_full_store_never_visits_its_unexpired_records() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock=clock, max_tasks=100_010)
    for i in range(100_000):
        await store.create(record(f"live-{i}", clock.now, tenant=f"t{i % 100}", ttl_ms=3_600_000))
    for i in range(10):
        await store.create(record(f"soon-{i}", clock.now, tenant="soon", ttl_ms=1_000))
    store._records = NoScan(store._records)
    clock.now += 2.0
    with pytest.raises(TaskStoreFull) as full:
        # The tenant is full (and so would be the store without the purge).
        await store.create(record("x", clock.now, tenant="t1"), max_per_owner=1000)
    assert full.value.limit == "tasks" and full.value.cap == 1000
    # The purge looked at the ten expired records and nothing else.
    assert store.touched == 10 and len(store) == 100_000
    await store.create(record("new", clock.now, tenant="newcomer"), max_per_owner=1000)
    assert store.touched == 10 and store.count("newcomer") == 1 and store.count("soon") == 0
    # Full again: refused, and nobody's unexpired record was dropped for it.
    for i in range(9):
        await store.create(record(f"more-{i}", clock.now, tenant="newcomer"))
    with pytest.raises(TaskStoreFull) as full:
        await store.create(record("one-too-many", clock.now, tenant="newcomer"))
    assert full.value.limit == "task_store" and full.value.cap == 100_010
    assert len(store) == 100_010 and store.touched == 10


async def test_a_store_at_capacity_refuses_even_when_every_record_is_finished() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock=clock, max_tasks=3)
    for i in range(3):
        await store.create(record(f"done-{i}", clock.now, tenant=f"victim-{i}"))
        await store.settle(f"done-{i}", "completed", result={"content": []})
    with pytest.raises(TaskStoreFull) as full:
        await store.create(record("flood", clock.now, tenant="mallory"))
    assert (full.value.limit, full.value.cap) == ("task_store", 3)
    for i in range(3):
        kept = await store.get(f"done-{i}")
        assert kept is not None and kept.status == "completed"
    clock.now += 10.0  # their TTL: now they may go
    await store.create(record("flood", clock.now, tenant="mallory"))
    assert len(store) == 1 and await store.get("done-0") is None


async def test_the_tenant_quota_spans_owners_and_frees_as_records_expire() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock=clock)
    await store.create(record("a", clock.now, owner="conn-1", tenant="ip:192.0.2.1"), 2)
    await store.create(record("b", clock.now + 5, owner="conn-2", tenant="ip:192.0.2.1"), 2)
    with pytest.raises(TaskStoreFull) as full:
        await store.create(record("c", clock.now, owner="conn-3", tenant="ip:192.0.2.1"), 2)
    assert (full.value.limit, full.value.cap) == ("tasks", 2)
    await store.create(record("d", clock.now, owner="conn-3", tenant="ip:192.0.2.2"), 2)
    # No tenant: the owner is the quota key.
    await store.create(record("e", clock.now, owner="conn-4"), 2)
    assert store.count("ip:192.0.2.1") == 2 and store.count("conn-4") == 1
    clock.now += 10.0  # "a" (and "d", "e") expired; "b" has 5 s left
    await store.create(record("c", clock.now, owner="conn-3", tenant="ip:192.0.2.1"), 2)
    assert store.count("ip:192.0.2.1") == 2 and store.count("ip:192.0.2.2") == 0
    assert await store.get("b") is not None and await store.get("a") is None


async def test_a_record_dropped_on_read_is_counted_once() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock=clock)
    await store.create(record("a", clock.now, tenant="t"))
    await store.create(record("forever", clock.now, tenant="t", ttl_ms=None))
    clock.now += 10.0
    assert await store.get("a") is None  # dropped here...
    assert store.count("t") == 1
    assert await store.purge() == 0  # ...so its heap entry is skipped, not dropped twice
    assert store.touched == 1 and store.count("t") == 1 and len(store) == 1


async def test_a_long_purge_lets_other_tasks_run() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock=clock)
    for i in range(4 * PURGE_BATCH):
        await store.create(record(f"r{i}", clock.now, ttl_ms=1_000))
    clock.now += 2.0
    ticks = 0
    done = False

    async def spin() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(spin)
        await trio.lowlevel.checkpoint()
        before = ticks
        assert await store.purge() == 4 * PURGE_BATCH
        during = ticks - before
        done = True
    assert during >= 3  # the spinner ran between the purge's batches
    assert len(store) == 0 and store.touched == 4 * PURGE_BATCH


async def test_redis_counts_a_tenants_records_across_its_owners(redis: Any, prefix: str) -> None:
    offset = 0.0
    backend = RedisBackend(redis.url, prefix=prefix, clock=lambda: time.time() + offset)
    async with running(backend):
        store = backend.tasks
        now = store.clock()
        await store.create(record("a", now, owner="conn-1", tenant="principal:m"), 2)
        await store.create(record("b", now, owner="conn-2", tenant="principal:m"), 2)
        with pytest.raises(TaskStoreFull) as full:
            await store.create(record("c", now, owner="conn-3", tenant="principal:m"), 2)
        assert (full.value.limit, full.value.cap) == ("tasks", 2)
        await store.create(record("c", now, owner="conn-3", tenant="principal:other"), 2)
        stored = await store.get("a")
        assert stored is not None and (stored.owner, stored.tenant) == ("conn-1", "principal:m")
        # Uncapped creations trim the expired members too: the index never
        # grows with records that are gone.
        index = backend.keys.owner("principal:m")
        for i in range(3):
            offset += 20.0
            await store.create(record(f"u{i}", store.clock(), tenant="principal:m"))
            assert await backend.client.zcard(index) == 1


# -- over real WebSocket connections --------------------------------------------------


@asynccontextmanager
async def ws_serving(registry: Registry, server: McpServer, **options: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        ws_server = await nursery.start(
            partial(serve_mcp_websocket, server, registry, "127.0.0.1", 0, **options)
        )
        yield f"ws://127.0.0.1:{ws_server.port}/mcp"
        nursery.cancel_scope.cancel()


async def ws_task(ws: WebSocketConnection, request_id: int, name: str) -> dict[str, Any]:
    params = {"name": name, "arguments": {}, "_meta": TASKS_META}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    await ws.send_message(json.dumps(message))
    answer = json.loads(await ws.get_message())
    assert isinstance(answer, dict) and answer["id"] == request_id
    return answer


Headers = list[tuple[bytes, bytes]]


@asynccontextmanager
async def nine_and_one(
    url: str, mallory: Headers, alice: Headers
) -> AsyncIterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Nine connections with *mallory*'s headers each start one task, then one with *alice*'s.

    Yields the nine answers and the last one while every connection is open.
    """
    async with trio.open_nursery() as nursery:
        sockets = [await nursery.start(_connect, url, mallory) for _ in range(9)]
        answers = [await ws_task(ws, i, "hold") for i, ws in enumerate(sockets)]
        other = await nursery.start(_connect, url, alice)
        yield answers, await ws_task(other, 99, "hold")
        nursery.cancel_scope.cancel()


async def _connect(
    url: str, headers: Headers, task_status: trio.TaskStatus[WebSocketConnection]
) -> None:
    async with open_websocket_url(url, extra_headers=headers) as ws:
        task_status.started(ws)
        await trio.sleep_forever()


def split(answers: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """How many answers created a task, and the errors of the others."""
    created = sum(1 for a in answers if a.get("result", {}).get("resultType") == "task")
    return created, [a["error"] for a in answers if "error" in a]


async def test_nine_websocket_connections_from_one_address_are_one_tenant(
    mcp_registry: Registry,
) -> None:
    release = trio.Event()
    server = make_server(release, MemoryTaskStore(), max_running=8, max_running_per_owner=3)
    with trio.fail_after(TIMEOUT):
        async with ws_serving(mcp_registry, server) as url:
            async with nine_and_one(url, [], []) as (answers, last):
                created, errors = split([*answers, last])
                assert (
                    created == 3 and server.dispatcher.extension(Tasks).manager.running_count == 3
                )
                tenant_full = {"limit": "tenant", "max": 3}
                assert [(e["code"], e["data"]) for e in errors] == [
                    (TOO_MANY_REQUESTS, tenant_full)
                ] * 7
                release.set()
                await server.dispatcher.extension(Tasks).manager.wait_idle()


async def test_nine_websocket_connections_of_one_principal_cannot_take_anothers_slots(
    mcp_registry: Registry,
) -> None:
    release = trio.Event()
    server = make_server(release, MemoryTaskStore(), max_running=8, max_running_per_owner=3)
    auth = bearer_auth({"m-token": "mallory", "a-token": "alice"})
    mallory = [(b"authorization", b"Bearer m-token")]
    alice = [(b"authorization", b"Bearer a-token")]
    with trio.fail_after(TIMEOUT):
        async with ws_serving(mcp_registry, server, auth=auth) as url:
            async with nine_and_one(url, mallory, alice) as (answers, last):
                created, errors = split(answers)
                assert created == 3 and len(errors) == 6
                assert all(e["data"] == {"limit": "tenant", "max": 3} for e in errors)
                # Per connection, the nine took all eight slots and Alice got "server".
                assert last["result"]["resultType"] == "task", last
                assert server.dispatcher.extension(Tasks).manager.running_count == 4
                release.set()
                await server.dispatcher.extension(Tasks).manager.wait_idle()
