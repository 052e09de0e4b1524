"""A task whose ``CreateTaskResult`` never reached the client is cancelled (issue 10).

A client that cancels a ``tools/call`` (closing its stream, or its
connection) while the server is creating the task never learns the task
id: nobody could poll or cancel it, and it would run until it ends or its
TTL.  The server cancels it instead, with the two phases (flag now, hard
cancel after the grace period), and it settles ``cancelled``.  A task whose
creation *was* delivered is never touched by the end of that request.
"""

from __future__ import annotations

import json
import math
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RegistryConfig, cancelled
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.backends.task_records import TaskRecord
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, Tasks
from trio_mcp_cancel.testing import McpTestClient, open_test_client
from trio_mcp_cancel.transports._connection import MessageConnection, connection_caller

from _support.asgi import AsgiClient, headers_of, modern_call
from _support.tasks import GRACE, WITH_TASKS, wall_clock


@attrs.define(eq=False)
class GatedStore(MemoryTaskStore):
    """Holds each ``create`` until the test opens the gate: the window in which
    the client goes away.  The record is stored first, as a durable store would."""

    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    created: list[str] = attrs.field(factory=list)

    async def create(self, record: TaskRecord, max_per_owner: int | None = None) -> None:
        await super().create(record, max_per_owner)
        self.created.append(record.task_id)
        self.entered.set()
        await self.gate.wait()


class Seen:
    def __init__(self) -> None:
        self.flagged_at: float | None = None
        self.stopped_at: float | None = None
        self.stopped = trio.Event()


def make_server(seen: Seen, store: MemoryTaskStore) -> McpServer:
    server = McpServer("lost-task-test", extensions=[Tasks(TaskManager(store=store))])

    @server.tool(task="optional")
    async def stubborn(ctx: Context, seconds: float = 1000.0) -> str:
        """Notes when the flag goes up, then ignores it: only the hard cancel stops it."""
        try:
            deadline = trio.current_time() + seconds
            while trio.current_time() < deadline:
                if cancelled() and seen.flagged_at is None:
                    seen.flagged_at = trio.current_time()
                await trio.sleep(0.05)
        finally:
            seen.stopped_at = trio.current_time()
            seen.stopped.set()
        return "finished"

    return server


@attrs.define(eq=False)
class Rig:
    """A server whose tool notes when it is flagged and stopped, on a gated store."""

    seen: Seen = attrs.field(factory=Seen)
    store: GatedStore = attrs.field(factory=lambda: GatedStore(clock=wall_clock))
    server: McpServer = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.server = make_server(self.seen, self.store)

    def client(self, **options: Any) -> AbstractAsyncContextManager[McpTestClient]:
        """An in-memory client that declares the Tasks extension."""
        return open_test_client(
            self.server,
            client_capabilities=WITH_TASKS,
            **options,
            registry_config=RegistryConfig(grace_period=GRACE),
        )

    async def assert_stopped(self, cancelled_at: float | None) -> None:
        """Wait for the tool to stop; it was cancelled at *cancelled_at* in two
        phases (the flag at once, the hard cancel a grace period later), or,
        with ``None``, left alone to finish."""
        await self.seen.stopped.wait()
        await self.server.dispatcher.extension(Tasks).manager.wait_idle()
        if cancelled_at is None:
            assert self.seen.flagged_at is None
            return
        assert self.seen.flagged_at is not None and self.seen.flagged_at - cancelled_at < 0.5
        assert self.seen.stopped_at is not None
        assert GRACE <= self.seen.stopped_at - cancelled_at < GRACE + 0.5

    async def status(self, task_id: str | None = None) -> str:
        """The stored status of *task_id* (default: the first task created)."""
        record = await self.store.get(self.store.created[0] if task_id is None else task_id)
        assert record is not None
        return record.status


@pytest.mark.parametrize("json_response", [False, True])
async def test_http_stream_closed_while_the_task_is_created_cancels_the_task(
    autojump_clock: trio.testing.MockClock, json_response: bool
) -> None:
    rig = Rig()
    store = rig.store
    app = McpHttpApp(
        rig.server, registry_config=RegistryConfig(grace_period=GRACE), json_response=json_response
    )
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            message = modern_call(1, "stubborn", {}, capabilities=WITH_TASKS)
            exchange = client.start("POST", headers_of(message), message)
            await store.entered.wait()
            exchange.disconnect()  # the client gives up while the task is being created
            await trio.testing.wait_all_tasks_blocked()
            gone_at = trio.current_time()
            store.gate.set()
            await exchange.done.wait()
            assert not any("result" in m for m in exchange.messages() if isinstance(m, dict))
            await rig.assert_stopped(cancelled_at=gone_at)
            assert await rig.status() == "cancelled"
            assert rig.server.dispatcher.extension(Tasks).manager.running_count == 0


async def test_http_task_whose_creation_was_delivered_survives_the_stream_closing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rig = Rig()
    rig.store.gate.set()
    app = McpHttpApp(rig.server, registry_config=RegistryConfig(grace_period=GRACE))
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            message = modern_call(1, "stubborn", {"seconds": 10.0}, capabilities=WITH_TASKS)
            created = await client.post(headers_of(message), message)
            task = created.messages()[-1]["result"]
            assert task["resultType"] == "task"
            created.disconnect()  # after the answer: the task is the client's now
            await rig.assert_stopped(cancelled_at=None)
            assert await rig.status(task["taskId"]) == "completed"


@pytest.mark.mcp_registry(grace_period=GRACE)
@pytest.mark.parametrize("how", ["write fails", "write hangs"])
async def test_message_stream_reply_never_written_cancels_the_task(
    autojump_clock: trio.testing.MockClock, how: str, mcp_registry: Registry
) -> None:
    """stdio / WebSocket / memory: the peer goes away before the reply is written.

    (A ``notifications/cancelled`` cannot overtake the creation there: the
    next message is read only once the ``CreateTaskResult`` is queued, so the
    client always learns the task id and can ``tasks/cancel`` it.)
    """
    rig = Rig()
    store, server = rig.store, rig.server
    written: list[str] = []

    async def write(text: str) -> None:
        written.append(text)
        if how == "write fails":
            raise trio.BrokenResourceError("the peer went away")
        await trio.sleep_forever()  # the peer stopped reading: stalled after write_timeout

    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        connection = MessageConnection(
            server,
            connection_caller("test", mcp_registry),
            write,
            limits=ConnectionLimits(write_timeout=5.0),
        )
        to_server, incoming = trio.open_memory_channel[str](math.inf)
        nursery.start_soon(connection.serve, incoming)
        to_server.send_nowait(json.dumps(modern_call(1, "stubborn", {}, capabilities=WITH_TASKS)))
        await store.entered.wait()
        store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert [json.loads(text)["id"] for text in written] == [1]
        lost_at = trio.current_time() + (5.0 if how == "write hangs" else 0.0)
        await rig.assert_stopped(cancelled_at=lost_at)
        assert await rig.status() == "cancelled"
        to_server.close()
        nursery.cancel_scope.cancel()


async def test_memory_client_gets_its_task_when_its_connection_ends_during_creation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Closing the client's side ends the incoming stream only: the reply is still
    written, the client knows the task, and the task is left alone.

    The client names its namespace, as a caller that can poll from elsewhere
    would: a connection's *own* tasks are stopped when it closes (nobody could
    poll them), which is not what this test is about."""
    rig = Rig()
    store = rig.store
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.server.dispatcher.extension(Tasks).manager.run)
        async with rig.client(namespace="principal:p") as client:
            call = client.start_request(
                "tools/call", {"name": "stubborn", "arguments": {"seconds": 10.0}}
            )
            await store.entered.wait()
            client.disconnect()
            store.gate.set()
            await trio.testing.wait_all_tasks_blocked()
        assert call.response is not None
        assert call.response["result"]["taskId"] == store.created[0]
        await rig.assert_stopped(cancelled_at=None)
        assert await rig.status() == "completed"
        nursery.cancel_scope.cancel()


async def test_a_cancel_sent_before_the_client_read_the_task_cancels_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """stdio / WebSocket / memory: ``notifications/cancelled`` for the ``tools/call``
    arrives just after its ``CreateTaskResult`` was written.  The client ignores
    answers to what it cancelled, so the task would run unseen: it is cancelled."""
    rig = Rig()
    rig.store.gate.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.server.dispatcher.extension(Tasks).manager.run)
        async with rig.client() as client:
            call = client.start_request("tools/call", {"name": "stubborn", "arguments": {}})
            await client.settle()
            assert call.response is not None and call.response["result"]["resultType"] == "task"
            cancel_at = trio.current_time()
            await client.send_text(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": call.id, "reason": "changed my mind"},
                    }
                )
            )
            await rig.assert_stopped(cancelled_at=cancel_at)
            assert await rig.status() == "cancelled"
        nursery.cancel_scope.cancel()


async def test_a_reused_request_id_forgets_the_task_it_once_created(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rig = Rig()
    rig.store.gate.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.server.dispatcher.extension(Tasks).manager.run)
        async with rig.client() as client:
            first = client.start_request(
                "tools/call", {"name": "stubborn", "arguments": {"seconds": 5.0}}
            )
            await client.settle()
            assert first.response is not None
            assert client.caller.channel is not None
            assert list(client.caller.channel.late_cancels) == [first.id]
            # The same id again (on a request that is not a task): the old task is forgotten.
            raw = {"jsonrpc": "2.0", "id": first.id, "method": "ping", "params": {}}
            await client.send_text(json.dumps(raw))
            await client.settle()
            assert client.caller.channel.late_cancels == {}
            await client.send_text(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": first.id},
                    }
                )
            )
            await rig.assert_stopped(cancelled_at=None)
            assert await rig.status() == "completed"
        nursery.cancel_scope.cancel()
