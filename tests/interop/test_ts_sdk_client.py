"""A second real client: the official TypeScript SDK (``@modelcontextprotocol/sdk``) over HTTP.

``conformance/ts_client_abort.mjs`` connects, calls a tool with progress,
aborts a long call with an ``AbortController``, waits, and calls again; it
reports every error the SDK raised (a late response or a late progress
notification is one: "unknown message ID" / "unknown token").  The server
runs here, on 127.0.0.1 with a random port, so the test also sees the
cancellation arrive and the tool stop.

The Node tooling comes from ``python3 dev.py conformance`` (into ``.tools/``).
Locally the test is skipped, saying so, when it is not installed; under
``CI=true`` it installs it, and fails if it cannot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel import (
    Event,
    Registry,
    RequestCancelled,
    RequestCancelledEvent,
    checkpoint_cancelled,
)
from trio_mcp_cancel.server import Context, McpServer

from _support.client import hypercorn_checked, node_report
from _support.repo_paths import ROOT

# A Node script in a subprocess; the `mcp_registry` marker configures the registry fixture.
pytestmark = [pytest.mark.node, pytest.mark.subprocess, pytest.mark.mcp_registry(grace_period=5)]

SCRIPT = ROOT / "conformance" / "ts_client_abort.mjs"


@asynccontextmanager
async def running(registry: Registry, seen: list[str], events: list[Event]) -> AsyncIterator[str]:
    server = McpServer("ts-sdk-test")

    @server.tool()
    async def count(ctx: Context, n: int = 10, delay: float = 0.02) -> str:
        """Counts, reporting progress every step."""
        try:
            for i in range(1, n + 1):
                await checkpoint_cancelled()
                await trio.sleep(delay)
                await ctx.report_progress(i, total=n)
        except RequestCancelled as exc:
            seen.append(f"count stopped: {exc.kind}")
            raise
        return f"counted to {n}"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    # A grace longer than a step, so the tool stops at its own next checkpoint.
    registry.events.subscribe(events.append)
    async with hypercorn_checked(server, registry) as url:
        yield url


async def test_typescript_sdk_connects_calls_and_aborts_cleanly(
    node: Path, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    events: list[Event] = []
    with trio.fail_after(90):
        async with running(mcp_registry, seen, events) as url:
            # ES modules resolve packages next to the script: run it from .tools/.
            report = await node_report(node, SCRIPT, url)
    # Connected (the SDK's legacy handshake: initialize, then a session), called with progress.
    assert report["sessionId"]
    assert report["completed"] == {"text": "counted to 3", "progress": [1, 2, 3]}
    # The abort rejected the call; the server saw the cancel and the tool stopped.
    assert report["abortOutcome"] == "aborted"
    assert report["progressBeforeAbort"] == 1
    assert seen == ["count stopped: client"]
    assert [e.kind for e in events if isinstance(e, RequestCancelledEvent)] == ["client"]
    # After the abort: no late response, no late progress, no error of any kind.
    assert report["progressAfterAbort"] == 0
    assert report["errors"] == []
    assert report["afterAbort"] == "still here"
