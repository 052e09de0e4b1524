"""The official TypeScript SDK v1 client answers ``ctx.elicit`` (legacy), and is told of a cancel.

``conformance/ts_client_elicit.mjs`` registers ``ElicitRequestSchema``,
``CreateMessageRequestSchema`` and ``ListRootsRequestSchema`` handlers,
calls a tool that asks all three, then aborts a call whose elicitation is
pending: the server sends ``notifications/cancelled`` for its question and
the handler's abort signal fires.  Node tooling as in
``test_ts_sdk_client.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel import Registry, RequestCancelled
from trio_mcp_cancel.server import Context, McpServer

from _support.client import hypercorn_checked, node_report
from _support.repo_paths import ROOT

# A Node script in a subprocess; the `mcp_registry` marker configures the registry fixture.
pytestmark = [pytest.mark.node, pytest.mark.subprocess, pytest.mark.mcp_registry(grace_period=2)]

SCRIPT = ROOT / "conformance" / "ts_client_elicit.mjs"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@asynccontextmanager
async def running(registry: Registry, seen: list[str]) -> AsyncIterator[str]:
    server = McpServer("ts-sdk-elicit")

    @server.tool()
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", SCHEMA)
        assert answer.content is not None
        sampled = await ctx.sample(f"Greet {answer.content['name']}", 20)
        roots = await ctx.list_roots()
        return f"{sampled['content']['text']} ({len(roots)} roots)"

    @server.tool()
    async def waits(ctx: Context) -> str:
        try:
            await ctx.elicit("Never answered", SCHEMA)
        except RequestCancelled as exc:
            seen.append(f"waits cancelled: {exc.kind}")
            raise
        return "answered"

    async with hypercorn_checked(server, registry) as url:
        yield url


async def test_typescript_sdk_answers_elicitation_and_is_told_of_the_cancel(
    node: Path, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    with trio.fail_after(90):
        async with running(mcp_registry, seen) as url:
            # ES modules resolve packages next to the script: run it from .tools/.
            report = await node_report(node, SCRIPT, url)
    assert report["protocolVersion"] == "2025-11-25"
    assert report["greeted"] == "Hello Ada (1 roots)"
    assert report["abortOutcome"] == "aborted"
    assert seen == ["waits cancelled: client"]
    # The server's notifications/cancelled reached the SDK: the pending handler's signal fired.
    # (with the client's own reason, which the server's cancel carries), before the client closed.
    assert report["abortedBeforeClose"] == "user pressed stop", report
    assert report["afterAbort"] == "Hello Ada (1 roots)"
    assert report["errors"] == []
