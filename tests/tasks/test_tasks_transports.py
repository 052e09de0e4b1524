"""The Tasks extension on the connection transports: they run the task manager themselves.

In memory on MockClock (the same connection layer as stdio and WebSocket),
then once over a real stdio process and once over a real WebSocket.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import WebSocketServer, open_websocket_url

from trio_mcp_cancel import (
    Event,
    HardCancelEvent,
    Registry,
    RegistryConfig,
    RequestCancelledEvent,
    open_registry,
)
from trio_mcp_cancel.server import ConnectionLimits, Tasks
from trio_mcp_cancel.testing import (
    EventRecorder,
    McpTestClient,
    assert_no_leaks,
    open_test_client,
)
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.stdio import ENVELOPE, SLOW_SERVER, TIMEOUT, call, launched, request
from _support.tasks import GRACE, WITH_TASKS, Seen, get, make_server, start_task

TASKS_META = {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": WITH_TASKS}


def timeline(client: McpTestClient) -> list[tuple[str, str, float]]:
    """``(event name, kind, when)`` for every cancellation event of *client*'s registry."""
    seen: list[tuple[str, str, float]] = []

    def record(event: Event) -> None:
        kind = getattr(event, "kind", None)
        # request.stopped (the log's one-line summary) is tested with the log.
        if isinstance(kind, str) and event.name != "request.stopped":
            seen.append((event.name, kind, trio.current_time()))

    client.registry.events.subscribe(record)
    return seen


async def test_the_memory_transport_runs_the_manager_and_tasks_cancel_has_two_phases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    assert not server.dispatcher.extension(Tasks).manager.running
    async with open_test_client(
        server, client_capabilities=WITH_TASKS, registry_config=RegistryConfig(grace_period=GRACE)
    ) as client:
        assert server.dispatcher.extension(Tasks).manager.running
        events = timeline(client)
        task_id = (await start_task(client, "stubborn", seconds=100))["taskId"]
        await trio.sleep(1.0)
        cancelled_at = trio.current_time()
        assert (await client.request("tasks/cancel", {"taskId": task_id}))["resultType"]
        # Phase one at once: the flag; the tool ignores it and sleeps on.
        assert events == [("request.cancelled", "client", cancelled_at)]
        assert (await get(client, task_id))["status"] == "working"
        await seen.stopped.wait()
        # Phase two exactly one grace period later: the hard cancel.
        assert seen.flagged_at == cancelled_at + GRACE
        assert events[1:] == [("request.hard_cancelled", "client", cancelled_at + GRACE)]
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        assert (await get(client, task_id))["status"] == "cancelled"
        registry = client.registry
    assert not server.dispatcher.extension(Tasks).manager.running
    assert_no_leaks(registry)


async def test_closing_the_connection_stops_its_tasks_with_the_two_phases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with open_test_client(
        server, client_capabilities=WITH_TASKS, registry_config=RegistryConfig(grace_period=GRACE)
    ) as client:
        events = timeline(client)
        cooperative = (await start_task(client, "count", n=100, delay=1.0))["taskId"]
        stubborn = (await start_task(client, "stubborn", seconds=100))["taskId"]
        await trio.sleep(0.5)
        store, registry, closed_at = (
            server.dispatcher.extension(Tasks).manager.store,
            client.registry,
            trio.current_time(),
        )
    # Nobody can poll this connection's tasks any more: they were stopped, and
    # the block ended only once the stubborn one was hard-cancelled.
    assert trio.current_time() == closed_at + GRACE
    assert sorted(events) == [
        ("request.cancelled", "disconnect", closed_at),
        ("request.cancelled", "disconnect", closed_at),
        ("request.hard_cancelled", "disconnect", closed_at + GRACE),
    ]
    for task_id in (cooperative, stubborn):
        record = await store.get(task_id)
        assert record is not None and record.status == "failed"
        assert record.error is not None and record.error["code"] == -32800
        assert record.status_message == "connection closed"
    assert (
        not server.dispatcher.extension(Tasks).manager.running
        and server.dispatcher.extension(Tasks).manager.running_count == 0
    )
    assert_no_leaks(registry)


async def test_connections_share_the_manager_until_the_last_one_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    b_started = trio.Event()
    order: list[str] = []

    async def second_client() -> None:
        async with open_test_client(server, client_capabilities=WITH_TASKS) as b:
            task_id = (await start_task(b, "count", n=3))["taskId"]
            b_started.set()
            await trio.sleep(5.0)
            assert (await get(b, task_id))["status"] == "completed"
            order.append("b done")

    async with trio.open_nursery() as nursery:
        async with open_test_client(server, client_capabilities=WITH_TASKS):
            nursery.start_soon(second_client)
            await b_started.wait()
        # The first client started the manager; its end waited for the second one.
        order.append("a done")
        assert not server.dispatcher.extension(Tasks).manager.running
    assert order == ["b done", "a done"]


async def test_a_manager_the_application_runs_is_left_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        async with open_registry() as registry:
            async with open_test_client(
                server, registry=registry, namespace="session:kept", client_capabilities=WITH_TASKS
            ) as client:
                task_id = (await start_task(client, "count", n=2))["taskId"]
            # A shared namespace: the task outlives the connection, and the manager runs on.
            assert server.dispatcher.extension(
                Tasks
            ).manager.running and server.dispatcher.extension(Tasks).manager.running_here(task_id)
            await server.dispatcher.extension(Tasks).manager.wait_idle()
            record = await server.dispatcher.extension(Tasks).manager.store.get(task_id)
            assert record is not None and record.status == "completed"
        nursery.cancel_scope.cancel()


# -- real transports ---------------------------------------------------------------


@pytest.mark.subprocess
async def test_tasks_over_a_real_stdio_process(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(
            tmp_path, str(SLOW_SERVER), "--stdio", "--grace-period", "0.5"
        ) as server:

            async def ask(request_id: int, method: str, params: dict[str, Any]) -> Any:
                await server.send(request(request_id, method, {**params, "_meta": TASKS_META}))
                answer = await server.next_message()
                assert answer["id"] == request_id, answer
                return answer["result"]

            args = {"n": 1000, "delay": 0.05}
            await server.send(call(1, "count", args, **TASKS_META))
            created = (await server.next_message())["result"]
            assert created["resultType"] == "task" and created["status"] == "working"
            task_id = created["taskId"]
            assert (await ask(2, "tasks/get", {"taskId": task_id}))["status"] == "working"
            assert (await ask(3, "tasks/cancel", {"taskId": task_id}))["resultType"] == "complete"
            request_id = 4
            while (status := await ask(request_id, "tasks/get", {"taskId": task_id}))[
                "status"
            ] == "working":
                request_id += 1
                await trio.sleep(0.02)
            assert status["status"] == "cancelled" and "result" not in status
            # A task still running when stdin closes is stopped too, and the process exits 0.
            await server.send(call(100, "count", args, **TASKS_META))
            assert (await server.next_message())["result"]["resultType"] == "task"
            assert server.proc.stdin is not None
            await server.proc.stdin.aclose()
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            text = server.stderr()
            cancels = [line for line in text.splitlines() if line.startswith("request ")]
            assert len(cancels) == 2, text
            assert all(" in task:session:stdio-" in line for line in cancels)
            assert "cancelled by the client" in cancels[0]
            assert "cancelled on disconnect" in cancels[1]
            # The count tool obeys the flag: no hard cancel was needed.
            assert "hard-cancelled" not in text
            assert "Traceback" not in text


@pytest.mark.subprocess
async def test_sigterm_stops_a_stdio_task_as_a_server_shutdown(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with launched(
            tmp_path, str(SLOW_SERVER), "--stdio", "--grace-period", "0.5"
        ) as server:
            await server.send(call(1, "count", {"n": 1000, "delay": 0.05}, **TASKS_META))
            assert (await server.next_message())["result"]["resultType"] == "task"
            server.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(5):
                assert await server.proc.wait() == 0
            text = server.stderr()
            [cancel] = [line for line in text.splitlines() if line.startswith("request ")]
            assert " in task:session:stdio-" in cancel
            assert "cancelled by the server ('server shutting down'): stopped " in cancel
            assert "Traceback" not in text


@pytest.mark.mcp_registry(grace_period=GRACE)
async def test_tasks_over_a_real_websocket(mcp_registry: Registry) -> None:
    seen = Seen()
    server = make_server(seen)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(serve_mcp_websocket, server, mcp_registry)
            assert server.dispatcher.extension(Tasks).manager.running
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url) as ws:

                async def ask(request_id: int, method: str, params: dict[str, Any]) -> Any:
                    message = request(request_id, method, {**params, "_meta": TASKS_META})
                    await ws.send_message(json.dumps(message))
                    answer = json.loads(await ws.get_message())
                    assert answer["id"] == request_id, answer
                    return answer["result"]

                created = await ask(
                    1, "tools/call", {"name": "count", "arguments": {"n": 1000, "delay": 0.05}}
                )
                assert created["resultType"] == "task"
                task_id = created["taskId"]
                assert (await ask(2, "tasks/cancel", {"taskId": task_id}))["resultType"]
                await seen.stopped.wait()
                await server.dispatcher.extension(Tasks).manager.wait_idle()
                assert (await ask(3, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"
            nursery.cancel_scope.cancel()
    assert not server.dispatcher.extension(Tasks).manager.running
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=None)
async def test_a_websocket_shutdown_stops_a_connections_task_by_the_shutdowns_deadline(
    mcp_registry: Registry,
) -> None:
    # A task that ignores the flag, no grace period anywhere: only the
    # shutdown's own deadline (graceful_timeout less the answer time) ends it.
    seen = Seen()
    server = make_server(seen)
    shutdown = trio.Event()
    events = EventRecorder.attach(mcp_registry)
    limits = ConnectionLimits(disconnect_grace_period=None)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            returned = trio.Event()

            async def serving(*, task_status: trio.TaskStatus[WebSocketServer]) -> None:
                await serve_mcp_websocket(
                    server, mcp_registry, limits=limits, shutdown=shutdown,
                    graceful_timeout=1.0, task_status=task_status,
                )  # fmt: skip
                returned.set()

            ws_server = await nursery.start(serving)
            async with open_websocket_url(f"ws://127.0.0.1:{ws_server.port}/mcp") as ws:
                params = {"name": "stubborn", "arguments": {}, "_meta": TASKS_META}
                await ws.send_message(json.dumps(request(1, "tools/call", params)))
                created = json.loads(await ws.get_message())
                assert created["result"]["resultType"] == "task", created
                while mcp_registry.in_flight_count == 0:
                    await trio.sleep(0.01)
                began = trio.current_time()
                shutdown.set()
                await returned.wait()
            assert trio.current_time() - began < 1.0
    cancels = events.of_type(RequestCancelledEvent)
    assert [(e.kind, e.reason) for e in cancels] == [("server", "server shutting down")]
    assert [e.kind for e in events.of_type(HardCancelEvent)] == ["server"]
    assert_no_leaks(mcp_registry)
