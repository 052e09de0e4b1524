"""The gateway serves on every transport, and each transport's own cancel crosses the hop.

Its upstream connections start with whichever transport serves it (stdio,
WebSocket, HTTP, the test client); a cancel in that transport's form (a
``notifications/cancelled`` line on stdio or WebSocket, the gateway's own
time limit, an HTTP shutdown) reaches the upstream tool's flag.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import Registry, RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.client import open_http_client, open_websocket_client
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.websocket import serve_mcp_websocket

pytestmark = pytest.mark.mcp_registry(grace_period=2)

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def stoppable(seen: list[str]) -> McpServer:
    up = McpServer("upstream")

    @up.tool()
    async def wait(ctx: Context) -> str:
        seen.append("started")
        try:
            while True:
                await trio.sleep(0.05)
                await checkpoint_cancelled()
        except RequestCancelled as exc:
            seen.append(f"stopped {exc.kind}")
            raise

    @up.tool()
    async def echo(text: str) -> str:
        return f"up:{text}"

    return up


async def until(seen: list[str], entry: str) -> None:
    while entry not in seen:
        await trio.sleep(0.01)


async def test_on_stdio_a_cancelled_line_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up")
    stdin_send, stdin = trio.testing.memory_stream_one_way_pair()
    stdout, _replies = trio.testing.memory_stream_one_way_pair()
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "up_wait", "arguments": {}, "_meta": ENVELOPE},
        },
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_mcp_stdio, gateway, mcp_registry, stdin=stdin, stdout=stdout)
        )
        await stdin_send.send_all(json.dumps(lines[0]).encode() + b"\n")
        await until(seen, "started")
        await stdin_send.send_all(json.dumps(lines[1]).encode() + b"\n")
        with trio.fail_after(1):
            await until(seen, "stopped client")
        await stdin_send.aclose()  # end of input: the gateway returns
    assert seen == ["started", "stopped client"]


async def test_on_websocket_a_call_and_a_cancel_cross_the_hop(mcp_registry: Registry) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ws = await nursery.start(partial(serve_mcp_websocket, gateway, mcp_registry))
            url = f"ws://127.0.0.1:{ws.port}/mcp"
            async with open_websocket_client(url) as client:
                result = await client.call_tool("up_echo", {"text": "ws"})
                assert result["content"][0]["text"] == "up:ws"
                with trio.move_on_after(0.3):
                    await client.call_tool("up_wait")
                await until(seen, "stopped client")
            nursery.cancel_scope.cancel()


async def test_the_gateways_time_limit_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up")
    limits = ConnectionLimits(max_request_time=3)
    async with open_test_client(gateway, registry=mcp_registry, limits=limits) as client:
        call = client.start_call("up_wait")
        await until(seen, "started")
        started = trio.current_time()
        await until(seen, "stopped client")
        # The gateway's limit flagged its call (kind server), and its client
        # cancelled the upstream call at once.
        assert 2.9 < trio.current_time() - started < 3.5
        await trio.sleep(0.5)
        assert call.response is not None and call.response["error"]["code"] == -32800


async def test_an_http_shutdown_of_the_gateway_stops_the_upstream_tool(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(stoppable(seen), namespace="up")
    app = McpHttpApp(gateway, mcp_registry)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            binds: Any = await nursery.start(partial(serve, app, config))
            async with open_http_client(f"{binds[0]}/mcp") as client:
                nursery.start_soon(partial(_call_ignoring_the_answer, client))
                await until(seen, "started")
                assert app.begin_shutdown(within=1) == 1
                with trio.fail_after(1):
                    await until(seen, "stopped client")
            nursery.cancel_scope.cancel()


async def _call_ignoring_the_answer(client: Any) -> None:
    try:
        await client.call_tool("up_wait")
    except Exception:
        pass  # -32800 "server shutting down"
