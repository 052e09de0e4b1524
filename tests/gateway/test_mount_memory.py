"""Mount and proxy in one process: names, cancellation across the hop, id remapping.

The gateway is served to the in-memory test client, its upstream (another
``McpServer``) in memory too, all under Trio's MockClock: every grace
period and backoff is skipped, and what is asserted is what the upstream
saw.
"""

from __future__ import annotations

import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig, checkpoint_cancelled

from trio_mcp_cancel.server import McpServer, ToolContext
from trio_mcp_cancel.testing import open_test_client


def upstream_server(seen: list[str]) -> McpServer:
    up = McpServer("upstream")

    @up.tool()
    async def echo(text: str) -> str:
        return f"up:{text}"

    @up.tool()
    async def wait(ctx: ToolContext) -> str:
        seen.append(f"started {ctx.request_id}")
        try:
            while True:
                await trio.sleep(0.1)
                await checkpoint_cancelled()
        finally:
            seen.append("stopped")

    @up.resource("file:///notes.txt")
    async def notes() -> str:
        return "some notes"

    @up.resource_template("docs://items/{item}")
    async def item(item: str) -> str:
        return f"item {item}"

    @up.prompt()
    async def greet(who: str) -> str:
        return f"hello {who}"

    return up


async def test_an_upstreams_offer_appears_under_the_namespace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = McpServer("gateway")
    gateway.mount(upstream_server([]), namespace="up")
    async with open_test_client(gateway) as client:
        tools = {tool["name"] for tool in await client.list_tools()}
        assert {"up_echo", "up_wait"} <= tools
        result = await client.call_tool("up_echo", {"text": "hi"})
        assert result["content"] == [{"type": "text", "text": "up:hi"}]
        resources = await client.request("resources/list")
        assert [r["uri"] for r in resources["resources"]] == ["file://up//notes.txt"]
        read = await client.request("resources/read", {"uri": "file://up//notes.txt"})
        assert read["contents"][0]["text"] == "some notes"
        read = await client.request("resources/read", {"uri": "docs://up/items/42"})
        assert read["contents"][0]["text"] == "item 42"
        prompt = await client.request("prompts/get", {"name": "up_greet", "arguments": {"who": "x"}})
        assert prompt["messages"][0]["content"]["text"] == "hello x"


async def test_a_cancel_at_the_gateway_stops_the_upstream_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    gateway = McpServer("gateway")
    gateway.mount(upstream_server(seen), namespace="up")
    async with open_test_client(gateway, registry_config=RegistryConfig(grace_period=5)) as client:
        call = client.start_call("up_wait")
        await trio.sleep(1)
        assert seen and seen[0].startswith("started")
        await call.cancel("user pressed stop")
        await trio.sleep(0.5)
        assert seen[-1] == "stopped"
        await client.assert_no_answer(call)
