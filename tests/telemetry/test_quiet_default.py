"""Telemetry that nothing would record costs (almost) nothing, and wakes up with a provider.

``opentelemetry-api`` is often installed because something pulled it in,
with no SDK configured: the global providers are the API's proxies with
nothing behind them.  A request then skips the span work (``quiet``); the
first request after the application installs a provider records again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider
from otel_harness import Otel

from trio_mcp_cancel.server import McpServer, Telemetry

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_server_on_no_op_providers_is_quiet_unless_the_request_carries_a_trace() -> None:
    noop = Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    telemetry = McpServer("quiet", telemetry=noop).registration.telemetry
    assert telemetry is not None
    assert telemetry.quiet({"name": "x"})
    # A no-op span still carries the caller's trace on to what the tool calls.
    assert not telemetry.quiet({"name": "x", "_meta": {"traceparent": TRACEPARENT}})


def test_a_server_with_an_sdk_provider_is_never_quiet(otel: Otel) -> None:
    telemetry = McpServer("recording", telemetry=otel.telemetry).registration.telemetry
    assert telemetry is not None
    assert not telemetry.quiet({"name": "x"})
    half = Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=otel.meter_provider)
    metrics_only = McpServer("metrics", telemetry=half).registration.telemetry
    assert metrics_only is not None and not metrics_only.quiet({})


LATE_PROVIDER = textwrap.dedent(
    """
    import sys
    import trio
    from opentelemetry import {module}
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from trio_mcp_cancel.server import McpServer, ToolContext
    from trio_mcp_cancel.testing import open_test_client

    server = McpServer("late")  # telemetry=True: the global providers

    @server.tool()
    async def echo(ctx: ToolContext, text: str) -> str:
        return text

    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()

    async def main():
        async with open_test_client(server) as client:
            await client.call_tool("echo", {{"text": "before"}})
            assert server.registration.telemetry.quiet({{}})
            if "{module}" == "trace":
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(exporter))
                trace.set_tracer_provider(provider)
            else:
                metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            await client.call_tool("echo", {{"text": "after"}})
            assert not server.registration.telemetry.quiet({{}})

    trio.run(main)
    if "{module}" == "trace":
        print(",".join(span.name for span in exporter.get_finished_spans()))
    else:
        data = reader.get_metrics_data()
        scopes = [s for r in data.resource_metrics for s in r.scope_metrics]
        names = {{m.name for s in scopes for m in s.metrics}}
        print(",".join(sorted(n for n in names if n.startswith("mcp.server.operation"))))
    """
)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("module", "recorded"),
    [("trace", "tools/call echo"), ("metrics", "mcp.server.operation.duration")],
)
def test_a_provider_installed_globally_later_is_used_from_the_next_request(
    module: str, recorded: str
) -> None:
    # In a process of its own: a global provider can be installed once only.
    script = LATE_PROVIDER.format(module=module)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == recorded  # the call after, not the one before
