"""Our client against the official MCP Python SDK server (``MCPServer``, mcp 2.3).

Both eras, over Streamable HTTP (the SDK's Starlette app on hypercorn's
Trio worker, in this process, so the test sees the SDK's handler being
cancelled) and over stdio (the SDK server as a child process, reporting
its cancellation on stderr): a call with progress, a cancel that the
SDK's handler sees, and an elicitation answered by the client's handler
(modern: the SDK's MRTR ``input_required`` round; legacy: the SDK's
``elicitation/create`` request on the call's stream, answered by a POST).
The TypeScript SDK v2 server: tests/interop/test_client_ts_server.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel.client import ClientHandlers, McpClient, open_http_client, open_stdio_client

from _support.repo_paths import TESTS
from _support.sdk_server_app import make

pytestmark = [pytest.mark.subprocess]

BOUND = 60
ERAS = ["modern", "legacy"]
# Run as a module from tests/ (not as a script from tests/_support/, whose module names
# would then shadow top-level packages such as ``redis``).
SERVER = [sys.executable, "-m", "_support.sdk_server_app"]


async def answer_name(params: dict[str, Any]) -> dict[str, Any]:
    assert params["message"] == "Name?"
    return {"action": "accept", "content": {"name": "Ada"}}


HANDLERS = ClientHandlers(elicitation=answer_name)


@asynccontextmanager
async def sdk_http(seen: list[str]) -> AsyncIterator[str]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, make(seen).streamable_http_app(), config)
        yield f"{binds[0]}/mcp"
        nursery.cancel_scope.cancel()


async def exercise(client: McpClient, cancelled: Any) -> None:
    """Call with progress, elicit, cancel: what every server here must do with our client."""
    progress: list[dict[str, Any]] = []
    result = await client.call_tool("echo", {"text": "x"}, progress=progress.append)
    assert result["content"] == [{"type": "text", "text": "x"}]
    assert [(p["progress"], p["message"]) for p in progress] == [(1, "half")]
    result = await client.call_tool("ask")
    assert result["content"] == [{"type": "text", "text": "hi Ada"}]
    started: list[dict[str, Any]] = []
    with trio.move_on_after(BOUND):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def slow() -> None:
                with scope:
                    await client.call_tool("slow", progress=started.append)

            nursery.start_soon(slow)
            while not started:  # the SDK's handler runs: it reported progress
                await trio.sleep(0.01)
            scope.cancel()
        await cancelled()
    # The connection is still good for the next call.
    assert (await client.call_tool("echo", {"text": "y"}))["content"][0]["text"] == "y"


@pytest.mark.parametrize("era", ERAS)
async def test_python_sdk_server_over_http(era: Any) -> None:
    seen: list[str] = []

    async def cancelled() -> None:
        while "slow cancelled" not in seen:
            await trio.sleep(0.01)

    with trio.fail_after(BOUND):
        async with sdk_http(seen) as url, open_http_client(url, era=era, handlers=HANDLERS) as c:
            assert (c.initialize_result is not None) == (era == "legacy")
            await exercise(c, cancelled)
    assert seen == ["slow cancelled"]


@pytest.mark.parametrize("era", ERAS)
async def test_python_sdk_server_over_stdio(era: Any) -> None:
    # The child's stderr is a pipe: the SDK handler's "slow cancelled" comes back on it.
    read_end, write_end = os.pipe()
    stderr = trio.lowlevel.FdStream(read_end)
    output = bytearray()

    async def cancelled() -> None:
        while b"slow cancelled" not in output:
            chunk = await stderr.receive_some(4096)
            assert chunk, "the SDK server closed its stderr"
            output.extend(chunk)

    with trio.fail_after(BOUND):
        try:
            async with open_stdio_client(
                SERVER, cwd=str(TESTS), era=era, handlers=HANDLERS, stderr=write_end
            ) as client:
                os.close(write_end)
                write_end = -1
                await exercise(client, cancelled)
        finally:
            if write_end != -1:
                os.close(write_end)
            await stderr.aclose()
