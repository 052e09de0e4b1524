"""A cancellable call's response commits to SSE only while the call still runs.

MCP lets the server answer a POSTed request with one JSON body or an SSE
stream, its choice per request.  A cancellable ``tools/call`` that finishes
before it first suspends, having sent nothing, is answered with one
``application/json`` body (the cheaper response: one write, no chunked
framing); one that suspends gets its SSE head at once (keep-alives, progress,
a silent end after a client's cancel), as before; one that sends a progress
notification before it suspends commits to SSE right then.  In memory, with
the ASGI harness.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer

from _support.asgi import (
    AsgiClient,
    cancelled,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    served,
)


def build() -> McpServer:
    server = McpServer("lazy-sse")

    @server.tool()
    async def instant(ctx: Context) -> str:
        return "done"

    @server.tool()
    async def reports(ctx: Context) -> str:
        await ctx.report_progress(1, 2)  # before any suspension
        return "reported"

    @server.tool()
    async def waits(ctx: Context, seconds: float = 1.0) -> str:
        await trio.sleep(seconds)
        return "slept"

    return server


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=0)


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[AsgiClient]:
    async with served(McpHttpApp(build(), registry, **options), settle=60) as client:
        yield client


async def test_an_instant_call_answers_json_in_both_eras(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as client:
        message = modern_call(1, "instant")
        modern = await client.post(headers_of(message), message)
        assert modern.status == 200 and not modern.is_sse
        assert modern.headers["content-length"] == str(len(modern.content))
        assert modern.json()["id"] == 1
        assert modern.json()["result"]["content"][0]["text"] == "done"

        session = await initialize(client)
        legacy = await client.post(legacy_headers(session), legacy_call(2, "instant"))
        assert legacy.status == 200 and not legacy.is_sse
        assert legacy.headers["mcp-session-id"] == session  # the extra headers still go out
        assert legacy.json() == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": legacy.json()["result"],
        }
        assert legacy.json()["result"]["content"][0]["text"] == "done"


async def test_progress_before_the_first_suspension_commits_to_sse(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as client:
        message = modern_call(1, "reports", progress_token="p")
        exchange = await client.post(headers_of(message), message)
        assert exchange.is_sse, exchange.headers
        first, last = exchange.messages()
        assert first["method"] == "notifications/progress"
        assert first["params"]["progressToken"] == "p"
        assert last["id"] == 1 and last["result"]["content"][0]["text"] == "reported"
        # Without a progress token nothing is sent, so nothing commits: JSON.
        message = modern_call(2, "reports")
        plain = await client.post(headers_of(message), message)
        assert not plain.is_sse and plain.json()["result"]["content"][0]["text"] == "reported"


async def test_a_call_that_suspends_gets_its_sse_head_at_once_and_keepalives(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry, limits=ConnectionLimits(keepalive_interval=5)) as client:
        message = modern_call(1, "waits", {"seconds": 12})
        exchange = client.start("POST", headers_of(message), message)
        t0 = trio.current_time()
        await exchange.wait_started()
        assert exchange.started_at == t0 and exchange.is_sse
        await exchange.wait_complete()
        assert [c.at - t0 for c in exchange.comments()] == [5, 10]
        assert exchange.messages()[-1]["result"]["content"][0]["text"] == "slept"


async def test_a_cancel_before_the_call_ran_sends_no_answer_even_for_an_instant_tool(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # Legacy: a notifications/cancelled that arrives before its call is kept
    # and applied when the call starts.  The instant tool still "finishes",
    # but MCP forbids answering a request its client cancelled: the response
    # is an SSE stream that ends without a message, never a JSON result.
    async with serving(mcp_registry) as client:
        session = await initialize(client)
        note = await client.post(legacy_headers(session), cancelled(7, "changed my mind"))
        assert note.status == 202
        exchange = await client.post(legacy_headers(session), legacy_call(7, "instant"))
        assert exchange.status == 200 and exchange.is_sse
        assert exchange.messages() == []


async def test_a_client_cancel_while_suspended_ends_the_stream_silently(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    async with serving(mcp_registry) as client:
        session = await initialize(client)
        exchange = client.start(
            "POST", legacy_headers(session), legacy_call(3, "waits", {"seconds": 100})
        )
        await exchange.wait_started()
        assert exchange.is_sse
        note = await client.post(legacy_headers(session), cancelled(3))
        assert note.status == 202
        await exchange.wait_complete()
        assert exchange.messages() == []


async def test_json_response_mode_and_time_limits_still_answer_json(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    # json_response=True never streams; a call the time limit cancels gets
    # -32800 in its JSON body (an HTTP response must carry something).
    async with serving(
        mcp_registry, json_response=True, limits=ConnectionLimits(max_request_time=2)
    ) as client:
        message = modern_call(1, "waits", {"seconds": 100})
        exchange = await client.post(headers_of(message), message)
        assert not exchange.is_sse
        assert exchange.json()["error"]["code"] == -32800
    # With SSE allowed, the same time limit ends the committed stream with -32800.
    async with serving(mcp_registry, limits=ConnectionLimits(max_request_time=2)) as client:
        message = modern_call(2, "waits", {"seconds": 100})
        exchange = await client.post(headers_of(message), message)
        assert exchange.is_sse
        assert exchange.messages()[-1]["error"]["code"] == -32800
