"""Per-target time limits: the flag at the limit, the hard cancel a grace period later.

``@server.tool(time_limit=...)`` (and on resources, templates, prompts) is a
server cancel at a fixed time after the work started; the client reads
``-32800`` with a reason naming the limit.  Everything runs on MockClock.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, checkpoint_cancelled
from trio_mcp_cancel._core.events import RequestCancelledEvent
from trio_mcp_cancel._telemetry.names import server_cause
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.testing import EventRecorder, McpError, McpTaskError, open_test_client

from _support.asgi import (
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_request,
    served,
)

GRACE = 5.0
REASON = "time limit of 10 s reached"


class Log:
    """When the tools saw the flag and the hard cancel (mock time since they started)."""

    def __init__(self) -> None:
        self.flagged: list[float] = []
        self.hard: list[float] = []


def make_server(log: Log) -> McpServer:
    server = McpServer("limits", extensions=[Tasks()])

    @server.tool(time_limit=10)
    async def polite(ctx: Context) -> str:
        """Polls the flag."""
        start = trio.current_time()
        try:
            while True:
                await trio.sleep(0.25)
                await checkpoint_cancelled()
        finally:
            log.flagged.append(trio.current_time() - start)

    @server.tool(time_limit=10)
    async def stubborn(ctx: Context) -> str:
        """Ignores the flag."""
        start = trio.current_time()
        try:
            await trio.sleep(1000)
        except trio.Cancelled:
            log.hard.append(trio.current_time() - start)
            raise
        return "never"

    @server.tool(time_limit=10)
    async def quick(ctx: Context) -> str:
        await trio.sleep(9)
        return "in time"

    @server.tool(time_limit=10, task="optional")
    async def long_task(ctx: Context) -> str:
        """A task that ignores the flag: its run is bounded all the same."""
        start = trio.current_time()
        try:
            await trio.sleep(1000)
        except trio.Cancelled:
            log.hard.append(trio.current_time() - start)
            raise
        return "never"

    @server.resource("test://slow", time_limit=10)
    async def slow_read(ctx: Context) -> str:
        start = trio.current_time()
        try:
            await trio.sleep(1000)
        except trio.Cancelled:
            log.hard.append(trio.current_time() - start)
            raise
        return "never"

    @server.resource_template("test://items/{id}", time_limit=10)
    async def slow_item(ctx: Context, id: str) -> str:
        start = trio.current_time()
        while True:
            await trio.sleep(0.25)
            if ctx.request.cancelled:
                log.flagged.append(trio.current_time() - start)
                await checkpoint_cancelled()

    @server.prompt(time_limit=10)
    async def slow_prompt(ctx: Context) -> str:
        start = trio.current_time()
        try:
            while True:
                await trio.sleep(0.25)
                await checkpoint_cancelled()
        finally:
            log.flagged.append(trio.current_time() - start)

    return server


def assert_time_limit_error(error: McpError) -> None:
    assert error.code == -32800
    assert error.data == {"reason": REASON}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_tool_is_flagged_at_its_time_limit_and_answered_32800_naming_it(
    era: Any, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    events = EventRecorder.attach(mcp_registry)
    async with open_test_client(make_server(log), registry=mcp_registry, era=era) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("polite")
        assert_time_limit_error(raised.value)
    assert log.flagged == [pytest.approx(10.0, abs=0.3)]
    (event,) = events.of_type(RequestCancelledEvent)
    assert (event.kind, event.reason) == ("server", REASON)
    assert server_cause(event.reason) == "time_limit"


@pytest.mark.mcp_registry(grace_period=GRACE)
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_tool_ignoring_the_flag_is_hard_cancelled_at_limit_plus_grace(
    era: Any, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    async with open_test_client(make_server(log), registry=mcp_registry, era=era) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("stubborn")
        assert_time_limit_error(raised.value)
    assert log.hard == [10.0 + GRACE]


async def test_a_tool_finishing_within_its_limit_answers_and_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with open_test_client(make_server(Log()), registry=mcp_registry) as client:
        for _ in range(3):
            result = await client.call_tool("quick")
            assert result["content"][0]["text"] == "in time"
        await trio.sleep(30)  # past every limit: nothing fires for the finished calls
    assert not len(mcp_registry._due)  # the finished calls left no timer


@pytest.mark.mcp_registry(grace_period=GRACE)
async def test_a_resource_read_and_a_template_read_have_their_time_limit(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    async with open_test_client(make_server(log), registry=mcp_registry) as client:
        with pytest.raises(McpError) as raised:
            await client.request("resources/read", {"uri": "test://slow"})
        assert_time_limit_error(raised.value)
        with pytest.raises(McpError) as raised:
            await client.request("resources/read", {"uri": "test://items/7"})
        assert_time_limit_error(raised.value)
    assert log.hard == [10.0 + GRACE]
    assert log.flagged == [pytest.approx(10.0, abs=0.3)]


async def test_a_prompt_has_its_time_limit(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    async with open_test_client(make_server(log), registry=mcp_registry, era="legacy") as client:
        with pytest.raises(McpError) as raised:
            await client.request("prompts/get", {"name": "slow_prompt"})
        assert_time_limit_error(raised.value)
    assert log.flagged == [pytest.approx(10.0, abs=0.3)]


@pytest.mark.mcp_registry(grace_period=GRACE)
async def test_a_task_run_counts_its_own_time_limit_and_fails_naming_it(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    server = make_server(log)
    async with open_test_client(server, registry=mcp_registry, tasks=True) as client:
        with pytest.raises(McpTaskError) as raised:
            await client.call_tool("long_task")
    assert raised.value.task["status"] == "failed"
    assert REASON in str(raised.value.task) + str(raised.value.data)
    assert log.hard == [10.0 + GRACE]


@pytest.mark.mcp_registry(grace_period=GRACE)
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_http_answers_a_tool_past_its_time_limit_with_32800_in_both_eras(
    era: str, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    app = McpHttpApp(make_server(log), mcp_registry)
    async with served(app) as client:
        if era == "legacy":
            session = await initialize(client)
            exchange = client.start("POST", legacy_headers(session), legacy_call(3, "stubborn"))
        else:
            message = modern_call(3, "stubborn")
            exchange = client.start("POST", headers_of(message), message)
        await exchange.done.wait()
        final = exchange.messages()[-1] if exchange.is_sse else exchange.json()
    assert final["id"] == 3
    assert final["error"]["code"] == -32800
    assert final["error"]["data"] == {"reason": REASON}
    assert log.hard == [10.0 + GRACE]


async def test_http_a_modern_prompt_past_its_time_limit_is_answered_32800(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    log = Log()
    app = McpHttpApp(make_server(log), mcp_registry)
    async with served(app) as client:
        message = modern_request(4, "prompts/get", {"name": "slow_prompt"})
        exchange = client.start("POST", headers_of(message), message)
        await exchange.done.wait()
        final = exchange.messages()[-1] if exchange.is_sse else exchange.json()
    assert final["error"]["data"] == {"reason": REASON}
    assert log.flagged == [pytest.approx(10.0, abs=0.3)]


async def test_the_smaller_of_the_tool_and_server_limits_cancels_first(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    from trio_mcp_cancel.server import ConnectionLimits

    log = Log()
    limits = ConnectionLimits(max_request_time=4.0)
    async with open_test_client(make_server(log), registry=mcp_registry, limits=limits) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("polite")
    assert raised.value.data == {"reason": "request time limit reached"}
    assert log.flagged == [pytest.approx(4.0, abs=0.3)]


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, -math.inf, True, "30"])
def test_a_time_limit_that_is_not_a_positive_finite_number_is_refused_at_registration(
    bad: Any,
) -> None:
    server = McpServer()
    for register in (
        lambda: server.tool(time_limit=bad),
        lambda: server.resource("test://x", time_limit=bad),
        lambda: server.resource_template("test://x/{id}", time_limit=bad),
        lambda: server.prompt(time_limit=bad),
    ):
        with pytest.raises((ValueError, TypeError), match="time_limit must be"):
            register()


def test_a_time_limit_on_a_tool_that_cannot_be_cancelled_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a cancellable tool"):
        McpServer().tool(time_limit=5, cancellable=False)


@pytest.mark.mcp_registry(grace_period=GRACE)
async def test_stdio_answers_a_tool_past_its_time_limit_with_32800(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    import json

    from trio_mcp_cancel.stdio import serve_mcp_stdio

    log = Log()
    client, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: serve_mcp_stdio(
                make_server(log), mcp_registry, stdin=server_end, stdout=server_end
            )
        )
        await client.send_all(json.dumps(modern_call(1, "stubborn")).encode() + b"\n")
        received = b""
        while not received.endswith(b"\n"):
            received += await client.receive_some()
        await client.send_eof()
    answer = json.loads(received)
    assert answer["error"]["code"] == -32800
    assert answer["error"]["data"] == {"reason": REASON}
    assert log.hard == [10.0 + GRACE]


@pytest.mark.mcp_registry(grace_period=0.2)
async def test_websocket_answers_a_tool_past_its_time_limit_with_32800(
    mcp_registry: Registry,
) -> None:
    import json

    from trio_websocket import open_websocket_url

    from trio_mcp_cancel.websocket import serve_mcp_websocket

    server = McpServer("ws-limits")
    stopped: list[float] = []

    @server.tool(time_limit=0.2)
    async def stubborn(ctx: Context) -> str:
        start = trio.current_time()
        try:
            await trio.sleep(60)
        finally:
            stopped.append(trio.current_time() - start)
        return "never"

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(serve_mcp_websocket, server, mcp_registry)
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url) as ws:
                await ws.send_message(json.dumps(modern_call(1, "stubborn")))
                reply = json.loads(await ws.get_message())
            nursery.cancel_scope.cancel()
    assert reply["error"]["code"] == -32800
    assert reply["error"]["data"] == {"reason": "time limit of 0.2 s reached"}
    assert len(stopped) == 1 and stopped[0] >= 0.4  # hard-cancelled: not before limit + grace
