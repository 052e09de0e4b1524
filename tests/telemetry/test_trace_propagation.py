"""One trace across servers, the switch that turns telemetry off, and life without the API.

A tool of server A that calls server B with this library's client passes
its span on in ``_meta``, so the agent's span, A's and B's are one trace.
``McpServer(telemetry=False)`` records nothing, a hostile ``_meta`` trace
context is ignored, and without ``opentelemetry-api`` the server and the
client run unchanged, importing nothing of it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import McpTestClient, open_test_client

from _support.cancellation_tools import probe_server
from _support.otel import Otel, attrs_of


async def test_a_gateway_chain_through_the_librarys_client_is_one_trace(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    b = probe_server("B", telemetry=otel.telemetry)
    a = McpServer("A", telemetry=otel.telemetry)
    upstream: list[McpTestClient] = []

    @a.tool()
    async def relay(ctx: Context, text: str) -> Any:
        result = await upstream[0].call_tool("echo", {"text": text})
        return result["content"][0]["text"]

    async with open_test_client(b) as to_b, open_test_client(a, era="legacy") as to_a:
        upstream.append(to_b)
        with otel.tracer.start_as_current_span("agent") as agent:
            result = await to_a.call_tool("relay", {"text": "hop"})
        assert result["content"][0]["text"] == "hop"
    at_a = otel.span("tools/call relay")
    at_b = otel.span("tools/call echo")
    trace_id = agent.get_span_context().trace_id
    assert {at_a.context.trace_id, at_b.context.trace_id} == {trace_id}
    assert at_a.parent is not None and at_a.parent.span_id == agent.get_span_context().span_id
    assert at_b.parent is not None and at_b.parent.span_id == at_a.context.span_id
    assert at_b.parent.is_remote  # it came over the wire, in _meta


async def test_a_cancelled_gateway_call_shows_both_hops_cancelled_in_one_trace(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    b = probe_server("B", telemetry=otel.telemetry)
    a = McpServer("A", telemetry=otel.telemetry)
    upstream: list[McpTestClient] = []

    @a.tool()
    async def relay(ctx: Context) -> Any:
        return await upstream[0].call_tool("count", {"n": 100})

    config = RegistryConfig(grace_period=10)
    async with (
        open_test_client(b) as to_b,
        open_test_client(a, registry_config=config) as to_a,
    ):
        upstream.append(to_b)
        with otel.tracer.start_as_current_span("agent"):
            call = to_a.start_call("relay")
        await to_a.wait_in_flight(call)
        await trio.sleep(2.5)
        await call.cancel("agent gave up")
        await to_a.registry.wait_idle()
        await to_b.registry.wait_idle()
        await to_a.assert_no_answer(call)
    at_a, at_b = otel.span("tools/call relay"), otel.span("tools/call count")
    assert at_a.context.trace_id == at_b.context.trace_id
    assert attrs_of(at_a)["mcp_cancel.cancel.kind"] == "client"
    # A's client forwarded the cancel to B, as a client cancel of B's call.
    assert attrs_of(at_b)["mcp_cancel.cancel.kind"] == "client"
    assert attrs_of(at_b)["mcp_cancel.cancel.phase"] == "flag"


async def test_telemetry_false_records_nothing(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=False)
    assert server.registration.telemetry is None
    async with open_test_client(server) as client:
        await client.call_tool("echo", {"text": "quiet"})
    assert otel.spans() == []


@pytest.mark.parametrize(
    "meta",
    [
        {"traceparent": 12},
        {"traceparent": "00-zz-yy-01"},
        {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},  # the invalid all-zero ids
        {"traceparent": "x" * 100_000, "tracestate": ["a"]},
        {"traceparent": None, "baggage": {"a": 1}},
    ],
)
async def test_a_malformed_meta_trace_context_is_ignored_and_the_span_is_a_root(
    otel: Otel, meta: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    server = probe_server(telemetry=otel.telemetry)
    async with open_test_client(server) as client:
        answered = await client.request(
            "tools/call", {"name": "echo", "arguments": {"text": "ok"}, "_meta": meta}
        )
        assert answered["content"][0]["text"] == "ok"
    (span,) = otel.spans("tools/call echo")
    assert span.parent is None


NO_OTEL = textwrap.dedent(
    """
    import sys
    sys.modules["opentelemetry"] = None  # an import blocker: "not installed"
    import trio
    from trio_mcp_cancel.server import McpServer, Context
    from trio_mcp_cancel.testing import open_test_client
    from trio_mcp_cancel._telemetry.propagation import inject_meta, trace_headers

    server = McpServer("plain")
    assert server.registration.telemetry is None

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    async def main():
        async with open_test_client(server) as client:
            result = await client.call_tool("echo", {"text": "fine"})
            assert result["content"][0]["text"] == "fine"
            call = client.start_call("echo", {"text": "again"})
            await call.result()
        meta = {}
        inject_meta(meta)
        assert meta == {} and trace_headers({"params": {"_meta": meta}}) == {}

    trio.run(main)
    assert sys.modules["opentelemetry"] is None
    assert not [m for m in sys.modules if m.startswith("opentelemetry.")]
    print("ok")
    """
)


@pytest.mark.subprocess
def test_without_opentelemetry_the_server_and_client_run_unchanged() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_http_client_sends_the_requests_meta_trace_context_as_headers_too() -> None:
    from trio_mcp_cancel._client.http import request_headers

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "x", "_meta": {"traceparent": parent, "tracestate": 7}},
    }
    for modern in (True, False):
        headers = request_headers(
            message, None, modern=modern, session_id=None, session_version=None
        )
        assert headers["traceparent"] == parent
        assert "tracestate" not in headers  # not a string: never copied
    del message["params"]["_meta"]
    assert "traceparent" not in request_headers(
        message, None, modern=True, session_id=None, session_version=None
    )
