"""Spans of what outlives or escapes a request: tasks, child processes, worker threads; refusals.

A task's execution is a span of its own linked to the ``tools/call`` that
created it, and ``tasks/cancel`` links to it; a child process group killed
by the hard cancel and a worker thread abandoned by it are events on the
request's span and metric points; an admission refusal is counted by limit.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.trace import SpanKind

from trio_mcp_cancel import RegistryConfig, run_process
from trio_mcp_cancel._core.events import BackendEvent
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, ServerLimits, Tasks
from trio_mcp_cancel.testing import McpError, McpTaskError, open_test_client

from _support.cancellation_tools import probe_server
from _support.otel import Otel, attrs_of, event_names


@asynccontextmanager
async def serving_tasks(server: McpServer) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        yield
        nursery.cancel_scope.cancel()


async def test_tasks_cancel_links_to_the_tasks_span_which_links_to_the_creating_call(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = McpServer("tasks", extensions=[Tasks(TaskManager())], telemetry=otel.telemetry)
    started = trio.Event()

    @server.tool(task="optional")
    async def stubborn(ctx: Context) -> str:
        started.set()
        await trio.sleep_forever()
        return "unreachable"

    ids: list[str] = []
    config = RegistryConfig(grace_period=3)
    async with (
        serving_tasks(server),
        open_test_client(server, tasks=True, registry_config=config) as client,
    ):
        async with trio.open_nursery() as nursery:
            known = trio.Event()

            def seen(task: dict[str, Any]) -> None:
                ids.append(task["taskId"])
                known.set()

            async def cancel_it() -> None:
                await started.wait()
                await known.wait()
                await client.cancel_task(ids[0])

            nursery.start_soon(cancel_it)
            with pytest.raises(McpTaskError) as caught:
                await client.call_tool("stubborn", on_task=seen)
        assert caught.value.status == "cancelled"
        await client.registry.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
    creating = otel.span("tools/call stubborn")
    assert creating.kind is SpanKind.SERVER
    assert "error.type" not in attrs_of(creating)  # it created the task
    task = otel.span("mcp_cancel.task stubborn")
    assert task.kind is SpanKind.INTERNAL
    assert task.parent is None  # its own trace, linked to the call that made it
    assert [link.context.span_id for link in task.links] == [creating.context.span_id]
    attributes = attrs_of(task)
    assert attributes["mcp_cancel.task.id"] == ids[0]
    assert attributes["mcp_cancel.task.status"] == "cancelled"
    assert attributes["mcp_cancel.cancel.kind"] == "client"
    assert attributes["mcp_cancel.cancel.phase"] == "hard_cancel"
    assert event_names(task) == [
        "mcp_cancel.task_cancel_requested",
        "mcp_cancel.flag",
        "mcp_cancel.hard_cancel",
        "mcp_cancel.stop",
    ]
    cancel = otel.span("tasks/cancel")
    assert [link.context.span_id for link in cancel.links] == [task.context.span_id]
    assert otel.value("mcp_cancel.tasks", mcp_cancel__task__status="working") == 1
    assert otel.value("mcp_cancel.tasks", mcp_cancel__task__status="cancelled") == 1


@pytest.mark.subprocess
async def test_a_child_process_group_killed_by_the_hard_cancel_is_an_event_and_a_point(
    otel: Otel,
) -> None:
    server = McpServer("proc", telemetry=otel.telemetry, extensions=[Tasks()])

    @server.tool()
    async def sleeper(ctx: Context) -> str:
        # No polite stop: only the hard cancel (SIGKILL to the group) ends it.
        await run_process([sys.executable, "-c", "import time; time.sleep(60)"], stop=None)
        return "unreachable"

    config = RegistryConfig(grace_period=0.2)
    with trio.fail_after(30):
        async with open_test_client(server, registry_config=config) as client:
            call = client.start_call("sleeper")
            await client.wait_in_flight(call)
            await trio.sleep(0.3)  # the child is running
            await call.cancel()
            await client.registry.wait_idle()
    span = otel.span("tools/call sleeper")
    assert "mcp_cancel.process_group_killed" in event_names(span)
    (killed,) = [e for e in span.events if e.name == "mcp_cancel.process_group_killed"]
    assert dict(killed.attributes or {}) == {"mcp_cancel.signal": "SIGKILL"}
    assert attrs_of(span)["mcp_cancel.cancel.phase"] == "hard_cancel"
    assert otel.value("mcp_cancel.process_groups.killed") == 1


@pytest.mark.subprocess
async def test_a_child_process_sent_its_polite_stop_signal_is_an_event(otel: Otel) -> None:
    server = McpServer("proc", telemetry=otel.telemetry, extensions=[Tasks()])

    @server.tool()
    async def sleeper(ctx: Context) -> str:
        await run_process([sys.executable, "-c", "import time; time.sleep(60)"])
        return "unreachable"

    with trio.fail_after(30):
        async with open_test_client(server, registry_config=RegistryConfig(grace_period=20)) as c:
            call = c.start_call("sleeper")
            await c.wait_in_flight(call)
            await trio.sleep(0.3)
            await call.cancel()
            await c.registry.wait_idle()
    span = otel.span("tools/call sleeper")
    (polite,) = [e for e in span.events if e.name == "mcp_cancel.process_signalled"]
    assert dict(polite.attributes or {}) == {"mcp_cancel.signal": signal.SIGTERM.name}
    assert attrs_of(span)["mcp_cancel.cancel.phase"] == "flag"


async def test_an_abandoned_worker_thread_is_an_event_and_a_point(otel: Otel) -> None:
    server = McpServer("threads", telemetry=otel.telemetry, extensions=[Tasks()])
    release = threading.Event()

    @server.tool()
    def blocking(ctx: Context) -> str:
        release.wait(30)  # never looks at the flag
        return "late"

    try:
        with trio.fail_after(30):
            config = RegistryConfig(grace_period=0)
            async with open_test_client(server, registry_config=config) as client:
                call = client.start_call("blocking")
                await client.wait_in_flight(call)
                await call.cancel()
                await client.registry.wait_idle()
    finally:
        release.set()
    span = otel.span("tools/call blocking")
    (abandoned,) = [e for e in span.events if e.name == "mcp_cancel.thread_abandoned"]
    assert "blocking" in dict(abandoned.attributes or {})["thread.name"]
    assert otel.value("mcp_cancel.threads.abandoned", mcp_cancel__cancel__kind="client") == 1


async def test_admission_refusals_are_counted_by_limit_and_the_span_has_the_error_code(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry, limits=ServerLimits(max_calls=1))
    async with open_test_client(server) as client:
        first = client.start_call("stubborn")
        await client.wait_in_flight(first)
        with pytest.raises(McpError) as caught:
            await client.call_tool("echo", {"text": "no room"})
        await first.cancel()
    refused: dict[str, Any] = attrs_of(otel.span("tools/call echo"))
    assert refused["error.type"] == str(caught.value.code)
    assert refused["rpc.response.status_code"] == str(caught.value.code)
    assert otel.value("mcp_cancel.limit.refusals", mcp_cancel__limit="server") == 1
    assert [a for a, _ in otel.points("mcp_cancel.limit.refusals")] == [
        {"mcp_cancel.limit": "server"}
    ]


async def test_a_shielded_tool_that_overruns_its_hard_cancel_is_phase_overrun_and_counted_live(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = McpServer("shielded", telemetry=otel.telemetry, extensions=[Tasks()])

    @server.tool()
    async def shielded(ctx: Context) -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(10)  # defeats the hard cancel, as Trio allows
        return "late"

    config = RegistryConfig(grace_period=1, overrun_margin=1)
    async with open_test_client(server, registry_config=config) as client:
        call = client.start_call("shielded")
        await client.wait_in_flight(call)
        await call.cancel()
        await trio.sleep(3)  # past the hard cancel and the margin, still running
        assert otel.value("mcp_cancel.overruns", mcp_cancel__cancel__kind="client") == 1
        await client.registry.wait_idle()
    attributes = attrs_of(otel.span("tools/call shielded"))
    assert attributes["mcp_cancel.cancel.phase"] == "overrun"
    assert attributes["mcp_cancel.cancel.overrun"] == pytest.approx(9.0)
    assert "mcp_cancel.overrun" in event_names(otel.span("tools/call shielded"))
    assert otel.value("mcp_cancel.cancellations", mcp_cancel__cancel__phase="overrun") == 1


async def test_the_backend_going_away_is_counted_by_operation(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server) as client:
        await client.call_tool("echo", {"text": "hi"})  # the server now watches this registry
        # What a backend's breaker reports through the registry it is attached to.
        client.registry.events.emit(BackendEvent("backend.unavailable", "publish", "refused"))
        client.registry.events.emit(BackendEvent("backend.recovered", "publish", ""))
    assert otel.points("mcp_cancel.backend.unavailable")[0][0] == {
        "mcp_cancel.backend.operation": "publish"
    }
    assert otel.value("mcp_cancel.backend.unavailable") == 1
