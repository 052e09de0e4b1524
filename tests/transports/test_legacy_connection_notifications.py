"""A legacy client on a message stream (stdio, WebSocket, memory) hears list changes unasked.

The 2025 era has no ``subscriptions/listen``: the connection is its
notification stream, so ``initialize`` promises ``listChanged`` and
``resources.subscribe``, and the server's list changes and the updates of
subscribed resources reach the client, while a modern client on the same
transport hears only what it listened for.  In memory, under MockClock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel.server import Context, McpServer, ServerLimits
from trio_mcp_cancel.transports.memory import MemoryEnd, memory_transport_pair, serve_mcp_memory

from _support.cancellation_tools import probe_server

Message = dict[str, Any]


def build_server() -> McpServer:
    """The probe server with one listen slot and a resource to subscribe to."""
    server = probe_server("legacy-notes", limits=ServerLimits(max_listen_streams=1))

    @server.resource("test://a", name="a")
    async def a(ctx: Context) -> str:
        return "a"

    return server


@asynccontextmanager
async def connected(registry: Registry, server: McpServer) -> AsyncIterator[MemoryEnd]:
    async with trio.open_nursery() as nursery:
        client, end = memory_transport_pair()
        await nursery.start(serve_mcp_memory, server, end, registry)
        yield client
        await client.aclose()


async def send(client: MemoryEnd, message: Message) -> None:
    await client.send.send(json.dumps({"jsonrpc": "2.0", **message}))


async def receive(client: MemoryEnd) -> Message:
    with trio.fail_after(5):
        reply: Message = json.loads(await client.receive.receive())
    return reply


async def initialize(client: MemoryEnd) -> Message:
    await send(
        client,
        {
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    reply = await receive(client)
    await send(client, {"method": "notifications/initialized"})
    return reply


async def nothing_pending(client: MemoryEnd) -> bool:
    await trio.testing.wait_all_tasks_blocked()
    try:
        client.receive.receive_nowait()
    except trio.WouldBlock:
        return True
    return False


async def test_a_legacy_connection_is_promised_and_sent_list_changes_and_subscribed_updates(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build_server()
    async with connected(mcp_registry, server) as client:
        capabilities = (await initialize(client))["result"]["capabilities"]
        assert capabilities["tools"] == {"listChanged": True}
        assert capabilities["resources"]["subscribe"] is True
        assert capabilities["resources"]["listChanged"] is True
        await send(client, {"id": 1, "method": "ping"})
        assert (await receive(client))["id"] == 1

        @server.tool()
        async def added(ctx: Context) -> str:
            return "new"

        assert (await receive(client))["method"] == "notifications/tools/list_changed"
        server.resource_updated("test://a")  # not subscribed: nothing
        assert await nothing_pending(client)
        await send(
            client, {"id": 2, "method": "resources/subscribe", "params": {"uri": "test://a"}}
        )
        assert (await receive(client)) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        server.resource_updated("test://a")
        assert await receive(client) == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "test://a"},
        }
        await send(
            client, {"id": 3, "method": "resources/unsubscribe", "params": {"uri": "test://a"}}
        )
        assert (await receive(client))["id"] == 3
        server.resource_updated("test://a")
        assert await nothing_pending(client)


async def test_a_client_before_initialize_or_a_modern_one_hears_nothing_unasked(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build_server()
    async with connected(mcp_registry, server) as client:
        envelope = {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        }
        await send(client, {"id": 1, "method": "tools/list", "params": envelope})
        assert "tools" in (await receive(client))["result"]

        @server.tool()
        async def added(ctx: Context) -> str:
            return "new"

        assert await nothing_pending(client)


async def test_the_notification_stream_takes_a_listen_slot_and_gives_it_back(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build_server()  # max_listen_streams=1
    async with connected(mcp_registry, server) as first:
        await initialize(first)
        await send(first, {"id": 1, "method": "ping"})
        await receive(first)
        async with connected(mcp_registry, server) as second:
            await initialize(second)
            await send(second, {"id": 1, "method": "ping"})
            await receive(second)

            @server.tool()
            async def added(ctx: Context) -> str:
                return "new"

            # The server's one slot is the first connection's: the second is not notified.
            assert (await receive(first))["method"] == "notifications/tools/list_changed"
            assert await nothing_pending(second)
    async with connected(mcp_registry, server) as third:  # the slots were given back
        await initialize(third)
        await send(third, {"id": 1, "method": "ping"})
        await receive(third)
        server.remove_tool("added")
        assert (await receive(third))["method"] == "notifications/tools/list_changed"
