"""The README's "Time limits, a lifespan, and how the server looks" example runs as it says."""

from __future__ import annotations

import re
from typing import Any

import trio

from trio_mcp_cancel import Registry
from trio_mcp_cancel.testing import open_test_client

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(needle: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", README, flags=re.S):
        if needle in block:
            return str(block)
    raise AssertionError(f"no README block with {needle!r}")


async def test_the_readme_lifespan_and_time_limit_example_serves_what_it_says(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_features"}
    exec(compile(_block("@server.tool(time_limit=30"), "README.md", "exec"), namespace)
    server = namespace["server"]
    async with open_test_client(server, registry=mcp_registry, era="legacy") as client:
        assert client.initialize_result is not None
        info = client.initialize_result["serverInfo"]
        assert (info["title"], info["websiteUrl"]) == ("Inventory", "https://example.com/inventory")
        result = await client.call_tool("count_stock")
        assert result["content"][0]["text"] == "counted with 4 connections"
        (tool,) = (await client.request("tools/list"))["tools"]
        assert tool["title"] == "Count the stock"
