"""A hostile upstream costs the gateway a bounded amount, and only its own namespace.

An upstream lists names that are invalid once prefixed or that collide with
the gateway's own, schemas that are not objects, URIs without a scheme, too
many items, too many bytes, endless pages, and floods a call with log
messages: the bad items are refused (logged), the lists are cut at their
bounds, the relay queue is bounded in bytes, and the gateway serves on.
"""

from __future__ import annotations

import logging

import attrs
import pytest
import trio
import trio.testing

from trio_mcp_cancel._gateway.relay import MAX_QUEUED_BYTES, Relay
from trio_mcp_cancel._protocol.resources import Resource
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client


def hostile_upstream() -> McpServer:
    up = McpServer("hostile")

    @up.tool()
    async def echo(text: str) -> str:
        return text

    @up.tool()
    async def a_b() -> str:
        return "a_b"

    tools = up.registration.tools
    # Names MCP tools may not have, or that do not fit once prefixed: forced past
    # the upstream's own checks, as a server in another language might send them.
    for bad in ("bad name!", "x" * 127, "new\nline"):
        tools[bad] = attrs.evolve(tools["echo"], name=bad)
    tools["not_an_object"] = attrs.evolve(
        tools["echo"], name="not_an_object", input_schema={"type": "string"}
    )

    async def read() -> str:
        return "x"

    up.registration.resources.add(Resource("no-scheme-at-all", "bad", read))
    up.registration.resources.add(Resource("file:///fine.txt", "fine", read))
    return up


async def test_refused_names_are_logged_and_the_rest_is_served(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = McpServer("gateway")

    @gateway.tool(name="up_echo")
    async def own_echo(text: str) -> str:
        return f"gateway's own {text}"

    caplog.set_level(logging.WARNING, logger="trio_mcp_cancel.gateway")
    upstream = gateway.mount(hostile_upstream(), namespace="up")
    async with open_test_client(gateway) as client:
        names = {tool["name"] for tool in await client.list_tools()}
        assert names == {"up_echo", "up_a_b"}
        # The gateway's own tool keeps its name; the upstream's echo was refused.
        result = await client.call_tool("up_echo", {"text": "hi"})
        assert result["content"][0]["text"] == "gateway's own hi"
        assert (await client.call_tool("up_a_b"))["content"][0]["text"] == "a_b"
        uris = [r["uri"] for r in (await client.request("resources/list"))["resources"]]
        assert uris == ["file://up//fine.txt"]
    assert upstream.catalogue.refused == 6  # echo, 3 bad names, the schema, the URI
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 6
    assert all("upstream 'up'" in line for line in refused)


async def test_lists_are_cut_at_their_bounds_in_items_bytes_and_pages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    many = McpServer("many", page_size=1)
    for index in range(150):

        @many.tool(name=f"t{index}", description="d" * 20_000)
        async def tool() -> str:
            return "x"

    gateway = McpServer("gateway")
    by_items = gateway.mount(many, namespace="items", max_items=30)
    by_bytes = gateway.mount(many, namespace="bytes", max_listing_bytes=200_000)
    by_pages = gateway.mount(many, namespace="pages")
    async with open_test_client(gateway):
        assert len(by_items.catalogue.tools) == 30
        assert len(by_bytes.catalogue.tools) == 9  # 20 kB each: the tenth passes 200 kB
        assert len(by_pages.catalogue.tools) == 100  # one per page, 100 pages at most


def test_the_relay_queue_is_bounded_in_bytes() -> None:
    relay = Relay(Context(1, caller=None), "upstream 'up'")  # type: ignore[arg-type]
    message = {"method": "notifications/message", "params": {"level": "info", "data": "x" * 10_000}}
    for _ in range(1000):  # 10 MB offered, nothing forwarded
        relay.notify(message)
    assert relay.queued_bytes <= MAX_QUEUED_BYTES
    assert relay.dropped > 800


async def test_a_flood_of_log_messages_leaves_the_gateway_serving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up = McpServer("flooder")

    @up.tool()
    async def flood(ctx: Context) -> str:
        for _ in range(3000):
            await ctx.log("info", "y" * 2000)
        return "flooded"

    @up.tool()
    async def echo(text: str) -> str:
        return text

    gateway = McpServer("gateway")
    gateway.mount(up, namespace="up")
    async with open_test_client(gateway, log_level="info") as client:
        result = await client.call_tool("up_flood")
        assert result["content"][0]["text"] == "flooded"
        assert 0 < len(client.log_messages) <= 3000
        assert (await client.call_tool("up_echo", {"text": "still"}))["content"][0]["text"] == (
            "still"
        )


async def test_an_upstream_announcing_changes_in_a_loop_is_listed_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    up = McpServer("chatty")

    @up.tool()
    async def echo(text: str) -> str:
        return text

    gateway = McpServer("gateway")
    upstream = gateway.mount(up, namespace="up")
    async with open_test_client(gateway) as client:
        start = trio.current_time()
        while trio.current_time() - start < 5:
            for _ in range(100):
                up.tools_changed()
            await trio.sleep(0.05)
        await trio.sleep(2)
        # 10,000 announcements in 5 s: a listing a second at most, and one after the last.
        assert 1 <= upstream.resyncs <= 7
        assert (await client.call_tool("up_echo", {"text": "ok"}))["content"][0]["text"] == "ok"
