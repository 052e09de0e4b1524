"""Open ``subscriptions/listen`` streams have their own admission bounds.

A listen stream is meant to stay open for hours: it takes none of the
tool-call slots (``ServerLimits.max_calls``, ``max_calls_per_tenant``), is
bounded by ``max_listen_streams`` / ``max_listen_streams_per_tenant``
instead (``TOO_MANY_REQUESTS``, HTTP ``429``), and ``max_request_time`` does not end it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RegistryConfig, checkpoint_cancelled
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel.wire import TOO_MANY_REQUESTS
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, ServerLimits
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    modern_call,
    modern_headers,
    modern_request,
    served,
)

LISTEN = {"notifications": {"toolsListChanged": True}}


def build(**limits: Any) -> McpServer:
    server = McpServer("listen-limits", "1.0", **limits)

    @server.tool()
    async def echo(ctx: Context, text: str = "hi") -> str:
        return text

    @server.tool()
    async def forever(ctx: Context) -> str:
        while True:
            await checkpoint_cancelled()
            await trio.sleep(1)

    return server


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@asynccontextmanager
async def serving(
    registry: Registry, server: McpServer, **options: Any
) -> AsyncIterator[AsgiClient]:
    async with served(McpHttpApp(server, registry, **options)) as client:
        yield client


def listen(client: AsgiClient, request_id: int, ip: str = "192.0.2.1") -> HttpExchange:
    message = modern_request(request_id, "subscriptions/listen", LISTEN)
    return client.start("POST", modern_headers("subscriptions/listen"), message, client=(ip, 1))


async def test_listen_streams_take_no_call_slot_and_have_their_own_server_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = build(limits=ServerLimits(max_calls=1, max_listen_streams=2))
    async with open_test_client(server) as client:
        first = client.start_request("subscriptions/listen", LISTEN)
        second = client.start_request("subscriptions/listen", LISTEN)
        await client.wait_in_flight(first)
        await client.wait_in_flight(second)
        assert (server.dispatcher.listen_streams, server.dispatcher.calls_in_flight) == (
            2,
            0,
        )
        # The one call slot is still free for a call.
        assert (await client.call_tool("echo"))["content"][0]["text"] == "hi"
        with pytest.raises(McpError) as refused:
            await client.request("subscriptions/listen", LISTEN)
        assert refused.value.code == TOO_MANY_REQUESTS
        assert refused.value.data == {"limit": "listen_server", "max": 2}
        await first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert server.dispatcher.listen_streams == 1
        third = client.start_request("subscriptions/listen", LISTEN)
        await client.wait_in_flight(third)
        assert server.dispatcher.listen_streams == 2
    assert server.dispatcher.listen_streams == 0


async def test_per_tenant_listen_cap_over_http_is_a_429_and_leaves_calls_alone(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build(limits=ServerLimits(max_calls_per_tenant=1, max_listen_streams_per_tenant=1))
    async with serving(mcp_registry, server) as client:
        mine = listen(client, 1)
        assert (await mine.next_message())["method"] == "notifications/subscriptions/acknowledged"
        # The tenant's one call slot is not taken by its listen stream.
        call = await client.request(
            "POST",
            modern_headers("tools/call", "echo"),
            modern_call(2, "echo"),
            client=("192.0.2.1", 2),
        )
        assert call.status == 200
        over = listen(client, 3)
        await over.done.wait()
        assert over.status == 429
        assert over.json()["error"]["code"] == TOO_MANY_REQUESTS
        assert over.json()["error"]["data"] == {"limit": "listen_tenant", "max": 1}
        # Another address bucket is another tenant.
        other = listen(client, 4, ip="198.51.100.7")
        assert (await other.next_message())["method"] == "notifications/subscriptions/acknowledged"
        mine.disconnect()
        other.disconnect()


async def test_max_request_time_ends_calls_but_not_listen_streams_over_http(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    async with serving(
        mcp_registry, server, limits=ConnectionLimits(max_request_time=10)
    ) as client:
        stream = listen(client, 1)
        await stream.next_message()
        call = client.start(
            "POST", modern_headers("tools/call", "forever"), modern_call(2, "forever")
        )
        await trio.sleep(3600)
        assert call.done.is_set()  # the call was cut at 10 s (+ grace)
        assert not stream.done.is_set()
        server.tools_changed()
        assert (await stream.next_message())["method"] == "notifications/tools/list_changed"
        stream.disconnect()


async def test_max_request_time_spares_listen_streams_on_a_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = build()
    async with open_test_client(
        server,
        limits=ConnectionLimits(max_request_time=10),
        registry_config=RegistryConfig(grace_period=1),
    ) as client:
        stream = client.start_request("subscriptions/listen", LISTEN)
        call = client.start_request("tools/call", {"name": "forever", "arguments": {}})
        await trio.sleep(3600)
        with pytest.raises(McpError) as cut:
            await call.result()
        assert cut.value.code == -32800
        server.tools_changed()
        await trio.testing.wait_all_tasks_blocked()
        assert [m["method"] for m in stream.notifications][-1] == (
            "notifications/tools/list_changed"
        )
        await stream.cancel()
