"""Downstream calls inherit their caller: its time limit and its two cancel phases.

Gateway A's tool calls server B through a client, in memory on the
autojump clock, so every instant is exact.  A time limit around the
downstream call (the tool's own, or the server's cancel of A's request
for running too long) reaches B at once as B's flag; B then hard-cancels
after *its* grace, not A's.
"""

from __future__ import annotations

from typing import Any

import trio
from trio.testing import MockClock

from trio_mcp_cancel import HardCancelEvent, Registry, RegistryConfig
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import McpTestClient, open_test_client


class B:
    def __init__(self) -> None:
        self.server = McpServer("B")
        self.flagged: list[tuple[float, str]] = []
        self.started = trio.Event()

        @self.server.tool()
        async def watched(ctx: Context) -> str:
            self.started.set()
            await ctx.request.wait_cancelled()
            assert ctx.request.cancellation is not None
            self.flagged.append((trio.current_time(), ctx.request.cancellation.kind))
            await trio.sleep_forever()  # stubborn: only the hard cancel stops it
            return "unreachable"


def hard_cancels(registry: Registry) -> list[float]:
    times: list[float] = []
    registry.events.subscribe(
        lambda e: times.append(trio.current_time()) if isinstance(e, HardCancelEvent) else None
    )
    return times


def gateway(to_b: list[McpTestClient], limit: float | None) -> McpServer:
    a = McpServer("A")

    @a.tool()
    async def relay(ctx: Context) -> Any:
        if limit is None:
            return await to_b[0].call_tool("watched")
        with trio.move_on_after(limit):  # the tool's own time limit
            return await to_b[0].call_tool("watched")
        return "timed out"

    return a


async def test_a_tools_time_limit_cancels_the_downstream_call_when_it_runs_out(
    autojump_clock: MockClock,
) -> None:
    b = B()
    upstream: list[McpTestClient] = []
    async with open_test_client(b.server, registry_config=RegistryConfig(grace_period=4)) as to_b:
        upstream.append(to_b)
        b_hard = hard_cancels(to_b.registry)
        async with open_test_client(gateway(upstream, 2.5)) as to_a:
            result = await to_a.call_tool("relay")
            assert result["content"][0]["text"] == "timed out"
            assert trio.current_time() == 2.5  # A's call returned at its limit
        await to_b.registry.wait_idle()
    assert b.flagged == [(2.5, "client")]  # B's flag, in the same instant
    assert b_hard == [2.5 + 4]  # B's own grace, not A's


async def test_a_server_time_limit_on_the_caller_flags_the_downstream_call_at_once(
    autojump_clock: MockClock,
) -> None:
    b = B()
    upstream: list[McpTestClient] = []
    async with open_test_client(b.server, registry_config=RegistryConfig(grace_period=4)) as to_b:
        upstream.append(to_b)
        b_hard = hard_cancels(to_b.registry)
        async with open_test_client(
            gateway(upstream, None), registry_config=RegistryConfig(grace_period=10)
        ) as to_a:
            a_hard = hard_cancels(to_a.registry)
            call = to_a.start_call("relay")
            await b.started.wait()
            await trio.sleep(1)
            (running,) = to_a.registry.requests()
            # A's server stops the request for running too long: the polite phase.
            assert to_a.registry.cancel_request(running, "time limit", kind="server")
            await to_a.registry.wait_idle()
            await to_b.registry.wait_idle()
            assert call.response is not None  # a server cancel is answered -32800
            assert call.response["error"]["code"] == -32800
    assert b.flagged == [(1, "client")]  # forwarded at once, as B's client cancel
    assert b_hard == [1 + 4]
    assert a_hard == []  # A's tool ended at the flag; it needed no hard cancel
