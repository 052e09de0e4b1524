"""What a new user reads when a request is refused before it runs.

Each refusal says what to change: a header that was never sent is
"missing" (not "does not match"), a path that is not the MCP endpoint names
the endpoint, a body over the limit names the limit and its setting, and an
unknown tool is named.  Both eras where the refusal exists in both.
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
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer, Tasks

from _support.asgi import (
    AsgiClient,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_headers,
    served,
)

REGION_SCHEMA = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"],
}

#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


def build() -> McpServer:
    server = McpServer("messages", "1.0", extensions=[Tasks()])

    @server.tool()
    async def echo(ctx: Context, text: str = "hi") -> str:
        return text

    @server.tool(input_schema=REGION_SCHEMA)
    async def where(ctx: Context, region: str) -> str:
        return region

    return server


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[AsgiClient]:
    async with served(McpHttpApp(build(), registry, **options)) as client:
        yield client


def error_of(exchange: Any) -> dict[str, Any]:
    error: dict[str, Any] = exchange.json()["error"]
    return error


@pytest.mark.parametrize(
    ("drop", "says"),
    [
        ("mcp-protocol-version", "MCP-Protocol-Version header is missing"),
        ("mcp-method", "Mcp-Method header is missing"),
        ("mcp-name", "Mcp-Name header is missing"),
    ],
)
async def test_a_modern_routing_header_never_sent_is_reported_missing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, drop: str, says: str
) -> None:
    async with serving(mcp_registry) as client:
        headers = modern_headers("tools/call", "echo")
        del headers[drop]
        refused = await client.post(headers, modern_call(1, "echo"))
        assert refused.status == 400
        assert error_of(refused)["code"] == -32020
        assert says in error_of(refused)["message"]
        assert "does not match" not in error_of(refused)["message"]


async def test_a_modern_routing_header_that_disagrees_is_reported_as_a_mismatch(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as client:
        refused = await client.post(modern_headers("tools/call", "other"), modern_call(1, "echo"))
        assert refused.status == 400
        assert error_of(refused)["message"] == "Mcp-Name header does not match 'name'"


async def test_a_parameter_header_never_sent_is_reported_missing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as client:
        message = modern_call(1, "where", {"region": "eu"})
        refused = await client.post(modern_headers("tools/call", "where"), message)
        assert refused.status == 400
        assert error_of(refused)["message"] == (
            "Mcp-Param-Region header is missing (it must match argument 'region')"
        )
        wrong = await client.post(
            modern_headers("tools/call", "where", mcp_param_region="us"), message
        )
        assert error_of(wrong)["message"] == (
            "Mcp-Param-Region header does not match argument 'region'"
        )
        right = await client.post(
            modern_headers("tools/call", "where", mcp_param_region="eu"), message
        )
        assert right.answer()["result"]["content"][0]["text"] == "eu"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_missing_accept_and_content_type_are_reported_missing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, era: str
) -> None:
    async with serving(mcp_registry) as client:
        base = modern_headers("tools/call", "echo") if era == "modern" else legacy_headers()
        no_accept = {k: v for k, v in base.items() if k != "accept"}
        refused = await client.post(no_accept, modern_call(1, "echo"))
        assert refused.status == 406
        assert "Accept header is missing" in error_of(refused)["message"]
        no_type = {k: v for k, v in base.items() if k != "content-type"}
        refused = await client.post(no_type, modern_call(1, "echo"))
        assert refused.status == 415
        assert "Content-Type header is missing" in error_of(refused)["message"]
        wrong = await client.post({**base, "accept": "text/html"}, modern_call(1, "echo"))
        assert "must list application/json and text/event-stream" in error_of(wrong)["message"]


async def test_a_legacy_request_without_its_session_header_is_told_it_is_missing(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with serving(mcp_registry) as client:
        await initialize(client)
        refused = await client.post(legacy_headers(), legacy_call(1, "echo"))
        assert refused.status == 400
        assert error_of(refused)["message"] == (
            "Bad Request: the Mcp-Session-Id header is missing (initialize returns one)"
        )


@pytest.mark.parametrize(("method", "path"), [("GET", "/"), ("POST", "/"), ("GET", "/sse")])
async def test_a_request_off_the_endpoint_is_told_where_the_endpoint_is(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, method: str, path: str
) -> None:
    async with serving(mcp_registry) as client:
        missed = await client.request(method, {"accept": "*/*"}, path=path)
        assert missed.status == 404
        assert error_of(missed)["message"] == "Not Found: the MCP endpoint is /mcp"


@pytest.mark.parametrize("declared", [True, False])
async def test_a_body_over_the_limit_is_told_the_limit_and_its_setting(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, declared: bool
) -> None:
    """Declared (``Content-Length``) or found while reading: the same words."""
    limits = ConnectionLimits(max_message_size=200)
    async with serving(mcp_registry, limits=limits) as client:
        body = modern_call(1, "echo", {"text": "x" * 500})
        headers = modern_headers("tools/call", "echo")
        if declared:
            headers["content-length"] = "600"
        exchange = client.start("POST", headers, body, chunk_size=None if declared else 64)
        await exchange.done.wait()
        assert exchange.status == 413
        assert error_of(exchange)["message"] == (
            "Payload Too Large: the body is over 200 bytes (ConnectionLimits.max_message_size)"
        )


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_an_unknown_tool_is_named_in_the_message(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, era: str
) -> None:
    async with serving(mcp_registry) as client:
        if era == "modern":
            refused = await client.post(
                modern_headers("tools/call", "nope"), modern_call(1, "nope")
            )
            error = error_of(refused)
        else:
            session = await initialize(client)
            refused = await client.post(legacy_headers(session), legacy_call(2, "nope"))
            error = refused.answer()["error"]
        assert error["message"] == "Unknown tool: nope"
        assert error["data"] == {"name": "nope"}


async def test_a_modern_task_over_its_quota_is_http_429_with_retry_after(
    mcp_registry: Registry,
) -> None:
    """A task refused by its quota is an admission refusal like any other: on the modern
    era HTTP 429 with ``Retry-After``, so an HTTP client backs off instead of reading a
    200 as an answer."""
    from trio_mcp_cancel.lowlevel import TaskManager
    from trio_mcp_cancel.lowlevel.wire import TOO_MANY_REQUESTS

    server = McpServer("tasks", "1.0", extensions=[Tasks(TaskManager(max_running_per_owner=1))])
    release = trio.Event()

    @server.tool(task="optional")
    async def hold(ctx: Context) -> str:
        await release.wait()
        return "held"

    with_tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with served(McpHttpApp(server, mcp_registry)) as client:
        first = modern_call(1, "hold", capabilities=with_tasks)
        created = await client.post(modern_headers("tools/call", "hold"), first)
        await created.done.wait()
        assert created.status == 200 and created.json()["result"]["resultType"] == "task"
        over = await client.post(
            modern_headers("tools/call", "hold"), modern_call(2, "hold", capabilities=with_tasks)
        )
        await over.done.wait()
        assert over.status == 429
        assert over.headers.get("retry-after") == "1"
        error = over.json()["error"]
        assert error["code"] == TOO_MANY_REQUESTS and error["data"]["limit"] == "tenant"
        release.set()
