"""The MCP conventions' attributes on server spans and metrics, over every transport.

``mcp.resource.uri`` on the resource methods, ``network.transport`` (``pipe``
over stdio, ``tcp`` over HTTP and WebSocket; nothing in memory, which has no
network) with ``network.protocol.name``, ``mcp.session.id`` on a legacy HTTP
session's spans, ``mcp.server.session.duration`` when a connection or a legacy
session ends, and Sentry's ``mcp.cancelled.*`` keys beside the project's own
on a cancelled request and on the ``notifications/cancelled`` span.
"""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.trace import SpanKind
from trio_websocket import open_websocket_url

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import HttpLimits, McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits, Context, McpServer
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.transports._connection import MessageConnection, connection_caller
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.asgi import (
    cancelled,
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

URI = "test://notes/today"
LEGACY = "2025-11-25"


def resource_server(otel: Otel) -> McpServer:
    server = probe_server(telemetry=otel.telemetry)

    @server.resource(URI, name="today", mime_type="text/plain")
    async def today(ctx: Context) -> str:
        return "notes"

    return server


def legacy_initialize(request_id: int = 1) -> dict[str, Any]:
    params = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    return request(request_id, "initialize", params)


async def stdio_session(server: McpServer, registry: Registry, *lines: dict[str, Any]) -> None:
    """Serve *server* over stdio on an in-memory pipe, send *lines*, then end of file."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_mcp_stdio, server, registry, stdin=server_stream, stdout=server_stream)
        )
        await client_stream.send_all(encode(*lines))
        await trio.sleep(1)
        await registry.wait_idle()
        await client_stream.send_eof()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()


def session_points(otel: Otel) -> list[dict[str, Any]]:
    return [attributes for attributes, _ in otel.points("mcp.server.session.duration")]


async def test_stdio_resource_spans_carry_the_uri_and_pipe_and_the_session_records_its_duration(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    await stdio_session(
        server,
        mcp_registry,
        legacy_initialize(),
        request(2, "resources/read", {"uri": URI}),
        request(3, "resources/subscribe", {"uri": URI}),
        request(4, "resources/unsubscribe", {"uri": URI}),
        request(5, "tools/call", {"name": "echo", "arguments": {"text": "x"}}),
    )
    for method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        attributes = attrs_of(otel.span(method))
        assert attributes["mcp.resource.uri"] == URI
        assert attributes["network.transport"] == "pipe"
        assert "network.protocol.name" not in attributes  # stdio has none (conventions)
        assert attributes["mcp.protocol.version"] == LEGACY
    call = attrs_of(otel.span("tools/call echo"))
    assert "mcp.resource.uri" not in call
    assert call["network.transport"] == "pipe"
    # The metric gets the transport, never the URI (opt-in there: cardinality).
    (read_point,) = [
        a
        for a, _ in otel.points("mcp.server.operation.duration")
        if a["mcp.method.name"] == "resources/read"
    ]
    assert read_point["network.transport"] == "pipe" and "mcp.resource.uri" not in read_point
    assert session_points(otel) == [{"mcp.protocol.version": LEGACY, "network.transport": "pipe"}]
    assert otel.value("mcp.server.session.duration") == 1


async def test_a_modern_stdio_session_has_its_duration_without_a_protocol_version(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    read = request(1, "resources/read", {"uri": URI, "_meta": ENVELOPE})
    await stdio_session(server, mcp_registry, read)
    attributes = attrs_of(otel.span("resources/read"))
    assert attributes["mcp.resource.uri"] == URI
    assert attributes["mcp.protocol.version"] == "2026-07-28"
    assert session_points(otel) == [{"network.transport": "pipe"}]
    ((_, point),) = otel.points("mcp.server.session.duration")
    assert point.sum == pytest.approx(1.0)  # from the pipe's opening to its end of file


async def test_modern_http_spans_carry_tcp_http_and_the_uri_and_no_session(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    async with served(McpHttpApp(server, mcp_registry)) as client:
        message = modern_request(1, "resources/read", {"uri": URI})
        exchange = await client.post(modern_headers("resources/read", URI), message)
        assert exchange.answer()["result"]["contents"][0]["text"] == "notes"
    attributes = attrs_of(otel.span("resources/read"))
    assert attributes["mcp.resource.uri"] == URI
    assert attributes["network.transport"] == "tcp"
    assert attributes["network.protocol.name"] == "http"
    assert "mcp.session.id" not in attributes  # the modern era has no session
    assert session_points(otel) == []


async def test_legacy_http_spans_name_the_session_and_its_end_records_the_session_duration(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    async with served(McpHttpApp(server, mcp_registry)) as client:
        session = await initialize(client)
        await trio.sleep(5)
        read = await client.post(
            legacy_headers(session), request(2, "resources/read", {"uri": URI})
        )
        assert read.status == 200
        await client.request("DELETE", legacy_headers(session))
    attributes = attrs_of(otel.span("resources/read"))
    assert attributes["mcp.resource.uri"] == URI
    assert attributes["mcp.session.id"] and attributes["mcp.session.id"] != session
    assert (attributes["network.transport"], attributes["network.protocol.name"]) == ("tcp", "http")
    assert attrs_of(otel.span("initialize"))["mcp.session.id"] == attributes["mcp.session.id"]
    assert session_points(otel) == [
        {
            "mcp.protocol.version": LEGACY,
            "network.transport": "tcp",
            "network.protocol.name": "http",
        }
    ]
    ((_, point),) = otel.points("mcp.server.session.duration")
    assert point.sum == pytest.approx(5.0)


async def test_an_idle_legacy_session_that_expires_records_its_duration_once(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    app = McpHttpApp(server, mcp_registry, http_limits=HttpLimits(session_idle_timeout=10))
    async with served(app) as client:
        session = await initialize(client)
        await trio.sleep(11)
        gone = await client.post(legacy_headers(session), request(2, "ping"))
        assert gone.status == 404
    assert otel.value("mcp.server.session.duration") == 1


async def test_in_memory_spans_name_no_network(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = resource_server(otel)
    async with open_test_client(server) as client:
        await client.request("resources/read", {"uri": URI})
    attributes = attrs_of(otel.span("resources/read"))
    assert attributes["mcp.resource.uri"] == URI
    assert "network.transport" not in attributes
    assert session_points(otel) == [{}]  # the connection is a session all the same


async def test_websocket_spans_carry_tcp_websocket_and_the_connection_its_session_duration(
    otel: Otel, mcp_registry: Registry
) -> None:
    server = resource_server(otel)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(
                partial(serve_mcp_websocket, server, mcp_registry, "127.0.0.1", 0)
            )
            url = f"ws://127.0.0.1:{ws_server.port}/mcp"
            async with open_websocket_url(url, subprotocols=["mcp"]) as ws:
                await ws.send_message(json.dumps(legacy_initialize()))
                await ws.get_message()
                await ws.send_message(json.dumps(request(2, "resources/read", {"uri": URI})))
                await ws.get_message()
            while not session_points(otel):
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    attributes = attrs_of(otel.span("resources/read"))
    assert attributes["mcp.resource.uri"] == URI
    assert (attributes["network.transport"], attributes["network.protocol.name"]) == (
        "tcp",
        "websocket",
    )
    assert session_points(otel) == [
        {
            "mcp.protocol.version": LEGACY,
            "network.transport": "tcp",
            "network.protocol.name": "websocket",
        }
    ]


async def test_a_cancelled_request_and_its_notification_carry_sentrys_cancelled_keys_beside_ours(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server, era="legacy") as client:
        call = client.start_call("count", {"n": 100})
        await client.wait_in_flight(call)
        await call.cancel("user pressed stop")
        await client.assert_no_answer(call)
    span = otel.span("tools/call count")
    assert span.kind is SpanKind.SERVER
    attributes = attrs_of(span)
    assert attributes["mcp.cancelled.reason"] == "user pressed stop"
    assert attributes["mcp.cancelled.request_id"] == str(call.id)
    assert attributes["mcp_cancel.cancel.reason"] == "user pressed stop"  # ours stay
    assert attributes["mcp_cancel.cancel.phase"] == "flag"
    note = attrs_of(otel.span("notifications/cancelled"))
    assert note["mcp.cancelled.request_id"] == str(call.id)
    assert note["mcp.cancelled.reason"] == "user pressed stop"
    assert note["mcp_cancel.outcome"] == "cancelled"


async def test_a_server_cancel_carries_sentrys_keys_with_the_servers_reason(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server, limits=ConnectionLimits(max_request_time=3)) as client:
        call = client.start_call("count", {"n": 100})
        await client.wait_in_flight(call)
        with pytest.raises(Exception, match="cancelled"):
            await call.result()
    attributes = attrs_of(otel.span("tools/call count"))
    assert attributes["mcp.cancelled.reason"] == "request time limit reached"
    assert attributes["mcp.cancelled.request_id"] == str(call.id)


async def test_a_legacy_http_cancel_notification_names_the_session_and_the_cancelled_id(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    # The cancel names a request that never ran: its early-cancel row is kept on purpose.
    async with served(McpHttpApp(server, mcp_registry), no_leaks=False) as client:
        session = await initialize(client)
        note = await client.post(legacy_headers(session), cancelled(42, "nothing runs"))
        assert note.status == 202
        await client.request("DELETE", legacy_headers(session))
    attributes = attrs_of(otel.span("notifications/cancelled"))
    assert attributes["mcp.cancelled.request_id"] == "42"
    assert attributes["mcp.cancelled.reason"] == "nothing runs"
    assert attributes["mcp.session.id"]
    assert attributes["network.transport"] == "tcp"
    assert attributes["mcp.protocol.version"] == LEGACY


async def test_a_connection_whose_peer_stopped_reading_ends_its_session_with_peer_stalled(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)

    async def never_drains(text: str) -> None:
        await trio.sleep_forever()

    connection = MessageConnection(
        server,
        connection_caller("stdio", mcp_registry),
        never_drains,
        limits=ConnectionLimits(write_timeout=10.0),
    )
    to_server, incoming = trio.open_memory_channel[str](math.inf)
    to_server.send_nowait(
        json.dumps(
            request(
                1, "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": ENVELOPE}
            )
        )
    )
    with trio.fail_after(100):
        await connection.serve(incoming)  # returns by itself: the stall ends it
    assert connection.stalled
    assert session_points(otel) == [{"network.transport": "pipe", "error.type": "peer_stalled"}]
