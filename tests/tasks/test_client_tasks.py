"""The client follows tasks (Tasks extension) and cancels them with ``tasks/cancel``.

Against our own server's task-capable tools: in memory on MockClock (the
test client shares the public client's engine), and once over real HTTP in
a gateway chain.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import HardCancelEvent, RegistryConfig, RequestCancelled
from trio_mcp_cancel._client.base import Receiver
from trio_mcp_cancel._client.calls import cancel_notification
from trio_mcp_cancel._client.engine import ClientEngine
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.client import McpClient, McpTaskCancelled, TaskPolling, open_http_client
from trio_mcp_cancel.lowlevel import JsonRpcError, TaskManager
from trio_mcp_cancel.lowlevel.wire import REQUEST_CANCELLED
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, Tasks
from trio_mcp_cancel.testing import (
    EventRecorder,
    McpError,
    McpTaskError,
    McpTestClient,
    PendingCall,
    assert_no_leaks,
    open_test_client,
)

from _support.client import cancel_relay, http_server

TASKS = "io.modelcontextprotocol/tasks"
BOUND = 30


class Downstream:
    """Server B: task-capable tools that record when their flag is set."""

    def __init__(self, **manager: Any) -> None:
        self.server = McpServer("B", extensions=[Tasks(TaskManager(**manager))])
        self.flagged: list[tuple[float, str]] = []
        self.started = trio.Event()
        self.stopped = trio.Event()

        @self.server.tool(task="optional")
        async def work(ctx: Context, seconds: float = 2.2) -> str:
            await trio.sleep(seconds)
            return f"worked {seconds}"

        @self.server.tool(task="optional")
        async def stubborn(ctx: Context) -> str:
            """Sets nothing but its record of the flag: only the hard cancel stops it."""
            self.started.set()
            try:
                await ctx.request.wait_cancelled()
                cancellation = ctx.request.cancellation
                assert cancellation is not None
                self.flagged.append((trio.current_time(), cancellation.kind))
                await trio.sleep_forever()
            finally:
                self.stopped.set()
            return "unreachable"

        @self.server.tool(task="optional")
        async def broken(ctx: Context) -> str:
            raise JsonRpcError(-32603, "backend exploded", {"why": "test"})

        @self.server.tool(task="optional")
        async def tool_error(ctx: Context) -> str:
            raise ValueError("bad input")


@asynccontextmanager
async def serving_tasks(server: McpServer) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        yield
        nursery.cancel_scope.cancel()


def gateway(upstream: list[Any]) -> McpServer:
    """Server A: ``relay`` calls B's tool through ``upstream[0]``, which declares tasks."""
    server = McpServer("A")

    @server.tool()
    async def relay(ctx: Context, tool: str = "stubborn") -> Any:
        return await upstream[0].call_tool(tool, on_task=seen_tasks.append)

    seen_tasks: list[dict[str, Any]] = []
    server.seen_tasks = seen_tasks  # type: ignore[attr-defined]
    return server


async def test_a_task_is_followed_at_the_servers_poll_interval_to_its_result(
    autojump_clock: MockClock,
) -> None:
    b = Downstream(poll_interval_ms=500)
    async with serving_tasks(b.server), open_test_client(b.server, tasks=True) as client:
        snapshots: list[tuple[float, str]] = []
        result = await client.call_tool(
            "work", on_task=lambda t: snapshots.append((trio.current_time(), t["status"]))
        )
        assert result["content"] == [{"type": "text", "text": "worked 2.2"}]
        # The CreateTaskResult at 0, then one tasks/get every pollIntervalMs.
        assert snapshots == [(t / 2, "working") for t in range(5)] + [(2.5, "completed")]
        calls = list(client.calls.values())
        assert [c.method for c in calls] == ["tools/call"] + ["tasks/get"] * 5
        meta = calls[0].response
        assert meta is not None and meta["result"]["resultType"] == "task"
        assert b.server.dispatcher.extension(Tasks).manager.running_count == 0
        assert_no_leaks(client.registry)


async def test_the_extension_is_declared_per_call_and_a_call_without_it_is_ordinary(
    autojump_clock: MockClock,
) -> None:
    b = Downstream()
    async with serving_tasks(b.server), open_test_client(b.server) as client:
        assert not client.declares_tasks()
        result = await client.call_tool("work", {"seconds": 1})
        assert result["resultType"] == "complete"  # no task: answered on the request
        result = await client.call_tool("work", {"seconds": 1}, task=True)
        assert result["content"][0]["text"] == "worked 1.0"  # a float parameter gets a float
        methods = [c.method for c in client.calls.values()]
        assert methods == ["tools/call", "tools/call", "tasks/get"]
        client.tasks = True
        result = await client.call_tool("work", {"seconds": 1}, task=False)
        assert result["resultType"] == "complete"
    async with open_test_client(b.server, era="legacy", tasks=True) as legacy:
        assert not legacy.declares_tasks()  # legacy declares nothing per request


async def test_failed_cancelled_and_tool_error_tasks(autojump_clock: MockClock) -> None:
    b = Downstream()
    async with serving_tasks(b.server), open_test_client(b.server, tasks=True) as client:
        with pytest.raises(McpTaskError) as caught:
            await client.call_tool("broken")
        assert (caught.value.status, caught.value.code) == ("failed", -32603)
        assert (caught.value.message, caught.value.data) == ("backend exploded", {"why": "test"})
        # A tool error is a completed task with an isError result.
        result = await client.call_tool("tool_error")
        assert result["isError"] is True
        # Somebody else cancels the task this call follows.
        ids: list[str] = []
        known = trio.Event()

        def seen(task: dict[str, Any]) -> None:
            ids.append(task["taskId"])
            known.set()

        async with trio.open_nursery() as nursery:

            async def cancel_it() -> None:
                await known.wait()
                await client.cancel_task(ids[0])

            nursery.start_soon(cancel_it)
            with pytest.raises(McpTaskError) as caught:
                await client.call_tool("stubborn", on_task=seen)
        # Issue 36: the client's own error (code 0), not the server's -32800.
        assert isinstance(caught.value, McpTaskCancelled)
        assert (caught.value.status, caught.value.code) == ("cancelled", 0)
        assert caught.value.task_id == ids[0]
        assert [kind for _, kind in b.flagged] == ["client"]


async def test_a_task_ended_by_tasks_cancel_raises_the_clients_own_error_not_a_32800(
    autojump_clock: MockClock,
) -> None:
    # A caller must tell "the server answered my request -32800" from "the
    # task I followed ended cancelled": only the first is the peer's error.
    b = Downstream()
    async with (
        serving_tasks(b.server),
        open_test_client(
            b.server,
            tasks=True,
            limits=ConnectionLimits(max_request_time=1),
            registry_config=RegistryConfig(grace_period=0.5),
        ) as client,
    ):
        tasks: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:

            async def cancel_it() -> None:
                while not tasks:
                    await trio.sleep(0.1)
                await client.cancel_task(tasks[0]["taskId"])

            nursery.start_soon(cancel_it)
            with pytest.raises(McpError) as caught:
                await client.call_tool("stubborn", on_task=tasks.append)
        error = caught.value
        assert isinstance(error, McpTaskCancelled)
        assert error.code != REQUEST_CANCELLED
        assert (error.code, error.status, error.task_id) == (0, "cancelled", tasks[0]["taskId"])
        assert error.status_message  # the server's reason, kept
        assert error.status_message == error.task["statusMessage"]
        assert error.status_message in str(error)
        assert error.task["status"] == "cancelled"
        # The server's own -32800 (it cancelled the request: max_request_time)
        # is still the JSON-RPC error it sent.
        with pytest.raises(McpError) as caught:
            await client.call_tool("stubborn", task=False)
        assert caught.value.code == REQUEST_CANCELLED
        assert not isinstance(caught.value, McpTaskError)


@pytest.mark.parametrize(("sent", "kept"), [(None, None), (42, None), (["a list"], None), ("", "")])
def test_a_cancelled_task_without_a_usable_status_message_says_no_reason(
    sent: object, kept: str | None
) -> None:
    task: dict[str, Any] = {"taskId": "t-1", "status": "cancelled"}
    if sent is not None:
        task["statusMessage"] = sent
    error = McpTaskCancelled(task)
    assert error.status_message == kept
    assert (error.code, error.status, error.task_id) == (0, "cancelled", "t-1")
    assert str(error) == "0: the task was cancelled: no reason given"


async def test_a_cancelled_scope_sends_tasks_cancel(autojump_clock: MockClock) -> None:
    b = Downstream()
    async with (
        serving_tasks(b.server),
        open_test_client(
            b.server, tasks=True, registry_config=RegistryConfig(grace_period=4)
        ) as client,
    ):
        hard = EventRecorder.attach(client.registry)
        ids: list[str] = []
        with trio.move_on_after(3):
            await client.call_tool("stubborn", on_task=lambda t: ids.append(t["taskId"]))
        # The task outlives the request that made it: only tasks/cancel stops it.
        assert [c.method for c in client.calls.values()][-1] == "tasks/cancel"
        assert b.flagged == [(3, "client")]
        await b.stopped.wait()
        assert trio.current_time() == 3 + 4  # it ignored the flag: hard-cancelled on time
        assert len(hard.of_type(HardCancelEvent)) == 1
        assert (await client.get_task(ids[0]))["status"] == "cancelled"


async def test_a_task_that_expires_while_followed_is_cancelled(autojump_clock: MockClock) -> None:
    b = Downstream(
        ttl_ms=1000, poll_interval_ms=400, store=MemoryTaskStore(clock=trio.current_time)
    )
    async with serving_tasks(b.server), open_test_client(b.server, tasks=True) as client:
        snapshots: list[float] = []
        with pytest.raises(McpError) as caught:
            await client.call_tool(
                "stubborn", on_task=lambda t: snapshots.append(trio.current_time())
            )
        # Polls at 0, 0.4, 0.8, then at the TTL (not past it): the record is gone.
        assert snapshots == [0, 0.4, 0.8]
        assert caught.value.code == -32602
        # Giving up on it cancelled it (the server still runs it here).
        assert b.flagged == [(1.0, "client")]


async def test_memory_chain_a_cancelled_call_on_a_cancels_bs_task(
    autojump_clock: MockClock,
) -> None:
    b = Downstream()
    upstream: list[McpTestClient] = []
    async with (
        serving_tasks(b.server),
        open_test_client(
            b.server, tasks=True, registry_config=RegistryConfig(grace_period=4)
        ) as to_b,
    ):
        upstream.append(to_b)
        b_events = EventRecorder.attach(to_b.registry)
        a = gateway(upstream)
        async with open_test_client(a, registry_config=RegistryConfig(grace_period=10)) as to_a:
            a_events = EventRecorder.attach(to_a.registry)
            call, cancelled_at = await cancel_relay(to_a, b.started)
            await to_a.registry.wait_idle()
            await b.stopped.wait()
            # B's task saw the flag within one round trip (the same instant on
            # MockClock), from tasks/cancel; it ignored it and was hard-
            # cancelled after B's grace; A ended at the flag.
            assert b.flagged == [(cancelled_at, "client")]
            assert [trio.current_time()] == [cancelled_at + 4]
            assert len(b_events.of_type(HardCancelEvent)) == 1
            assert a_events.of_type(HardCancelEvent) == []
            await to_a.assert_no_answer(call)
            assert [c.method for c in to_b.calls.values()][-1] == "tasks/cancel"
            task_id = a.seen_tasks[0]["taskId"]  # type: ignore[attr-defined]
            assert (await to_b.get_task(task_id))["status"] == "cancelled"
            assert_no_leaks(to_a.registry)


async def test_http_chain_a_cancelled_call_on_a_settles_bs_task_cancelled() -> None:
    # Over real HTTP (hypercorn, whose lifespan runs B's task manager):
    # tools/call answers with a task, tasks/get and tasks/cancel carry
    # Mcp-Name (B's app checks it), and the cancel on A reaches B's task.
    b = Downstream(poll_interval_ms=50)
    with trio.fail_after(BOUND):
        async with http_server(b.server, grace_period=0.5) as (url, b_registry):
            b_events = EventRecorder.attach(b_registry)
            async with open_http_client(
                url, tasks=True, task_polling=TaskPolling(min_interval=0.05)
            ) as to_b:
                result = await to_b.call_tool("work", {"seconds": 0.1})
                assert result["content"] == [{"type": "text", "text": "worked 0.1"}]
                upstream: list[McpClient] = [to_b]
                a = gateway(upstream)
                async with open_test_client(
                    a, registry_config=RegistryConfig(grace_period=30)
                ) as to_a:
                    call = to_a.start_call("relay")
                    while len(a.seen_tasks) < 2:  # type: ignore[attr-defined]
                        await trio.sleep(0.01)  # created and polled: A follows B's task
                    await call.cancel("stop")
                    await to_a.registry.wait_idle()
                    task_id = a.seen_tasks[0]["taskId"]  # type: ignore[attr-defined]
                    while (await to_b.get_task(task_id))["status"] != "cancelled":
                        await trio.sleep(0.02)
                assert [kind for _, kind in b.flagged] == ["client"]
                assert b.stopped.is_set()
            await b_registry.wait_idle()
            # B's task ignored its flag; its hard cancel came after B's grace.
            assert len(b_events.of_type(HardCancelEvent)) == 1
            assert_no_leaks(b_registry)


async def test_a_flagged_caller_never_starts_a_task(autojump_clock: MockClock) -> None:
    b = Downstream()
    async with serving_tasks(b.server), open_test_client(b.server, tasks=True) as to_b:
        upstream: list[McpTestClient] = [to_b]
        a = McpServer("A")

        @a.tool()
        async def late(ctx: Context) -> str:
            await ctx.request.wait_cancelled()
            try:
                await upstream[0].call_tool("work")
            except RequestCancelled:
                return "refused"
            return "called"

        async with open_test_client(a, registry_config=RegistryConfig(grace_period=10)) as to_a:
            call = to_a.start_call("late")
            await to_a.wait_in_flight(call)
            await call.cancel("stop")
            await to_a.registry.wait_idle()
        assert b.server.dispatcher.extension(Tasks).manager.running_count == 0
        assert [c.method for c in to_b.calls.values()] == []


@pytest.mark.parametrize("how", ["cancel", "scope"])
async def test_a_task_made_for_a_call_cancelled_in_flight_is_cancelled_too(
    autojump_clock: MockClock, how: str
) -> None:
    # The cancel of the tools/call and its CreateTaskResult cross: the
    # server made the task before the cancel came, so the late answer is
    # acted on with tasks/cancel, or the task would run with nobody to stop it.
    b = Downstream()
    async with serving_tasks(b.server), open_test_client(b.server, tasks=True) as client:
        client.keep_history = False  # as the public client: cancelled calls are forgotten
        if how == "cancel":
            call = client.start_call("stubborn")
            call.cancel_nowait("back to back")
        else:
            with trio.move_on_after(0):
                await client.call_tool("stubborn")
        await b.stopped.wait()
        assert [kind for _, kind in b.flagged] == ["client"]
        await client.settle()
        # The tasks/cancel was answered and forgotten (a start_call is the caller's to keep).
        assert [c.method for c in client.calls.values()] == (
            [] if how == "scope" else ["tools/call"]
        )
        assert b.server.dispatcher.extension(Tasks).manager.running_count == 0


# -- answers our server never gives, from a scripted server ---------------------


@attrs.define(eq=False)
class ScriptedWire:
    """A transport whose "server" answers each request at once from *answers* (by method)."""

    answers: dict[str, list[dict[str, Any]]]
    receiver: Receiver
    sent: list[dict[str, Any]] = attrs.field(factory=list)

    def transmit(self, message: dict[str, Any], call: PendingCall | None) -> None:
        self.sent.append(message)
        if call is not None:
            result = self.answers[message["method"]].pop(0)
            self.receiver.receive({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        self.transmit(cancel_notification(call.id, reason), None)

    async def send(self, message: dict[str, Any]) -> None:
        self.transmit(message, None)
        await trio.lowlevel.checkpoint()


class Scripted(ClientEngine):
    """A client engine composed with a :class:`ScriptedWire`."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__("modern", tasks=True)
        self.transport = wire = ScriptedWire(answers, self.inbound)
        self.sent = wire.sent


def task(status: str, **fields: Any) -> dict[str, Any]:
    return {"taskId": "t1", "status": status, "ttlMs": None, **fields}


def methods(client: Scripted) -> list[str]:
    return [m["method"] for m in client.sent]


async def test_input_required_gives_up_and_cancels_the_task(autojump_clock: MockClock) -> None:
    client = Scripted(
        {
            "tools/call": [{"resultType": "task", **task("working")}],
            "tasks/get": [task("input_required", inputRequests={"name": {}})],
            "tasks/cancel": [{}],
        }
    )
    with pytest.raises(McpTaskError) as caught:
        await client.call_tool("x")
    assert caught.value.status == "input_required" and caught.value.task_id == "t1"
    assert methods(client) == ["tools/call", "tasks/get", "tasks/cancel"]
    declared = client.sent[-1]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert declared == {"extensions": {TASKS: {}}}  # tasks/* declare the extension too


async def test_poll_intervals_are_honoured_within_bounds(autojump_clock: MockClock) -> None:
    client = Scripted(
        {
            "tools/call": [{"resultType": "task", **task("working", pollIntervalMs=10**9)}],
            "tasks/get": [
                task("working", pollIntervalMs=0),
                task("working", pollIntervalMs="soon"),
                task("completed", result={"content": []}),
            ],
        }
    )
    times: list[float] = []
    assert await client.call_tool("x", on_task=lambda t: times.append(trio.current_time())) == {
        "content": []
    }
    # Capped at 60 s, floored at 10 ms, the default (1 s) for a non-number.
    assert times == pytest.approx([0, 60, 60.01, 61.01])


async def test_invalid_task_answers_are_errors(autojump_clock: MockClock) -> None:
    # A task the call did not declare (SEP-2663: an invalid response).
    client = Scripted({"tools/call": [{"resultType": "task", **task("working")}]})
    with pytest.raises(McpError, match="did not declare"):
        await client.call_tool("x", task=False)
    # A poll answering about another task: stop following, cancel ours.
    client = Scripted(
        {
            "tools/call": [{"resultType": "task", **task("working")}],
            "tasks/get": [{**task("working"), "taskId": "t2"}],
            "tasks/cancel": [{}],
        }
    )
    with pytest.raises(McpError, match="invalid task"):
        await client.call_tool("x")
    assert client.sent[-1]["method"] == "tasks/cancel"
    assert client.sent[-1]["params"]["taskId"] == "t1"


async def test_a_task_past_its_ttl_is_given_up_and_cancelled(autojump_clock: MockClock) -> None:
    working = task("working", ttlMs=1000, pollIntervalMs=600)
    client = Scripted(
        {
            "tools/call": [{"resultType": "task", **working}],
            "tasks/get": [working, working],
            "tasks/cancel": [{}],
        }
    )
    times: list[float] = []
    with pytest.raises(McpTaskError, match="TTL") as caught:
        await client.call_tool("x", on_task=lambda t: times.append(trio.current_time()))
    assert caught.value.status == "working"
    # The last poll comes at the TTL, not a poll interval past it.
    assert times == pytest.approx([0, 0.6, 1.0])
    assert methods(client) == ["tools/call", "tasks/get", "tasks/get", "tasks/cancel"]
