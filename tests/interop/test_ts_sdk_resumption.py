"""The official TypeScript SDK client (v1, 2025-11-25) on our GET stream and resumable streams.

``conformance/ts_client_resume.mjs`` connects (the SDK opens the session's
GET stream after ``initialize``), calls a tool that closes its own SSE
connection mid-call (SEP-1699 polling: the SDK reconnects with
``Last-Event-ID`` after our ``retry``), and counts the
``notifications/tools/list_changed`` its GET stream brings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel import Event, Registry, RequestCancelledEvent
from trio_mcp_cancel.server import Context, McpServer

from _support.client import hypercorn_checked, node_report
from _support.repo_paths import ROOT

# A Node script in a subprocess; the `mcp_registry` marker configures the registry fixture.
pytestmark = [pytest.mark.node, pytest.mark.subprocess, pytest.mark.mcp_registry(grace_period=1)]

SCRIPT = ROOT / "conformance" / "ts_client_resume.mjs"


@asynccontextmanager
async def running(
    registry: Registry, events: list[Event], closed: list[bool]
) -> AsyncIterator[str]:
    server = McpServer("ts-sdk-resume-test")

    @server.tool()
    async def polling(ctx: Context) -> str:
        """Reports progress, closes its stream's connection, reports again, answers."""
        await ctx.report_progress(1, total=2)
        closed.append(ctx.close_stream())
        await trio.sleep(1.5)
        await ctx.report_progress(2, total=2)
        return "polled"

    @server.tool()
    async def change(ctx: Context) -> str:
        server.tools_changed()
        return "changed"

    registry.events.subscribe(events.append)
    async with hypercorn_checked(server, registry) as url:
        yield url


async def test_typescript_sdk_resumes_a_polled_stream_and_hears_the_get_stream(
    node: Path, mcp_registry: Registry
) -> None:
    events: list[Event] = []
    closed: list[bool] = []
    with trio.fail_after(90):
        async with running(mcp_registry, events, closed) as url:
            report = await node_report(node, SCRIPT, url)
    assert report["protocolVersion"] == "2025-11-25"
    assert report["capabilities"]["tools"] == {"listChanged": True}
    assert closed == [True]
    assert report["polled"] == {"text": "polled", "progress": [1, 2]}
    assert report["listChanged"] == 1
    assert report["errors"] == []
    assert not [e for e in events if isinstance(e, RequestCancelledEvent)]
