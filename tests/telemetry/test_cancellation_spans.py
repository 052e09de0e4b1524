"""Every cancellation path gives a SERVER span per the MCP conventions, with how it went.

Each test cancels a call one way (the client's notification, in either era
and over stdio; a closed modern HTTP stream; the hard cancel after the
grace period; the server's time limit) under a client span of the test's
own, and checks the server's span: its name and standard attributes, its
parent (the client's ``traceparent``, from ``_meta`` or the HTTP header),
the ``mcp_cancel.*`` attributes and events, and the metric points.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from trio_websocket import open_websocket_url

from trio_mcp_cancel import Registry, RegistryConfig
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import ConnectionLimits
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import McpError, open_test_client
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.asgi import (
    cancelled,
    headers_of,
    initialize,
    legacy_call,
    legacy_headers,
    modern_call,
    served,
)
from _support.cancellation_tools import probe_server
from _support.otel import Otel, attrs_of, event_names
from _support.stdio import call as stdio_call
from _support.stdio import cancel_note, encode

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def assert_child_of(span: ReadableSpan, trace_id: int, span_id: int) -> None:
    assert span.parent is not None
    assert (span.parent.trace_id, span.parent.span_id) == (trace_id, span_id)
    assert span.context.trace_id == trace_id


def assert_remote_parent(span: ReadableSpan) -> None:
    assert_child_of(span, int(TRACE_ID, 16), int(PARENT_ID, 16))
    assert span.parent is not None and span.parent.is_remote


def assert_cancelled_span(span: ReadableSpan, kind: str, cause: str, phase: str) -> dict[str, Any]:
    """The conventions' attributes, and ours; returns the attributes for more checks."""
    assert span.kind is SpanKind.SERVER
    attributes = attrs_of(span)
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == span.name.split(" ", 1)[1]
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["error.type"] == "-32800"
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["mcp_cancel.cancel.kind"] == kind
    assert attributes["mcp_cancel.cancel.cause"] == cause
    assert attributes["mcp_cancel.cancel.phase"] == phase
    assert attributes["mcp_cancel.cancel.hard"] is (phase != "flag")
    expected = ["mcp_cancel.flag", "mcp_cancel.stop"]
    if phase != "flag":
        expected.insert(1, "mcp_cancel.hard_cancel")
    assert event_names(span) == expected
    # The flag's event comes before the stop's, and says who cancelled.
    flag, *_, stop = span.events
    assert flag.timestamp <= stop.timestamp
    assert dict(flag.attributes or {})["mcp_cancel.cancel.kind"] == kind
    assert dict(stop.attributes or {})["mcp_cancel.cancel.phase"] == phase
    return attributes


def assert_cancel_metrics(otel: Otel, kind: str, cause: str, phase: str, tool: str) -> None:
    labels = {
        "mcp_cancel__cancel__kind": kind,
        "mcp_cancel__cancel__cause": cause,
        "mcp_cancel__cancel__phase": phase,
    }
    assert otel.value("mcp_cancel.cancellations", **labels) == 1
    assert otel.value("mcp_cancel.cancel.flag_to_stop", **labels) == 1
    assert otel.value("mcp.server.operation.duration", gen_ai__tool__name=tool) == 1
    (duration,) = [
        a for a, _ in otel.points("mcp.server.operation.duration") if "gen_ai.tool.name" in a
    ]
    assert duration["error.type"] == "-32800"
    assert otel.value("mcp_cancel.requests.in_flight", mcp__method__name="tools/call") == 0
    for attributes, _ in otel.points("mcp_cancel.cancellations"):
        assert set(attributes) == {
            "mcp_cancel.cancel.kind",
            "mcp_cancel.cancel.cause",
            "mcp_cancel.cancel.phase",
        }


async def test_a_legacy_notification_cancel_is_a_child_span_of_the_callers_with_the_flag_and_stop(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server, era="legacy") as client:
        with otel.tracer.start_as_current_span("agent") as agent:
            call = client.start_call("count", {"n": 100})
        await client.wait_in_flight(call)
        await trio.sleep(2.5)
        await call.cancel("user pressed stop")
        await client.assert_no_answer(call)
    span = otel.span("tools/call count")
    assert_child_of(span, agent.get_span_context().trace_id, agent.get_span_context().span_id)
    attributes = assert_cancelled_span(span, "client", "client", "flag")
    assert attributes["mcp_cancel.cancel.reason"] == "user pressed stop"
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["jsonrpc.request.id"] == str(call.id)
    assert attributes["mcp_cancel.cancel.flag_to_stop"] < 1.0
    assert_cancel_metrics(otel, "client", "client", "flag", "count")
    (note,) = otel.spans("notifications/cancelled")
    assert attrs_of(note)["mcp_cancel.outcome"] == "cancelled"


async def test_a_hard_cancel_after_the_grace_period_shows_its_event_and_the_time_it_took(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    config = RegistryConfig(grace_period=5)
    async with open_test_client(server, registry_config=config) as client:
        with otel.tracer.start_as_current_span("agent") as agent:
            call = client.start_call("stubborn")
        await client.wait_in_flight(call)
        await call.cancel()
        await client.registry.wait_idle()
        await client.assert_no_answer(call)
    span = otel.span("tools/call stubborn")
    assert_child_of(span, agent.get_span_context().trace_id, agent.get_span_context().span_id)
    attributes = assert_cancelled_span(span, "client", "client", "hard_cancel")
    assert attributes["mcp_cancel.cancel.flag_to_stop"] == pytest.approx(5.0)
    assert attributes["mcp.protocol.version"] == "2026-07-28"
    hard = span.events[1]
    assert dict(hard.attributes or {})["mcp_cancel.cancel.grace_period"] == pytest.approx(5.0)
    assert_cancel_metrics(otel, "client", "client", "hard_cancel", "stubborn")


async def test_the_servers_time_limit_is_a_server_cancel_with_its_cause(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    limits = ConnectionLimits(max_request_time=3)
    config = RegistryConfig(grace_period=1)
    async with open_test_client(server, limits=limits, registry_config=config) as client:
        with otel.tracer.start_as_current_span("agent"):
            call = client.start_call("stubborn")
        with pytest.raises(McpError) as caught:
            await call.result()
        assert caught.value.code == -32800
    attributes = assert_cancelled_span(
        otel.span("tools/call stubborn"), "server", "time_limit", "hard_cancel"
    )
    assert attributes["mcp_cancel.cancel.reason"] == "request time limit reached"
    assert_cancel_metrics(otel, "server", "time_limit", "hard_cancel", "stubborn")


@pytest.mark.mcp_registry(grace_period=2)
async def test_a_stdio_notification_cancel_is_parented_on_the_meta_traceparent(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def serve() -> None:
            try:
                await serve_mcp_stdio(
                    server, mcp_registry, stdin=server_stream, stdout=server_stream
                )
            finally:
                done.set()

        nursery.start_soon(serve)
        await client_stream.send_all(
            encode(stdio_call(7, "count", {"n": 100}, traceparent=TRACEPARENT))
        )
        await trio.sleep(1.5)
        await client_stream.send_all(encode(cancel_note(7, "enough")))
        await mcp_registry.wait_idle()
        await client_stream.send_eof()
        await done.wait()
        nursery.cancel_scope.cancel()
    span = otel.span("tools/call count")
    assert_remote_parent(span)
    assert_cancelled_span(span, "client", "client", "flag")
    assert_cancel_metrics(otel, "client", "client", "flag", "count")


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_closed_modern_http_stream_is_a_disconnect_parented_on_the_traceparent_header(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    app = McpHttpApp(server, mcp_registry, limits=ConnectionLimits(disconnect_grace_period=2.0))
    async with served(app) as client:
        message = modern_call(5, "stubborn", progress_token="p")
        headers = {**headers_of(message), "traceparent": TRACEPARENT}
        exchange = client.start("POST", headers, message)
        await trio.sleep(1)
        exchange.disconnect()
        await client.wait_all_done()
        await mcp_registry.wait_idle()
    span = otel.span("tools/call stubborn")
    assert_remote_parent(span)
    attributes = assert_cancelled_span(span, "disconnect", "disconnect", "hard_cancel")
    assert attributes["mcp_cancel.cancel.flag_to_stop"] == pytest.approx(2.0)
    assert_cancel_metrics(otel, "disconnect", "disconnect", "hard_cancel", "stubborn")


async def test_a_meta_traceparent_wins_over_the_http_header_which_becomes_a_link(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    header_parent = f"00-{'1' * 32}-{'2' * 16}-01"
    async with served(McpHttpApp(server, mcp_registry)) as client:
        message = modern_call(1, "echo", {"text": "hi"}, traceparent=TRACEPARENT)
        headers = {**headers_of(message), "traceparent": header_parent}
        exchange = await client.post(headers, message)
        assert exchange.answer()["result"]["content"][0]["text"] == "hi"
    span = otel.span("tools/call echo")
    assert_remote_parent(span)
    assert [link.context.trace_id for link in span.links] == [int("1" * 32, 16)]
    assert "error.type" not in attrs_of(span)
    assert not event_names(span)


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_legacy_http_notification_cancel_is_parented_on_meta_and_names_the_session(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with served(McpHttpApp(server, mcp_registry)) as client:
        session = await initialize(client)
        message = legacy_call(3, "count", {"n": 100})
        message["params"]["_meta"] = {"traceparent": TRACEPARENT}
        client.start("POST", legacy_headers(session), message)
        await trio.sleep(1.5)
        note = await client.post(legacy_headers(session), cancelled(3, "enough"))
        assert note.status == 202
        await mcp_registry.wait_idle()
        await client.request("DELETE", legacy_headers(session))
        await client.wait_all_done()
    span = otel.span("tools/call count")
    assert_remote_parent(span)
    attributes = assert_cancelled_span(span, "client", "client", "flag")
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["mcp.session.id"]  # a name for the session that is safe to show
    assert attributes["mcp.session.id"] != session  # never the Mcp-Session-Id secret itself
    assert_cancel_metrics(otel, "client", "client", "flag", "count")


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_session_ending_is_a_server_cancel_with_cause_session_end(
    otel: Otel, autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with served(McpHttpApp(server, mcp_registry)) as client:
        session = await initialize(client)
        client.start("POST", legacy_headers(session), legacy_call(4, "stubborn"))
        await trio.sleep(1)
        ended = await client.request("DELETE", legacy_headers(session))
        assert ended.status in (200, 204)
        await mcp_registry.wait_idle()
        await client.wait_all_done()
    attributes = assert_cancelled_span(
        otel.span("tools/call stubborn"), "server", "session_end", "hard_cancel"
    )
    assert attributes["mcp_cancel.cancel.reason"] == "session terminated"
    assert_cancel_metrics(otel, "server", "session_end", "hard_cancel", "stubborn")


@pytest.mark.mcp_registry(grace_period=5)
async def test_a_websocket_notification_cancel_is_parented_on_the_meta_traceparent(
    otel: Otel,
    mcp_registry: Registry,
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listener = await nursery.start(
                partial(serve_mcp_websocket, server, mcp_registry, "127.0.0.1", 0)
            )
            url = f"ws://127.0.0.1:{listener.port}/mcp"
            async with open_websocket_url(url) as ws:
                arguments = {"n": 1000, "delay": 0.05}
                message = stdio_call(9, "count", arguments, traceparent=TRACEPARENT)
                await ws.send_message(json.dumps(message))
                while not mcp_registry.in_flight_count:
                    await trio.sleep(0.01)
                await ws.send_message(json.dumps(cancel_note(9, "closing the tab")))
                await mcp_registry.wait_idle()
            nursery.cancel_scope.cancel()
    span = otel.span("tools/call count")
    assert_remote_parent(span)
    attributes = assert_cancelled_span(span, "client", "client", "flag")
    assert attributes["mcp_cancel.cancel.reason"] == "closing the tab"
    assert_cancel_metrics(otel, "client", "client", "flag", "count")
