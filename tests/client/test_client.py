"""The public MCP client: cancellation forwarded end to end, on every transport.

Chains run a gateway server A whose tool calls server B through a client.
In memory (``open_test_client``, the same engine) they run on the autojump
clock, so "within one round trip" and "on time" are exact virtual times;
one HTTP chain per era runs over real 127.0.0.1 sockets (the modern era's
cancel *is* a closed connection), and WebSocket and stdio each get a real
round trip with a cancel.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import (
    HardCancelEvent,
    Registry,
    RegistryConfig,
    RequestCancelledEvent,
)
from trio_mcp_cancel._client.http import HttpTransport
from trio_mcp_cancel.client import (
    McpClient,
    McpError,
    McpTransportError,
    open_client,
    open_http_client,
    open_stdio_client,
    open_websocket_client,
)
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import (
    EventRecorder,
    McpTestClient,
    assert_no_leaks,
    open_test_client,
)
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.client import cancel_relay, http_server

BOUND = 30


class Downstream:
    """Server B: ``watched`` records when its flag is set, then ignores it."""

    def __init__(self) -> None:
        self.server = McpServer("B")
        self.flagged: list[tuple[float, str]] = []
        self.started = trio.Event()

        @self.server.tool()
        async def watched(ctx: Context) -> str:
            self.started.set()
            await ctx.request.wait_cancelled()
            cancellation = ctx.request.cancellation
            assert cancellation is not None
            self.flagged.append((trio.current_time(), cancellation.kind))
            await trio.sleep_forever()  # stubborn: only the hard cancel stops it
            return "unreachable"

        @self.server.tool()
        async def echo(ctx: Context, text: str) -> str:
            await ctx.report_progress(1, 2, "half")
            return text


def gateway(upstream: list[Any]) -> McpServer:
    """Server A: ``relay`` calls B's ``watched`` through ``upstream[0]``."""
    server = McpServer("A")

    @server.tool()
    async def relay(ctx: Context, tool: str = "watched") -> Any:
        client = upstream[0]
        return await client.call_tool(tool, {"text": "hi"} if tool == "echo" else {})

    return server


def hard_cancel_times(registry: Registry) -> list[float]:
    times: list[float] = []
    registry.events.subscribe(
        lambda event: (
            times.append(trio.current_time()) if isinstance(event, HardCancelEvent) else None
        )
    )
    return times


@asynccontextmanager
async def memory_chain(
    b: Downstream, *, forward_cancel: bool = True
) -> AsyncIterator[tuple[McpTestClient, McpTestClient, list[float]]]:
    """A (grace 10) whose ``relay`` calls B (grace 4) in memory: ``(to_a, to_b, b_hard)``."""
    upstream: list[McpTestClient] = []
    async with open_test_client(b.server, registry_config=RegistryConfig(grace_period=4)) as to_b:
        to_b.forward_cancel = forward_cancel
        upstream.append(to_b)
        b_hard = hard_cancel_times(to_b.registry)
        async with open_test_client(
            gateway(upstream), registry_config=RegistryConfig(grace_period=10)
        ) as to_a:
            yield to_a, to_b, b_hard


async def test_memory_chain_forwards_the_flag_at_once_and_both_end_on_time(
    autojump_clock: MockClock,
) -> None:
    b = Downstream()
    async with memory_chain(b) as (to_a, to_b, b_hard):
        a_events = EventRecorder.attach(to_a.registry)
        call, cancelled_at = await cancel_relay(to_a, b.started)
        await to_b.registry.wait_idle()
        await to_a.registry.wait_idle()
        # B's flag was set in the same instant (one message, no waiting),
        # by a client cancel; B ignored it and was hard-cancelled exactly
        # its grace period later.  A's call ended at the flag: nothing
        # was left to wait for, so A never needed its own hard cancel.
        assert b.flagged == [(cancelled_at, "client")]
        assert b_hard == [cancelled_at + 4]
        assert a_events.of_type(HardCancelEvent) == []
        await to_a.assert_no_answer(call)
        assert_no_leaks(to_a.registry)
        assert_no_leaks(to_b.registry)


async def test_without_forwarding_the_hard_cancel_of_a_cancels_b(
    autojump_clock: MockClock,
) -> None:
    b = Downstream()
    # Only the enclosing scope's cancel reaches B.
    async with memory_chain(b, forward_cancel=False) as (to_a, to_b, b_hard):
        a_hard = hard_cancel_times(to_a.registry)
        call = to_a.start_call("relay")
        await b.started.wait()
        cancelled_at = trio.current_time()
        await call.cancel("stop")
        await to_b.registry.wait_idle()
        assert a_hard == [cancelled_at + 10]  # A hard-cancelled on time...
        assert b.flagged == [(cancelled_at + 10, "client")]  # ...which cancels B's call
        assert b_hard == [cancelled_at + 14]


async def test_a_cancelled_scope_cancels_the_downstream_call(autojump_clock: MockClock) -> None:
    b = Downstream()
    async with open_test_client(b.server, registry_config=RegistryConfig(grace_period=1)) as to_b:
        with trio.move_on_after(3):
            await to_b.call_tool("watched")
        await to_b.registry.wait_idle()
        assert b.flagged == [(3, "client")]


# -- real sockets ----------------------------------------------------------------


@pytest.mark.parametrize(("era", "kind"), [("modern", "disconnect"), ("legacy", "client")])
async def test_http_chain_cancels_downstream_in_the_eras_own_way(era: Any, kind: str) -> None:
    # Modern: the gateway closes the request's stream (B sees a disconnect);
    # legacy: it posts notifications/cancelled (B sees a client cancel).
    b = Downstream()
    with trio.fail_after(BOUND):
        async with http_server(b.server, grace_period=0.2) as (url, b_registry):
            b_events = EventRecorder.attach(b_registry)
            async with open_http_client(url, era=era) as to_b:
                assert (to_b.era, to_b.initialize_result is not None) == (era, era == "legacy")
                result = await to_b.call_tool("echo", {"text": "hi"})
                assert result["content"] == [{"type": "text", "text": "hi"}]
                upstream: list[McpClient] = [to_b]
                async with open_test_client(
                    gateway(upstream), registry_config=RegistryConfig(grace_period=30)
                ) as to_a:
                    call = to_a.start_call("relay")
                    await b.started.wait()
                    await call.cancel("stop")
                    await to_a.registry.wait_idle()
                    with trio.fail_after(10):
                        while not b_events.of_type(HardCancelEvent):
                            await trio.sleep(0.01)
                    await b_registry.wait_idle()
            assert [k for _, k in b.flagged] == [kind]
            assert [e.kind for e in b_events.of_type(RequestCancelledEvent)] == [kind]
            assert_no_leaks(b_registry)


async def test_http_client_progress_errors_and_tool_list() -> None:
    b = Downstream()
    with trio.fail_after(BOUND):
        async with http_server(b.server) as (url, _), open_client(url, era="auto") as client:
            assert client.era == "modern"
            seen: list[dict[str, Any]] = []
            result = await client.call_tool("echo", {"text": "x"}, progress=seen.append)
            assert result["content"][0]["text"] == "x"
            assert [p["message"] for p in seen] == ["half"]
            assert sorted(t["name"] for t in await client.list_tools()) == ["echo", "watched"]
            with pytest.raises(McpError) as info:
                await client.request("no/such/method")
            assert info.value.code == -32601
            assert client.calls == {}  # answered calls are forgotten


async def test_legacy_http_client_renews_an_ended_session_and_retries_only_what_is_safe() -> None:
    import httpx

    b = Downstream()
    with trio.fail_after(BOUND):
        async with http_server(b.server) as (url, _), open_http_client(url, era="legacy") as client:
            assert isinstance(client.transport, HttpTransport)
            session = client.transport.session_id
            assert session
            async with httpx.AsyncClient() as raw:
                ended = await raw.delete(url, headers={"mcp-session-id": session})
                assert ended.status_code in (200, 204)
                # A tools/call is not sent again (it might have run): the error says
                # so, and the session is already renewed for the next call.
                with pytest.raises(McpTransportError, match="not sent again") as info:
                    await client.call_tool("echo", {"text": "x"})
                assert info.value.data == {
                    "status": 404,
                    "session_ended": True,
                    "reinitialized": True,
                }
                renewed = client.transport.session_id
                assert renewed not in (None, session)
                assert (await client.call_tool("echo", {"text": "y"}))["content"][0]["text"] == "y"
                # Anything else is retried in the new session, once.
                ended = await raw.delete(url, headers={"mcp-session-id": renewed})
                assert ended.status_code in (200, 204)
            assert sorted(t["name"] for t in await client.list_tools()) == ["echo", "watched"]
            assert client.transport.session_id not in (None, session, renewed)


async def test_http_client_reports_a_dead_endpoint() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with trio.fail_after(BOUND):
            async with open_http_client(f"http://127.0.0.1:{port}/mcp") as client:
                with pytest.raises(McpTransportError, match="cannot connect"):
                    await client.call_tool("echo", {"text": "x"})


@pytest.mark.mcp_registry(grace_period=0.2)
async def test_websocket_client_round_trip_and_cancel(mcp_registry: Registry) -> None:
    b = Downstream()
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            events = EventRecorder.attach(mcp_registry)
            ws_server = await nursery.start(
                partial(serve_mcp_websocket, b.server, mcp_registry, "127.0.0.1", 0)
            )
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_client(url, era="legacy") as client:
                assert (await client.call_tool("echo", {"text": "w"}))["content"][0]["text"] == "w"
                with trio.move_on_after(30) as scope:
                    async with trio.open_nursery() as inner:
                        inner.start_soon(client.call_tool, "watched")
                        await b.started.wait()
                        scope.cancel()
                while not events.of_type(HardCancelEvent):
                    await trio.sleep(0.01)
            assert [k for _, k in b.flagged] == ["client"]
            nursery.cancel_scope.cancel()


STDIO_SERVER = textwrap.dedent(
    """
    import sys, trio
    from trio_mcp_cancel.server import McpServer, Context
    from trio_mcp_cancel import RegistryConfig
    from trio_mcp_cancel.stdio import run_stdio

    server = McpServer("stdio-b")

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    @server.tool()
    async def watched(ctx: Context, path: str) -> str:
        open(path, "w").write("started")
        await ctx.request.wait_cancelled()
        open(path, "w").write("flagged:" + ctx.request.cancellation.kind)
        await trio.sleep_forever()

    run_stdio(server, registry_config=RegistryConfig(grace_period=0.2))
    """
)


@pytest.mark.subprocess
async def test_stdio_client_round_trip_cancel_and_shutdown(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(STDIO_SERVER)
    marker = tmp_path / "marker"
    with trio.fail_after(BOUND):
        async with open_stdio_client([sys.executable, str(script)], era="auto") as client:
            assert client.era == "modern"
            assert (await client.call_tool("echo", {"text": "s"}))["content"][0]["text"] == "s"
            with trio.move_on_after(30) as scope:
                async with trio.open_nursery() as inner:
                    inner.start_soon(partial(client.call_tool, "watched", {"path": str(marker)}))
                    while not marker.exists():
                        await trio.sleep(0.01)
                    scope.cancel()
            while marker.read_text() != "flagged:client":
                await trio.sleep(0.01)
        # Leaving the block stopped the server; a call now fails clearly.
    with pytest.raises(trio.ClosedResourceError):
        await client.call_tool("echo", {"text": "late"})


@pytest.mark.subprocess
async def test_stdio_client_fails_calls_when_the_server_dies(tmp_path: Path) -> None:
    with trio.fail_after(BOUND):
        async with open_stdio_client(
            [sys.executable, "-c", "import sys; sys.stdin.readline()"]
        ) as client:
            with pytest.raises(McpTransportError, match="closed"):
                await client.call_tool("echo", {"text": "x"})


def test_open_client_refuses_unknown_targets() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="ws"):
            async with open_client("ftp://example"):
                pass

    trio.run(main)
