"""One tool written with ``await ctx.elicit(...)``, answered by the official Python SDK client.

Legacy mode (``initialize`` + ``Mcp-Session-Id``): the question arrives on
the call's SSE stream and the SDK's ``elicitation_callback`` /
``sampling_callback`` / ``list_roots_callback`` answer it with a POST.  Modern
mode: the same tool asks through MRTR rounds, which the SDK answers with
the same callbacks.  A tool cancelled while its question is pending tells
the SDK, whose pending callback is then cancelled.  Real hypercorn on
127.0.0.1, ``trio.fail_after`` everywhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client, types
from mcp.shared.exceptions import MCPError

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks

TIMEOUT = 15
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server(seen: list[str]) -> McpServer:
    server = McpServer("sdk-elicitation")

    @server.tool()
    async def greet(ctx: Context) -> str:
        """Asks a name, asks the model, lists roots, then answers (one body, both eras)."""
        answer = await ctx.elicit("Your name?", SCHEMA)
        if not answer.accepted or answer.content is None:
            return f"no name ({answer.action})"
        sampled = await ctx.sample(f"Greet {answer.content['name']}", 20)
        roots = await ctx.list_roots()
        seen.append("greet: done")
        return f"{sampled['content']['text']} ({len(roots)} roots)"

    @server.tool()
    async def waits(ctx: Context) -> str:
        """Asks, and is cancelled by the server's time limit before any answer."""
        seen.append("waits: asking")
        await ctx.elicit("Never answered", SCHEMA)
        return "answered"

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=0.3)


@asynccontextmanager
async def running(
    registry: Registry, seen: list[str], **options: Any
) -> AsyncIterator[tuple[str, Registry]]:
    async with trio.open_nursery() as nursery:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.errorlog = None
        config.accesslog = None
        config.graceful_timeout = 0.5
        app = McpHttpApp(make_server(seen), registry, **options)
        binds = await nursery.start(partial(serve, app, config))
        try:
            yield f"{binds[0]}/mcp", registry
        finally:
            nursery.cancel_scope.cancel()


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert params.message == "Your name?"
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
    prompt = params.messages[0].content
    assert isinstance(prompt, types.TextContent)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=prompt.text.replace("Greet", "Hello")),
        model="test-model",
    )


async def on_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work")])


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_sdk_answers_a_tool_written_once_in_both_eras(
    mode: str, mcp_registry: Registry
) -> None:
    seen: list[str] = []
    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry, seen) as (url, registry),
            Client(
                url,
                mode=mode,  # type: ignore[arg-type]
                elicitation_callback=on_elicit,
                sampling_callback=on_sample,
                list_roots_callback=on_roots,
            ) as client,
        ):
            result = await client.call_tool("greet", {})
            assert not result.is_error, result
            assert result.content[0].text == "Hello Ada (1 roots)"  # type: ignore[union-attr]
            await registry.wait_idle()
            assert_no_leaks(registry)
    assert seen == ["greet: done"]


async def test_a_declined_elicitation_reaches_the_tool_as_a_value(mcp_registry: Registry) -> None:
    seen: list[str] = []

    async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry, seen) as (url, _),
            Client(url, mode="legacy", elicitation_callback=decline) as client,
        ):
            result = await client.call_tool("greet", {})
    assert result.content[0].text == "no name (decline)"  # type: ignore[union-attr]


async def test_a_cancelled_tool_cancels_the_sdks_pending_elicitation_handler(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    handler: list[str] = []
    entered = trio.Event()

    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        handler.append("asked")
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            handler.append("handler cancelled")  # the SDK applied notifications/cancelled
        raise AssertionError("unreachable")

    limits = ConnectionLimits(max_request_time=1.0)
    with trio.fail_after(TIMEOUT):
        async with (
            running(mcp_registry, seen, limits=limits) as (url, registry),
            Client(url, mode="legacy", elicitation_callback=never) as client,
        ):
            with pytest.raises(MCPError) as caught:
                await client.call_tool("waits", {})
            assert caught.value.error.code == -32800
            while "handler cancelled" not in handler:
                await trio.sleep(0.01)
            await registry.wait_idle()
            assert_no_leaks(registry)
    assert handler == ["asked", "handler cancelled"]
    assert seen == ["waits: asking"]
