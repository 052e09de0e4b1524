"""The official Python SDK client (legacy mode) resumes our SSE streams and uses the GET stream.

The SDK's streamable HTTP client reconnects a request's stream that ended
without an answer with ``GET`` and ``Last-Event-ID`` (after the ``retry`` we
send), and opens the session's GET stream after ``initialize``.  Here its
HTTP client's read timeout (1 s, no keep-alives from us) cuts the streams
of tools that stay silent longer: the cut is resumed, and the tool's
progress and answer arrive exactly once, with no cancel on the server.

One cut per call: when a *resumed* stream is cut by an error (a read
timeout), mcp 2.3 reconnects with the ``Last-Event-ID`` it first resumed
from, not the last one it received (``_handle_reconnection``'s ``except``
branch), so the server rightly replays events the client already had.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx2
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from trio_mcp_cancel import Event, Registry, RequestCancelledEvent
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks

TIMEOUT = 30


def make_server() -> McpServer:
    server = McpServer("sdk-resume-test")

    @server.tool()
    async def halting(ctx: Context, steps: int = 2, pause: float = 2.5) -> str:
        """Reports progress, then stays silent for longer than the client's read timeout."""
        for i in range(1, steps + 1):
            await ctx.report_progress(i, total=steps)
            if i < steps:
                await trio.sleep(pause)
        return f"done after {steps}"

    @server.resource("test://doc", name="doc")
    async def doc(ctx: Context) -> str:
        return "doc"

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=0.3)


@asynccontextmanager
async def running(registry: Registry, server: McpServer) -> AsyncIterator[tuple[str, list[Event]]]:
    async with trio.open_nursery() as nursery:
        events: list[Event] = []
        registry.events.subscribe(events.append)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.errorlog = None
        config.accesslog = None
        config.graceful_timeout = 0.5
        app = McpHttpApp(server, registry, limits=ConnectionLimits(keepalive_interval=None))
        binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        try:
            yield f"{binds[0]}/mcp", events
            await registry.wait_idle()
            assert_no_leaks(registry)
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def legacy_client(url: str, read_timeout: float) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=read_timeout))
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


async def test_the_sdk_resumes_a_cut_stream_and_gets_every_progress_and_the_answer_once(
    mcp_registry: Registry,
) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    with trio.fail_after(TIMEOUT):
        async with running(mcp_registry, make_server()) as (url, events):
            async with legacy_client(url, read_timeout=1.0) as c:
                result = await c.call_tool("halting", {}, progress_callback=on_progress)
                assert not result.is_error
                assert result.content[0].text == "done after 2"  # type: ignore[union-attr]
            assert progress == [1, 2]
            assert not [e for e in events if isinstance(e, RequestCancelledEvent)]


async def test_the_sdk_sees_the_legacy_capabilities_and_subscribes(mcp_registry: Registry) -> None:
    with trio.fail_after(TIMEOUT):
        server = make_server()
        async with (
            running(mcp_registry, server) as (url, _),
            legacy_client(url, read_timeout=30.0) as c,
        ):
            capabilities: Any = c.server_capabilities
            assert capabilities.resources.subscribe is True
            assert capabilities.resources.list_changed is True
            assert capabilities.tools.list_changed is True
            await c.subscribe_resource("test://doc")
            await c.unsubscribe_resource("test://doc")
