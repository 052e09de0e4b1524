"""Messages refused before any handler ran get a span too; what a peer sends stays bounded.

A malformed message, an unknown method or tool, a bad modern envelope: each
is answered with a JSON-RPC error by the dispatcher (or the transport)
without running anything, and each gets a ``SERVER`` span whose
``error.type`` is that code, as the conventions ask.  An unknown method is
named ``_OTHER`` (span name, ``mcp.method.name``, metric), so a client cannot
mint span names or metric series.  Huge or malformed trace contexts, resource
URIs, request ids and reasons never make an attribute longer than
:data:`~trio_mcp_cancel._telemetry.names.MAX_ATTRIBUTE_LENGTH`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from trio_mcp_cancel import Registry
from trio_mcp_cancel._telemetry.names import MAX_ATTRIBUTE_LENGTH
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import McpError, open_test_client

from _support.asgi import (
    initialize,
    legacy_headers,
    modern_headers,
    modern_request,
    request,
    served,
)
from _support.cancellation_tools import probe_server
from _support.otel import Otel, attrs_of
from _support.stdio import ENVELOPE, encode


async def over_stdio(server: McpServer, registry: Registry, *chunks: bytes) -> list[Any]:
    """Send *chunks* to *server* over stdio (an in-memory pipe); return the replies."""
    import json

    client_stream, server_stream = trio.testing.memory_stream_pair()
    replies = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_mcp_stdio, server, registry, stdin=server_stream, stdout=server_stream)
        )
        for chunk in chunks:
            await client_stream.send_all(chunk)
        await trio.sleep(1)
        await registry.wait_idle()
        await client_stream.send_eof()
        with trio.move_on_after(1):
            while data := await client_stream.receive_some():
                replies += data
        nursery.cancel_scope.cancel()
    return [json.loads(line) for line in replies.splitlines() if line]


def assert_refused(span: ReadableSpan, code: int) -> dict[str, Any]:
    assert span.kind is SpanKind.SERVER
    assert span.status.status_code is StatusCode.ERROR
    attributes = attrs_of(span)
    assert attributes["error.type"] == str(code)
    assert attributes["rpc.response.status_code"] == str(code)
    return attributes


def assert_bounded(otel: Otel) -> None:
    """No string attribute of any span (or span event) is over the bound."""
    for span in otel.spans():
        assert len(span.name) <= MAX_ATTRIBUTE_LENGTH
        values = list(attrs_of(span).values())
        values += [v for event in span.events for v in (event.attributes or {}).values()]
        for value in values:
            if isinstance(value, str):
                assert len(value) <= MAX_ATTRIBUTE_LENGTH


async def test_stdio_refusals_get_spans_with_the_json_rpc_code_as_error_type(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    replies = await over_stdio(
        server,
        mcp_registry,
        b"this is not json\n",
        encode(
            {"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {"_meta": ENVELOPE}},
            {"id": 3, "method": "tools/list"},  # no "jsonrpc": malformed
            request(4, "tools/call", {"name": "nope", "arguments": {}, "_meta": ENVELOPE}),
        ),
    )
    assert sorted(r["error"]["code"] for r in replies) == [-32700, -32602, -32601, -32600]
    parse, unknown = otel.spans("_OTHER")
    attributes = assert_refused(parse, -32700)
    assert attributes["mcp.method.name"] == "_OTHER"
    assert attributes["network.transport"] == "pipe"
    assert "jsonrpc.request.id" not in attributes
    attributes = assert_refused(unknown, -32601)
    assert attributes["jsonrpc.request.id"] == "2"
    assert attributes["mcp.method.name"] == "_OTHER"
    malformed = assert_refused(otel.span("tools/list"), -32600)
    assert malformed["jsonrpc.request.id"] == "3"
    tool = assert_refused(otel.span("tools/call"), -32602)  # the unknown tool is not named
    assert "gen_ai.tool.name" not in tool
    errors = sorted(
        (a["mcp.method.name"], a["error.type"])
        for a, _ in otel.points("mcp.server.operation.duration")
    )
    assert errors == [
        ("_OTHER", "-32601"),
        ("_OTHER", "-32700"),
        ("tools/call", "-32602"),
        ("tools/list", "-32600"),
    ]


async def test_http_refusals_in_both_eras_get_spans_and_a_legacy_one_names_its_session(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with served(McpHttpApp(server, mcp_registry)) as client:
        session = await initialize(client)
        legacy = await client.post(legacy_headers(session), request(2, "no/such/method"))
        assert legacy.answer()["error"]["code"] == -32601
        message = modern_request(3, "no/such/method")
        modern = await client.post(modern_headers("no/such/method"), message)
        assert modern.answer()["error"]["code"] == -32601
        # A modern envelope the transport refuses (its header disagrees with the body).
        mismatch = modern_request(4, "tools/list")
        refused = await client.post(modern_headers("prompts/list"), mismatch)
        code = refused.answer()["error"]["code"]
        await client.request("DELETE", legacy_headers(session))
    first, second = otel.spans("_OTHER")
    in_session = assert_refused(first, -32601)
    assert in_session["mcp.session.id"]
    assert in_session["mcp.protocol.version"] == "2025-11-25"
    assert (in_session["network.transport"], in_session["network.protocol.name"]) == (
        "tcp",
        "http",
    )
    stateless = assert_refused(second, -32601)
    assert "mcp.session.id" not in stateless
    assert stateless["jsonrpc.request.id"] == "3"
    assert_refused(otel.span("tools/list"), code)


async def test_hostile_uris_ids_reasons_and_method_names_stay_bounded(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    huge = "x" * 1_000_000
    await over_stdio(
        server,
        mcp_registry,
        encode(
            request(1, "resources/read", {"uri": "test://" + huge, "_meta": ENVELOPE}),
            {"jsonrpc": "2.0", "id": 2, "method": huge, "params": {"_meta": ENVELOPE}},
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "r" * 100_000, "reason": "why" * 100_000},
            },
        ),
    )
    read = attrs_of(otel.span("resources/read"))
    assert read["mcp.resource.uri"] == ("test://" + huge)[:MAX_ATTRIBUTE_LENGTH]
    assert read["error.type"]  # not found: answered with an error, and still bounded
    assert otel.span("_OTHER")  # the huge method is not a span name
    note = attrs_of(otel.span("notifications/cancelled"))
    assert len(note["mcp.cancelled.reason"]) == MAX_ATTRIBUTE_LENGTH
    assert len(note["mcp.cancelled.request_id"]) == MAX_ATTRIBUTE_LENGTH
    assert_bounded(otel)


async def test_a_huge_or_malformed_traceparent_is_ignored_and_the_call_still_answers(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    hostile = [
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01" + "0" * 5000,  # over the carrier's bound
        "00-zzzz-not-a-traceparent",
        "ff-" + "0" * 32 + "-" + "0" * 16 + "-01",  # an invalid version and all-zero ids
        "\x00" * 300,
    ]
    async with open_test_client(server) as client:
        for traceparent in hostile:
            meta = {"traceparent": traceparent, "tracestate": "k=" + "v" * 100_000}
            result = await client.request(
                "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta}
            )
            assert result["content"][0]["text"] == "hi"
    spans = otel.spans("tools/call echo")
    assert len(spans) == len(hostile)
    assert all(span.parent is None for span in spans)  # no parent made up from garbage
    assert_bounded(otel)


async def test_a_client_span_of_a_huge_tool_name_is_bounded(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    name = "t" * 50_000
    async with open_test_client(server, telemetry=otel.telemetry) as client:
        try:
            await client.call_tool(name)
        except McpError as exc:
            assert exc.code == -32602
    (span,) = [s for s in otel.spans() if s.kind is SpanKind.CLIENT]
    assert span.name == "tools/call " + "t" * 100
    assert attrs_of(span)["gen_ai.tool.name"] == "t" * 100
    assert attrs_of(span)["error.type"] == "-32602"
    assert_bounded(otel)
