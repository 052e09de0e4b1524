"""Worker threads and sync tools: the flag reaches the thread, the hard cancel abandons it.

Cooperative stops run on the real clock with a long grace period (a thread
reacts in real time, and an autojump clock would jump to the hard cancel
while the thread is still waking up); abandonment runs on ``autojump_clock``,
where the grace period takes no real time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import (
    Registry,
    RegistryConfig,
    RequestCancelled,
    ThreadAbandonedEvent,
    cancel_token,
    cancelled,
    run_sync,
    tracked,
)
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks, open_test_client

BOUND = 30


@pytest.mark.mcp_registry(grace_period=None)
async def test_on_cancelled_fires_once_when_the_flag_is_set(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    calls: list[str] = []
    async with tracked(1) as request:
        remove_b = request.on_cancelled(lambda: calls.append("b"))
        request.on_cancelled(lambda: calls.append("a"))
        remove_b()
        request.on_cancelled(lambda: 1 / 0)  # a broken callback breaks nobody
        mcp_registry.cancel_request(request, "first")
        mcp_registry.cancel_request(request, "second")
        assert calls == ["a"]
        request.on_cancelled(lambda: calls.append("late"))  # already flagged: at once
        assert calls == ["a", "late"]
        await request.wait_cancelled()  # returns at once (a checkpoint)


@pytest.mark.mcp_registry(grace_period=None)
async def test_wait_cancelled_blocks_until_the_flag(
    autojump_clock: MockClock, mcp_registry: Registry
) -> None:
    woke_at: list[float] = []

    async def waiter(task_status: trio.TaskStatus[None]) -> None:
        async with tracked(1) as request:
            task_status.started()
            await request.wait_cancelled()
            woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await nursery.start(waiter)
        await trio.sleep(7)
        assert woke_at == []
        mcp_registry.notify_cancelled("global", 1, "now")
    assert woke_at == [7]


@pytest.mark.mcp_registry(grace_period=None)
async def test_the_flag_is_visible_in_worker_threads(mcp_registry: Registry) -> None:
    async with tracked(1) as request:
        assert await trio.to_thread.run_sync(cancelled) is False  # Trio copies the context
        mcp_registry.cancel_request(request, "stop", kind="client")
        assert await trio.to_thread.run_sync(cancelled) is True
        token_seen = await run_sync(lambda: (cancel_token().cancelled, cancel_token().reason))
        assert token_seen == (True, "stop")


@pytest.mark.mcp_registry(grace_period=60)
async def test_a_thread_waiting_on_its_token_stops_cooperatively(mcp_registry: Registry) -> None:
    recorder = EventRecorder.attach(mcp_registry)
    started = threading.Event()

    def work() -> str:
        token = cancel_token()
        started.set()
        assert token.wait(BOUND), "the token was never set"
        token.raise_if_cancelled()
        return "unreachable"

    async def tool() -> None:
        async with tracked(1, "ns"):
            with pytest.raises(RequestCancelled, match="enough"):
                await run_sync(work)

    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tool)
            await trio.to_thread.run_sync(started.wait)
            mcp_registry.notify_cancelled("ns", 1, "enough")
    assert recorder.of_type(ThreadAbandonedEvent) == []
    assert_no_leaks(mcp_registry)


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_thread_ignoring_the_flag_is_abandoned_at_the_hard_cancel(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    release = threading.Event()
    recorder = EventRecorder.attach(mcp_registry)

    ended: list[float] = []

    async def tool() -> None:
        with pytest.raises(RequestCancelled):
            async with tracked(1, "ns"):
                await run_sync(release.wait, thread_name="stuck worker")
        ended.append(trio.current_time())

    try:
        with trio.fail_after(BOUND):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tool)
                await trio.sleep(1)
                mcp_registry.notify_cancelled("ns", 1, "stop")
        # The request ended at the hard cancel, with the thread still running.
        assert ended == [pytest.approx(6, abs=0.01)]
        assert not release.is_set()
    finally:
        release.set()
    (event,) = recorder.of_type(ThreadAbandonedEvent)
    assert (event.request_id, event.namespace, event.kind, event.thread) == (
        1,
        "ns",
        "client",
        "stuck worker",
    )
    assert recorder.names()[-3:] == [
        "thread.abandoned",
        "request.hard_cancelled",
        "request.stopped",
    ]


def sync_server(release: threading.Event) -> McpServer:
    server = McpServer("sync-tools")

    @server.tool()
    def add(ctx: Context, a: int, b: int = 2) -> dict[str, Any]:
        """Add two numbers, in a worker thread."""
        trio.from_thread.run(ctx.report_progress, 1, 1, "adding")
        return {"sum": a + b, "main_thread": threading.current_thread() is threading.main_thread()}

    @server.tool()
    def polite(ctx: Context) -> str:
        token = cancel_token()
        while not token.wait(0.05):
            pass
        assert cancelled()
        token.raise_if_cancelled()
        return "unreachable"

    @server.tool()
    def stuck(ctx: Context) -> str:
        release.wait()
        return "too late"

    return server


async def test_sync_tools_get_a_schema_and_run_in_a_thread(autojump_clock: MockClock) -> None:
    server = sync_server(threading.Event())
    tool = server.registration.tools["add"]
    assert tool.describe()["inputSchema"] == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert tool.description == "Add two numbers, in a worker thread."
    async with open_test_client(server) as client:
        call = client.start_call("add", {"a": 40})
        result = await call.result()
    assert result["structuredContent"] == {"sum": 42, "main_thread": False}
    assert [p["message"] for p in call.progress] == ["adding"]


async def test_a_sync_tool_sees_the_clients_cancel() -> None:
    server = sync_server(threading.Event())
    with trio.fail_after(BOUND):
        async with open_test_client(
            server, registry_config=RegistryConfig(grace_period=60)
        ) as client:
            recorder = EventRecorder.attach(client.registry)
            call = client.start_call("polite")
            while not client.registry.in_flight(call.id, client.namespace):
                await trio.sleep(0.01)
            await call.cancel("stop")
            await client.registry.wait_idle()
            assert not call.answered
            assert recorder.of_type(ThreadAbandonedEvent) == []
            assert "request.hard_cancelled" not in recorder.names()
            assert_no_leaks(client.registry)


async def test_a_stuck_sync_tool_is_abandoned_and_the_call_ends_on_time(
    autojump_clock: MockClock,
) -> None:
    release = threading.Event()
    try:
        async with open_test_client(
            sync_server(release), registry_config=RegistryConfig(grace_period=3)
        ) as client:
            recorder = EventRecorder.attach(client.registry)
            call = client.start_call("stuck")
            await trio.sleep(1)
            await call.cancel("stop")
            await client.registry.wait_idle()
            assert trio.current_time() == pytest.approx(4, abs=0.01)
            await client.assert_no_answer(call)
            assert [e.thread for e in recorder.of_type(ThreadAbandonedEvent)] == [
                "trio_mcp_cancel tool stuck"
            ]
    finally:
        release.set()


def test_generators_are_not_tools() -> None:
    server = McpServer()

    def gen(ctx: Context) -> Any:
        yield 1

    with pytest.raises(TypeError, match="plain function"):
        server.tool()(gen)


async def test_stuck_threads_of_one_tool_cannot_starve_the_others(
    autojump_clock: MockClock,
) -> None:
    release = threading.Event()
    own = trio.CapacityLimiter(1)
    server = McpServer("limits", sync_tool_threads=2)

    @server.tool(thread_limiter=own)
    def stuck(ctx: Context) -> str:
        release.wait()
        return "too late"

    @server.tool()
    def add(ctx: Context, a: int, b: int) -> int:
        return a + b

    try:
        async with open_test_client(
            server, registry_config=RegistryConfig(grace_period=3)
        ) as client:
            recorder = EventRecorder.attach(client.registry)
            first = client.start_call("stuck")
            await trio.sleep(1)
            await first.cancel("stop")
            await client.registry.wait_idle()
            assert len(recorder.of_type(ThreadAbandonedEvent)) == 1
            # The abandoned thread still runs and holds the tool's only slot...
            assert own.borrowed_tokens == 1
            second = client.start_call("stuck")
            await client.wait_in_flight(second)
            assert own.statistics().tasks_waiting == 1  # ...so the next call waits for it,
            # while every other sync tool runs, and Trio's default limiter is untouched.
            for n in range(5):
                assert (await client.call_tool("add", {"a": n, "b": 1}))["content"][0][
                    "text"
                ] == str(n + 1)
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
            # A call cancelled while waiting for a slot ends at the flag (it has
            # no work to stop), and started no thread to abandon.
            cancelled_at = trio.current_time()
            await second.cancel("stop")
            await client.registry.wait_idle()
            assert trio.current_time() == cancelled_at
            await client.assert_no_answer(second)
            assert len(recorder.of_type(ThreadAbandonedEvent)) == 1
            assert own.statistics().tasks_waiting == 0
            assert own.borrowed_tokens == 1  # still the abandoned thread's
    finally:
        release.set()


async def test_the_server_wide_thread_limit_is_not_trios_default(
    autojump_clock: MockClock,
) -> None:
    release = threading.Event()
    server = sync_server(release)
    assert server.registration.sync_tool_threads.total == 40
    try:
        async with open_test_client(
            server, registry_config=RegistryConfig(grace_period=3)
        ) as client:
            calls = [client.start_call("stuck") for _ in range(3)]
            await trio.sleep(1)
            for call in calls:
                await call.cancel("stop")
            await client.registry.wait_idle()
            pool = server.registration.sync_tool_threads.limiter
            assert pool.borrowed_tokens == 3  # three abandoned threads, in the tools' pool
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
            # Trio's own thread users (DNS lookups, trio.Path) are not starved.
            assert await trio.to_thread.run_sync(lambda: 7) == 7
            result = await client.call_tool("add", {"a": 1})
            assert result["structuredContent"]["sum"] == 3
    finally:
        release.set()


def test_thread_limits_are_checked_and_made_per_run() -> None:
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="thread limit"):
            McpServer(sync_tool_threads=bad)  # type: ignore[arg-type]
    server = McpServer()
    with pytest.raises(TypeError, match="sync"):

        @server.tool(thread_limiter=2)
        async def not_sync(ctx: Context) -> str:
            return "no"

    async def limiter() -> trio.CapacityLimiter:
        first = server.registration.sync_tool_threads.limiter
        assert server.registration.sync_tool_threads.limiter is first and first.total_tokens == 40
        return first

    # A limiter per Trio run: an abandoned thread of an ended run holds no slot of the next.
    assert trio.run(limiter) is not trio.run(limiter)


@pytest.mark.mcp_registry(grace_period=None)
async def test_a_flagged_request_still_gets_a_free_thread_and_a_queued_one_stops(
    autojump_clock: MockClock,
    mcp_registry: Registry,
) -> None:
    release = threading.Event()
    one = trio.CapacityLimiter(1)
    try:
        async with tracked(1, "ns") as request:
            mcp_registry.cancel_request(request, "early")
            # A free slot: the thread runs and sees the flag itself.
            assert await run_sync(cancelled, limiter=one) is True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: run_sync(release.wait, limiter=one))
                await trio.testing.wait_all_tasks_blocked()
                assert one.borrowed_tokens == 1
                # No free slot: a flagged request does not queue for one.
                with pytest.raises(RequestCancelled, match="early"):
                    await run_sync(lambda: "never", limiter=one)
                release.set()
    finally:
        release.set()


async def test_a_tool_with_a_number_of_threads_runs_that_many_at_once(
    autojump_clock: MockClock,
) -> None:
    release = threading.Event()
    entered: list[int] = []
    server = McpServer("one-at-a-time")

    @server.tool(thread_limiter=1)
    def single(ctx: Context, n: int) -> int:
        entered.append(n)
        release.wait()
        return n

    try:
        async with open_test_client(server) as client:
            calls = [client.start_call("single", {"n": n}) for n in range(3)]
            while not entered:
                await trio.sleep(0.01)
            # Real time for unlimited threads to enter (the clock is virtual).
            await trio.to_thread.run_sync(time.sleep, 0.2)
            await client.settle()
            assert len(entered) == 1  # the others wait for the tool's one thread
            assert (
                server.registration.sync_tool_threads.limiter.borrowed_tokens == 0
            )  # not the shared pool
            release.set()
            results = sorted([(await call.result())["content"][0]["text"] for call in calls])
            assert results == ["0", "1", "2"] and sorted(entered) == [0, 1, 2]
    finally:
        release.set()
