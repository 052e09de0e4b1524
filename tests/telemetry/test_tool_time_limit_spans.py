"""A tool's own ``time_limit`` shows in telemetry as the server-wide one: cause ``time_limit``."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.otel import Otel, attrs_of


async def test_a_tools_time_limit_is_a_server_cancel_with_the_time_limit_cause(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = McpServer("spans", telemetry=otel.telemetry)

    @server.tool(time_limit=3)
    async def stubborn(ctx: Context) -> str:
        await trio.sleep(1000)
        return "never"

    async with open_test_client(server, registry_config=RegistryConfig(grace_period=1)) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("stubborn")
        assert caught.value.code == -32800
    attributes: dict[str, Any] = attrs_of(otel.span("tools/call stubborn"))
    assert attributes["mcp_cancel.cancel.kind"] == "server"
    assert attributes["mcp_cancel.cancel.cause"] == "time_limit"
    assert attributes["mcp_cancel.cancel.phase"] == "hard_cancel"
    assert attributes["mcp_cancel.cancel.reason"] == "time limit of 3 s reached"
    labels = {
        "mcp_cancel__cancel__kind": "server",
        "mcp_cancel__cancel__cause": "time_limit",
        "mcp_cancel__cancel__phase": "hard_cancel",
    }
    assert otel.value("mcp_cancel.cancellations", **labels) == 1
