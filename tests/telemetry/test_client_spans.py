"""The client's own ``CLIENT`` spans: one per request, the server's span its child.

The library's client (and the test client, when asked) opens a span named
``{mcp.method.name} {target}`` around each request, as a child of the
caller's span, and passes *its* context in the request's ``_meta``, so the
server's span hangs under it: a gateway chain reads agent, client, server,
client, server in one trace.  It records ``mcp.client.operation.duration``
with the outcome (``error.type``: the JSON-RPC code, ``tool_error``, or
``-32800`` for a call the client cancelled).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from trio_mcp_cancel._telemetry.client import for_client
from trio_mcp_cancel.client import open_http_client
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import McpError, McpTestClient, open_test_client

from _support.cancellation_tools import probe_server
from _support.client import http_server
from _support.otel import Otel, attrs_of


def client_span(otel: Otel, name: str) -> ReadableSpan:
    (span,) = [s for s in otel.spans(name) if s.kind is SpanKind.CLIENT]
    return span


def server_span(otel: Otel, name: str) -> ReadableSpan:
    (span,) = [s for s in otel.spans(name) if s.kind is SpanKind.SERVER]
    return span


def assert_parent(child: ReadableSpan, parent: Any) -> None:
    context = parent.get_span_context() if hasattr(parent, "get_span_context") else parent.context
    assert child.parent is not None
    assert (child.parent.trace_id, child.parent.span_id) == (context.trace_id, context.span_id)


async def test_a_call_is_a_client_span_under_the_callers_and_the_servers_span_is_its_child(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server, telemetry=otel.telemetry) as client:
        with otel.tracer.start_as_current_span("agent") as agent:
            result = await client.call_tool("echo", {"text": "hi"})
        assert result["content"][0]["text"] == "hi"
    sent, served_span = client_span(otel, "tools/call echo"), server_span(otel, "tools/call echo")
    assert_parent(sent, agent)
    assert_parent(served_span, sent)
    assert served_span.parent is not None and served_span.parent.is_remote
    attributes = attrs_of(sent)
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "echo"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["jsonrpc.request.id"] == attrs_of(served_span)["jsonrpc.request.id"]
    assert attributes["mcp.protocol.version"] == "2026-07-28"
    assert "error.type" not in attributes
    assert sent.status.status_code is StatusCode.UNSET
    assert otel.value("mcp.client.operation.duration", gen_ai__tool__name="echo") == 1


async def test_a_gateway_chain_reads_agent_client_server_client_server_in_one_trace(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    b = probe_server("B", telemetry=otel.telemetry)
    a = McpServer("A", telemetry=otel.telemetry)
    upstream: list[McpTestClient] = []

    @a.tool()
    async def relay(ctx: Context, text: str) -> Any:
        result = await upstream[0].call_tool("echo", {"text": text})
        return result["content"][0]["text"]

    async with (
        open_test_client(b, telemetry=otel.telemetry) as to_b,
        open_test_client(a, era="legacy", telemetry=otel.telemetry) as to_a,
    ):
        upstream.append(to_b)
        with otel.tracer.start_as_current_span("agent") as agent:
            await to_a.call_tool("relay", {"text": "hop"})
    to_a_span, at_a = client_span(otel, "tools/call relay"), server_span(otel, "tools/call relay")
    to_b_span, at_b = client_span(otel, "tools/call echo"), server_span(otel, "tools/call echo")
    assert_parent(to_a_span, agent)
    assert_parent(at_a, to_a_span)
    assert_parent(to_b_span, at_a)
    assert_parent(at_b, to_b_span)
    trace_ids = {s.context.trace_id for s in (to_a_span, at_a, to_b_span, at_b)}
    assert trace_ids == {agent.get_span_context().trace_id}
    assert attrs_of(to_a_span)["mcp.protocol.version"] == "2025-11-25"


async def test_client_spans_record_errors_tool_errors_and_the_clients_own_cancel(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)

    @server.tool()
    async def fails(ctx: Context) -> str:
        raise ValueError("broken")

    async with open_test_client(server, telemetry=otel.telemetry) as client:
        with pytest.raises(McpError):
            await client.request("no/such/method")
        result = await client.call_tool("fails")
        assert result["isError"] is True
        call = client.start_call("count", {"n": 100})
        await client.wait_in_flight(call)
        await call.cancel("enough")
        await client.assert_no_answer(call)
    unknown = attrs_of(client_span(otel, "no/such/method"))
    assert (unknown["error.type"], unknown["rpc.response.status_code"]) == ("-32601", "-32601")
    failed = client_span(otel, "tools/call fails")
    assert attrs_of(failed)["error.type"] == "tool_error"
    assert failed.status.status_code is StatusCode.ERROR
    cancelled = client_span(otel, "tools/call count")
    assert attrs_of(cancelled)["error.type"] == "-32800"
    assert cancelled.end_time is not None
    points = {
        (a["mcp.method.name"], a.get("error.type"))
        for a, _ in otel.points("mcp.client.operation.duration")
    }
    assert {
        ("no/such/method", "-32601"),
        ("tools/call", "tool_error"),
        ("tools/call", "-32800"),
    } <= points


async def test_the_client_names_the_resource_uri_on_its_span_but_not_on_its_metric(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)

    @server.resource("test://a", name="a")
    async def a_resource(ctx: Context) -> str:
        return "a"

    async with open_test_client(server, telemetry=otel.telemetry) as client:
        await client.request("resources/read", {"uri": "test://a"})
    assert attrs_of(client_span(otel, "resources/read"))["mcp.resource.uri"] == "test://a"
    ((point, _),) = otel.points("mcp.client.operation.duration")
    assert "mcp.resource.uri" not in point


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_http_client_span_is_the_parent_of_the_http_servers_span_in_both_eras(
    otel: Otel, era: Any
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    with trio.fail_after(20):
        async with (
            http_server(server) as (url, _),
            open_http_client(url, era=era, telemetry=otel.telemetry) as client,
        ):
            with otel.tracer.start_as_current_span("agent") as agent:
                result = await client.call_tool("echo", {"text": "over http"})
            assert result["content"][0]["text"] == "over http"
    sent, served_span = client_span(otel, "tools/call echo"), server_span(otel, "tools/call echo")
    assert_parent(sent, agent)
    assert_parent(served_span, sent)
    attributes = attrs_of(sent)
    assert (attributes["network.transport"], attributes["network.protocol.name"]) == (
        "tcp",
        "http",
    )
    version = {"modern": "2026-07-28", "legacy": "2025-11-25"}[era]
    assert attributes["mcp.protocol.version"] == version
    point = otel.value(
        "mcp.client.operation.duration", mcp__method__name="tools/call", network__transport="tcp"
    )
    assert point == 1
    if era == "legacy":
        assert_parent(server_span(otel, "initialize"), client_span(otel, "initialize"))


async def test_a_quiet_client_makes_no_span_and_still_passes_the_callers_context_on(
    otel: Otel,
) -> None:
    telemetry = for_client(True)  # the global providers: none installed in this process
    assert telemetry is not None
    meta: dict[str, Any] = {}
    with otel.tracer.start_as_current_span("agent") as agent:
        assert telemetry.start("tools/call", {"name": "x"}, meta, 1, "2026-07-28") is None
    trace_id = f"{agent.get_span_context().trace_id:032x}"
    assert meta["traceparent"].split("-")[1] == trace_id
    assert for_client(False) is None


async def test_a_request_a_closed_client_cannot_send_ends_its_span_as_failed(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server, telemetry=otel.telemetry) as client:
        pass
    client.transport = None  # closed
    with pytest.raises(trio.ClosedResourceError):
        client.start_call("echo", {"text": "late"})
    span = client_span(otel, "tools/call echo")
    assert attrs_of(span)["error.type"] == "ClosedResourceError"
