"""The Tasks extension (SEP-2663) on MockClock, in memory: state machine, TTL, grace, bounds."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.backends.task_records import TaskRecord, iso8601, transition
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel.wire import TOO_MANY_REQUESTS
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import open_test_client

from _support.asgi import AsgiClient, headers_of, modern_call, modern_request
from _support.tasks import (
    EPOCH,
    GRACE,
    TASKS,
    WITH_TASKS,
    Seen,
    get,
    make_server,
    refusal,
    serving,
    start_task,
)


async def test_call_returns_a_durable_task_that_completes_with_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with serving(server) as (client, _):
        created = await start_task(client, "count", n=3, delay=1.0)
        assert created["status"] == "working"
        assert len(created["taskId"]) >= 40  # 256 random bits
        assert created["ttlMs"] == 3_600_000 and created["pollIntervalMs"] == 1000
        assert created["createdAt"] == iso8601(EPOCH) == created["lastUpdatedAt"]
        assert created["createdAt"].endswith("Z")
        # Durable before the reply: tasks/get resolves at once.
        polled = await get(client, created["taskId"])
        assert polled["resultType"] == "complete" and polled["status"] == "working"
        assert "result" not in polled
        await trio.sleep(3.5)
        done = await get(client, created["taskId"])
        assert done["status"] == "completed"
        assert done["result"]["content"] == [{"type": "text", "text": "counted to 3"}]
        assert done["lastUpdatedAt"] == iso8601(EPOCH + 3.0)
        assert server.dispatcher.extension(Tasks).manager.running_count == 0
        assert client.registry.in_flight_count == 0


async def test_without_the_extension_the_call_is_ordinary_and_tasks_methods_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    async with serving(server, capabilities={}) as (client, _):
        result = await client.request("tools/call", {"name": "count", "arguments": {"n": 1}})
        assert result["resultType"] == "complete"
        assert result["content"][0]["text"] == "counted to 1"
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            error = await refusal(client, method, {"taskId": "x"})
            assert error.code == -32021
            assert error.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        error = await refusal(client, "tools/call", {"name": "only_task", "arguments": {}})
        assert error.code == -32021
        # Called the ordinary way, a tool raising JsonRpcError gets that error.
        error = await refusal(client, "tools/call", {"name": "protocol_error_job", "arguments": {}})
        assert (error.code, error.data) == (-32603, {"why": "test"})


async def test_unknown_and_removed_methods_and_bad_ids(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    async with serving(server) as (client, _):
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            error = await refusal(client, method, {"taskId": "no-such-task"})
            assert error.code == -32602
            error = await refusal(client, method, {"taskId": 12})
            assert error.code == -32602
        for removed in ("tasks/result", "tasks/list"):
            error = await refusal(client, removed, {"taskId": "x"})
            assert error.code == -32601
        # Plain tools never become tasks.
        result = await client.request("tools/call", {"name": "plain", "arguments": {}})
        assert result["resultType"] == "complete"


async def test_cancel_sets_the_flag_at_once_and_the_task_settles_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with serving(server) as (client, _):
        created = await start_task(client, "count", n=100, delay=1.0)
        task_id = created["taskId"]
        await trio.sleep(2.5)
        assert client.registry.in_flight(task_id, "task:" + client.namespace)
        # Our tasks never ask for input: tasks/update is acknowledged and changes nothing.
        update = {"taskId": task_id, "inputResponses": {"x": {"action": "accept"}}}
        assert (await client.request("tasks/update", update))["resultType"] == "complete"
        assert (await get(client, task_id))["status"] == "working"
        cancelled_at = trio.current_time()
        ack = await client.request("tasks/cancel", {"taskId": task_id})
        assert set(ack) - {"_meta"} == {"resultType"} and ack["resultType"] == "complete"
        await seen.stopped.wait()
        # The tool saw the flag at its next step and stopped by itself, in time.
        assert seen.flagged_at is not None and seen.flagged_at - cancelled_at <= 1.0
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        status = await get(client, task_id)
        assert status["status"] == "cancelled" and "result" not in status
        # Idempotent on a finished task.
        assert (await client.request("tasks/cancel", {"taskId": task_id}))["resultType"]
        assert (await get(client, task_id))["status"] == "cancelled"
        assert client.registry.in_flight_count == 0


async def test_a_tool_ignoring_the_flag_is_hard_cancelled_after_the_grace_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with serving(server) as (client, _):
        task_id = (await start_task(client, "stubborn"))["taskId"]
        await trio.sleep(1.0)
        cancelled_at = trio.current_time()
        await client.request("tasks/cancel", {"taskId": task_id})
        await trio.sleep(GRACE - 0.5)
        assert (await get(client, task_id))["status"] == "working"  # still in its grace
        await seen.stopped.wait()
        assert trio.current_time() - cancelled_at == pytest.approx(GRACE)
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        assert (await get(client, task_id))["status"] == "cancelled"


async def test_errors_settle_failed_and_tool_errors_settle_completed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    async with serving(server) as (client, _):
        failed_id = (await start_task(client, "protocol_error_job"))["taskId"]
        iserror_id = (await start_task(client, "failing_job"))["taskId"]
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        failed = await get(client, failed_id)
        assert failed["status"] == "failed"
        assert failed["error"] == {
            "code": -32603,
            "message": "backend exploded",
            "data": {"why": "test"},
        }
        assert failed["statusMessage"] == "backend exploded"
        completed = await get(client, iserror_id)
        assert completed["status"] == "completed" and completed["result"]["isError"] is True
        assert "ValueError: bad input" in completed["result"]["content"][0]["text"]
        # Finished tasks stay finished: cancelling changes nothing.
        await client.request("tasks/cancel", {"taskId": failed_id})
        assert (await get(client, failed_id))["status"] == "failed"


async def test_another_caller_cannot_see_or_cancel_a_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with serving(server) as (owner, _):
        task_id = (await start_task(owner, "count", n=5))["taskId"]
        async with open_test_client(
            server, registry=owner.registry, client_capabilities=WITH_TASKS
        ) as stranger:
            for method in ("tasks/get", "tasks/cancel"):
                error = await refusal(stranger, method, {"taskId": task_id})
                assert error.code == -32602
        await trio.sleep(0.5)
        assert seen.flagged_at is None
        assert (await get(owner, task_id))["status"] == "working"
        await server.dispatcher.extension(Tasks).manager.wait_idle()
        assert (await get(owner, task_id))["status"] == "completed"


async def test_a_task_outlives_the_connection_that_started_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with serving(server, namespace="session:same-client") as (first, _):
        options: Any = {"registry": first.registry, "client_capabilities": WITH_TASKS}
        async with open_test_client(server, namespace="session:again", **options) as client:
            task_id = (await start_task(client, "count", n=3))["taskId"]
        # That connection is gone; the task goes on, and the same caller can poll it.
        async with open_test_client(server, namespace="session:again", **options) as client:
            await trio.sleep(3.5)
            assert (await get(client, task_id))["status"] == "completed"
        assert seen.flagged_at is None


async def test_ttl_expiry_purges_tasks(autojump_clock: trio.testing.MockClock) -> None:
    server = make_server(Seen(), ttl_ms=10_000, purge_interval=5.0)
    store = server.dispatcher.extension(Tasks).manager.store
    assert isinstance(store, MemoryTaskStore)
    async with serving(server) as (client, _):
        task_id = (await start_task(client, "count", n=1))["taskId"]
        await trio.sleep(9.0)
        assert (await get(client, task_id))["status"] == "completed"
        await trio.sleep(1.5)
        error = await refusal(client, "tasks/get", {"taskId": task_id})
        assert error.code == -32602
        others = [(await start_task(client, "count", n=1))["taskId"] for _ in range(3)]
        assert len(store) == 3 and task_id not in others
        await trio.sleep(16.0)  # past their TTL and one purge pass
        assert len(store) == 0


async def test_running_tasks_are_bounded_per_owner_and_server_wide(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen(), max_running_per_owner=2, max_running=3)
    async with serving(server) as (client, _):
        for _ in range(2):
            await start_task(client, "count", n=5)
        error = await refusal(client, "tools/call", {"name": "count", "arguments": {}})
        assert error.code == TOO_MANY_REQUESTS and error.data["limit"] == "tenant"
        async with open_test_client(
            server, registry=client.registry, principal="other", client_capabilities=WITH_TASKS
        ) as other:  # another tenant (one without a principal shares the first one's quota)
            await start_task(other, "count", n=5)
            error = await refusal(other, "tools/call", {"name": "count", "arguments": {}})
            assert error.code == TOO_MANY_REQUESTS and error.data["limit"] == "server"
            await server.dispatcher.extension(Tasks).manager.wait_idle()
        assert (await start_task(client, "count", n=1))["status"] == "working"
        await server.dispatcher.extension(Tasks).manager.wait_idle()


async def test_shutdown_settles_running_tasks_failed_and_leaks_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    manager = trio.CancelScope()

    async def run_manager(task_status: trio.TaskStatus[None]) -> None:
        with manager:
            await server.dispatcher.extension(Tasks).manager.run(task_status=task_status)

    async with trio.open_nursery() as nursery:
        # Started first, so the client uses it (and does not start one of its own).
        await nursery.start(run_manager)
        async with open_test_client(server, client_capabilities=WITH_TASKS) as client:
            task_id = (await start_task(client, "count", n=100))["taskId"]
            await trio.sleep(1.5)
            manager.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert seen.stopped.is_set()
            assert (
                not server.dispatcher.extension(Tasks).manager.running
                and server.dispatcher.extension(Tasks).manager.running_count == 0
            )
            assert client.registry.in_flight_count == 0
            record = await server.dispatcher.extension(Tasks).manager.store.get(task_id)
            assert record is not None and record.status == "failed"
            assert record.error is not None and record.error["code"] == -32603
            # Not running: the optional tool is an ordinary call again, a required one fails.
            result = await client.request("tools/call", {"name": "count", "arguments": {"n": 1}})
            assert result["resultType"] == "complete"
            error = await refusal(client, "tools/call", {"name": "only_task", "arguments": {}})
            assert error.code == -32603


async def test_discover_advertises_the_extension_and_legacy_has_no_tasks_methods(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen())
    async with serving(server) as (client, _):
        discovered = await client.request("server/discover")
        assert discovered["capabilities"]["extensions"] == {TASKS: {}}
    async with serving(server, era="legacy") as (client, _):
        error = await refusal(client, "tasks/get", {"taskId": "x"})
        assert error.code == -32601
        # A legacy client gets the ordinary result, even from a task-capable tool.
        result = await client.request("tools/call", {"name": "count", "arguments": {"n": 1}})
        assert result["content"][0]["text"] == "counted to 1"
    async with open_test_client(McpServer()) as plain:
        assert "extensions" not in (await plain.request("server/discover"))["capabilities"]


def test_state_machine_terminal_states_never_change() -> None:
    record = TaskRecord(task_id="t", owner="o", created_at=0.0, updated_at=0.0, ttl_ms=None)
    assert transition(record, "input_required", 1.0)
    assert transition(record, "working", 2.0)
    with pytest.raises(ValueError):
        transition(record, "completed", 3.0)  # a completed task needs its result
    with pytest.raises(ValueError):
        transition(record, "failed", 3.0)  # a failed task needs its error
    assert transition(record, "completed", 3.0, result={"content": []})
    for status in ("working", "failed", "cancelled", "completed"):
        assert not transition(record, status, 4.0, result={}, error={"code": 1})  # type: ignore[arg-type]
    assert record.status == "completed" and record.updated_at == 3.0
    assert TaskRecord.loads(record.dumps()).to_wire() == record.to_wire()
    with pytest.raises(ValueError):
        TaskRecord.loads('{"status": "nonsense"}')


def test_tool_registration_checks_task_support() -> None:
    server = McpServer(extensions=[Tasks()])
    with pytest.raises(ValueError):

        @server.tool(task="sometimes")  # type: ignore[arg-type]
        async def bad(ctx: Context) -> None: ...

    with pytest.raises(ValueError):

        @server.tool(task="optional", cancellable=False)
        async def uncancellable(ctx: Context) -> None: ...


async def test_http_lifespan_runs_the_manager_and_checks_mcp_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    app = McpHttpApp(server, registry_config=RegistryConfig(grace_period=GRACE))
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery, client=("192.0.2.1", 1000))
        async with client.lifespan():
            assert server.dispatcher.extension(Tasks).manager.running
            message = modern_call(1, "count", {"n": 100}, capabilities=WITH_TASKS)
            created = await client.post(headers_of(message), message)
            task = created.answer()["result"]
            assert task["resultType"] == "task"
            task_id = {"taskId": task["taskId"]}
            get = modern_request(2, "tasks/get", task_id, capabilities=WITH_TASKS)
            for bad in ({"mcp-name": "someone-else"}, {}):
                headers = {k: v for k, v in headers_of(get).items() if k != "mcp-name"}
                refused = await client.post({**headers, **bad}, get)
                assert refused.status == 400 and refused.json()["error"]["code"] == -32020
            polled = await client.post(headers_of(get), get)
            assert polled.status == 200 and polled.json()["result"]["status"] == "working"
            # Another address is another caller: it cannot see the task.
            stranger = AsgiClient(app, nursery, client=("192.0.2.2", 1000))
            hidden = await stranger.post(headers_of(get), get)
            assert hidden.status == 400 and hidden.json()["error"]["code"] == -32602
            cancel = modern_request(3, "tasks/cancel", task_id, capabilities=WITH_TASKS)
            acked = await client.post(headers_of(cancel), cancel)
            assert acked.status == 200 and acked.json()["result"]["resultType"] == "complete"
            await seen.stopped.wait()
            await server.dispatcher.extension(Tasks).manager.wait_idle()
            polled = await client.post(headers_of(get), get)
            assert polled.json()["result"]["status"] == "cancelled"
        assert not server.dispatcher.extension(Tasks).manager.running
        client.check()


async def test_task_records_per_owner_are_bounded_until_they_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server(Seen(), max_tasks_per_owner=2, ttl_ms=10_000, purge_interval=1000)
    async with serving(server) as (client, _):
        for _ in range(2):
            await start_task(client, "count", n=1)
        await server.dispatcher.extension(
            Tasks
        ).manager.wait_idle()  # finished records still take room
        error = await refusal(client, "tools/call", {"name": "count", "arguments": {"n": 1}})
        assert error.code == TOO_MANY_REQUESTS
        assert error.data == {"limit": "tasks", "max": 2}
        assert (
            server.dispatcher.extension(Tasks).manager.running_count == 0
            and client.registry.in_flight_count == 0
        )
        await trio.sleep(10.5)
        assert (await start_task(client, "count", n=1))["status"] == "working"
