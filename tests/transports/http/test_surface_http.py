"""Resources, prompts, ``subscriptions/listen`` and MRTR over Streamable HTTP, in memory.

The listen stream is a cancellation path: closing it (the modern client's way
to stop listening) cancels the request, and nothing more is written to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, RequestCancelledEvent, checkpoint_cancelled
from trio_mcp_cancel._wire.jsonrpc import JsonRpcError
from trio_mcp_cancel.http import McpHttpApp, bearer_auth
from trio_mcp_cancel.server import Context, InputRequired, McpServer
from trio_mcp_cancel.testing import EventRecorder
from trio_mcp_cancel.transports.http.rules import check_param_headers

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    b64_header,
    modern_headers,
    modern_request,
    served,
)

SUB_ID = "io.modelcontextprotocol/subscriptionId"


def build() -> McpServer:
    server = McpServer("surface-http", "1.0")

    @server.resource("test://doc", name="doc", mime_type="text/plain")
    async def doc(ctx: Context) -> str:
        return "the doc"

    @server.prompt()
    async def ask(ctx: Context) -> str | InputRequired:
        """Asks for a topic first."""
        answer = (ctx.input_responses or {}).get("topic")
        if answer is None:
            schema = {"type": "object", "properties": {"topic": {"type": "string"}}}
            return InputRequired(
                {"topic": InputRequired.elicit("Which topic?", schema)}, state="asked"
            )
        return f"Talk about {answer['content']['topic']} ({ctx.request_state})"

    @server.resource("test://slow", name="slow")
    async def slow(ctx: Context) -> str:
        while True:
            await checkpoint_cancelled()
            await ctx.report_progress(trio.current_time())
            await trio.sleep(1)

    return server


#: The registry of every test here (the ``mcp_registry`` fixture).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@asynccontextmanager
async def serving(
    registry: Registry, server: McpServer, **options: Any
) -> AsyncIterator[tuple[AsgiClient, EventRecorder]]:
    events = EventRecorder.attach(registry)
    async with served(McpHttpApp(server, registry, **options)) as client:
        yield client, events


def reply_of(exchange: HttpExchange) -> dict[str, Any]:
    """The JSON-RPC response of a finished exchange, SSE or JSON."""
    if exchange.is_sse:
        return next(m for m in exchange.messages() if "id" in m)
    body: dict[str, Any] = exchange.json()
    return body


def post(client: AsgiClient, message: dict[str, Any], name: str | None = None) -> HttpExchange:
    return client.start("POST", modern_headers(message["method"], name), message)


async def test_listen_over_http_ends_when_the_client_closes_it(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    async with serving(mcp_registry, server) as (client, events):
        listen = post(
            client,
            modern_request(
                7, "subscriptions/listen", {"notifications": {"promptsListChanged": True}}
            ),
        )
        ack = await listen.next_message()
        assert listen.is_sse
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"promptsListChanged": True}

        @server.prompt()
        async def later(ctx: Context) -> str:
            return "x"

        changed = await listen.next_message()
        assert changed == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
            "params": {"_meta": {SUB_ID: 7}},
        }
        listen.disconnect()
        await listen.done.wait()
        (event,) = events.of_type(RequestCancelledEvent)
        assert (event.request_id, event.kind) == (7, "disconnect")
        server.prompts_changed()
        await trio.sleep(1)
        assert listen.after_disconnect == []
        assert server.dispatcher.runtime.subscriptions.listeners == set()


async def test_modern_resource_read_and_prompt_mrtr_over_http(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    async with serving(mcp_registry, server) as (client, _):
        read = post(
            client, modern_request(1, "resources/read", {"uri": "test://doc"}), "test://doc"
        )
        await read.done.wait()
        reply = reply_of(read)
        result = reply["result"]
        assert result["contents"] == [
            {"uri": "test://doc", "mimeType": "text/plain", "text": "the doc"}
        ]
        assert result["resultType"] == "complete"
        assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
        # A wrong Mcp-Name header is refused (the header mirrors the uri).
        wrong = post(client, modern_request(2, "resources/read", {"uri": "test://doc"}), "test://x")
        await wrong.done.wait()
        assert wrong.status == 400 and wrong.json()["error"]["code"] == -32020

        caps = {"elicitation": {}}
        first = post(
            client, modern_request(3, "prompts/get", {"name": "ask"}, capabilities=caps), "ask"
        )
        await first.done.wait()
        body = reply_of(first)
        asked = body["result"]
        assert asked["resultType"] == "input_required"
        params = {
            "name": "ask",
            "inputResponses": {"topic": {"action": "accept", "content": {"topic": "trio"}}},
            "requestState": asked["requestState"],
        }
        second = post(client, modern_request(4, "prompts/get", params, capabilities=caps), "ask")
        await second.done.wait()
        body = reply_of(second)
        (message,) = body["result"]["messages"]
        assert message["content"]["text"] == "Talk about trio (asked)"


async def test_listen_needs_a_streamed_response(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = build()
    async with serving(mcp_registry, server, json_response=True) as (client, _):
        message = modern_request(
            1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        listen = post(client, message)
        with trio.fail_after(10):
            await listen.done.wait()
    assert listen.json()["error"]["code"] == -32600
    assert server.dispatcher.runtime.subscriptions.listeners == set()


async def test_closing_a_resource_read_stream_cancels_the_read(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    async with serving(mcp_registry, server) as (client, events):
        message = modern_request(3, "resources/read", {"uri": "test://slow"}, progress_token="r")
        read = post(client, message, "test://slow")
        first = await read.next_message()
        assert first["method"] == "notifications/progress"
        await trio.sleep(2.5)
        read.disconnect()
        await read.done.wait()
        (event,) = events.of_type(RequestCancelledEvent)
        assert (event.request_id, event.kind) == (3, "disconnect")
        await trio.sleep(3)
        assert read.after_disconnect == []


REGION_SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
    },
    "required": ["region"],
}


@pytest.mark.parametrize(
    ("arguments", "sent", "ok"),
    [
        ({"region": "eu"}, {"mcp-param-region": "eu"}, True),
        ({"region": "eu"}, {"mcp-param-region": "  eu "}, True),
        ({"region": "Zürich"}, {"mcp-param-region": b64_header("Zürich")}, True),
        ({"region": "eu", "count": 3}, {"mcp-param-region": "eu", "mcp-param-count": "3"}, True),
        # A value without the complete =?base64?...?= wrapper is literal.
        ({"region": "=?base64?ZXU="}, {"mcp-param-region": "=?base64?ZXU="}, True),
        ({"region": "eu"}, {}, False),  # missing header
        ({"region": "eu"}, {"mcp-param-region": "us"}, False),  # mismatch
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8?="}, False),  # padding
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVs!!!bG8=?="}, False),
        ({"region": "eu"}, {"mcp-param-region": "eu", "mcp-param-count": "1"}, False),  # extra
    ],
)
def test_param_headers_must_mirror_the_body(
    arguments: dict[str, Any], sent: dict[str, str], ok: bool
) -> None:
    if ok:
        check_param_headers(sent, REGION_SCHEMA, arguments)
    else:
        with pytest.raises(JsonRpcError) as refused:
            check_param_headers(sent, REGION_SCHEMA, arguments)
        assert refused.value.code == -32020


async def test_param_header_mismatch_is_400_before_the_tool_runs(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    ran: list[str] = []

    @server.tool(input_schema=REGION_SCHEMA)
    async def routed(ctx: Context, region: str, count: int = 1) -> str:
        ran.append(region)
        return region

    async with serving(mcp_registry, server) as (client, _):
        message = modern_request(1, "tools/call", {"name": "routed", "arguments": {"region": "eu"}})
        headers = modern_headers("tools/call", "routed")
        bad = client.start("POST", {**headers, "mcp-param-region": "us"}, message)
        await bad.done.wait()
        assert bad.status == 400 and bad.json()["error"]["code"] == -32020
        good = client.start("POST", {**headers, "mcp-param-region": "eu"}, message)
        await good.done.wait()
        assert reply_of(good)["result"]["content"][0]["text"] == "eu"
    assert ran == ["eu"]


def test_x_mcp_header_must_be_a_header_name() -> None:
    server = McpServer()
    with pytest.raises(ValueError, match="x-mcp-header"):

        @server.tool(
            input_schema={"type": "object", "properties": {"a": {"x-mcp-header": "bad name"}}}
        )
        async def tool(ctx: Context, a: str) -> str:
            return a


CAPS = {"elicitation": {}}
ANSWER = {"topic": {"action": "accept", "content": {"topic": "trio"}}}


async def ask_then_retry(
    client: AsgiClient, first: dict[str, Any], second: dict[str, Any]
) -> dict[str, Any]:
    """``prompts/get ask`` as *first* (address, headers), its retry as *second*: the reply."""
    asked = client.start(
        "POST",
        {**modern_headers("prompts/get", "ask"), **first.get("headers", {})},
        modern_request(1, "prompts/get", {"name": "ask"}, capabilities=CAPS),
        client=first["address"],
    )
    await asked.done.wait()
    state = reply_of(asked)["result"]["requestState"]
    params = {"name": "ask", "inputResponses": ANSWER, "requestState": state}
    retry = client.start(
        "POST",
        {**modern_headers("prompts/get", "ask"), **second.get("headers", {})},
        modern_request(2, "prompts/get", params, capabilities=CAPS),
        client=second["address"],
    )
    await retry.done.wait()
    return reply_of(retry)


async def test_anonymous_state_is_bound_to_the_client_address_bucket(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    """Without a principal, a state sealed for one IP bucket is refused from another."""
    server = build()
    async with serving(mcp_registry, server) as (client, _):
        here = {"address": ("192.0.2.1", 1000)}
        same_bucket = {"address": ("192.0.2.1", 2000)}  # another port, the same client
        elsewhere = {"address": ("198.51.100.7", 1000)}
        ok = await ask_then_retry(client, here, same_bucket)
        assert ok["result"]["messages"][0]["content"]["text"] == "Talk about trio (asked)"
        replayed = await ask_then_retry(client, here, elsewhere)
        assert replayed["error"]["code"] == -32602
        # IPv6: the /64 is the bucket (a host holds the whole prefix).
        v6 = {"address": ("2001:db8:1:2::10", 1)}
        v6_same = {"address": ("2001:db8:1:2::99", 1)}
        v6_other = {"address": ("2001:db8:1:3::10", 1)}
        assert "result" in await ask_then_retry(client, v6, v6_same)
        assert (await ask_then_retry(client, v6, v6_other))["error"]["code"] == -32602


async def test_state_is_bound_to_the_principal_over_modern_http(
    autojump_clock: trio.testing.MockClock,
    mcp_registry: Registry,
) -> None:
    server = build()
    auth = bearer_auth({"token-a": "alice", "token-b": "bob"})
    async with serving(mcp_registry, server, auth=auth) as (client, _):
        alice = {"address": ("192.0.2.1", 1), "headers": {"authorization": "Bearer token-a"}}
        bob = {"address": ("192.0.2.1", 1), "headers": {"authorization": "Bearer token-b"}}
        assert "result" in await ask_then_retry(client, alice, alice)
        assert (await ask_then_retry(client, alice, bob))["error"]["code"] == -32602
