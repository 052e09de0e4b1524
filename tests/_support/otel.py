"""The OpenTelemetry SDK of one telemetry test: in-memory span exporter and metric reader.

The providers are handed to the server (``McpServer(telemetry=Telemetry(...))``),
never installed globally, so nothing leaks from one test to the next.
"""

from __future__ import annotations

import textwrap
from typing import Any

import attrs
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from trio_mcp_cancel.server import Telemetry


@attrs.define(eq=False)
class Otel:
    """The SDK of one test, and what it recorded."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    @property
    def telemetry(self) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    @property
    def tracer(self) -> Tracer:
        """A tracer for the test's own spans (the client side of a trace)."""
        return self.tracer_provider.get_tracer("tests")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        finished = list(self.exporter.get_finished_spans())
        return [s for s in finished if name is None or s.name == name]

    def span(self, name: str) -> ReadableSpan:
        (found,) = self.spans(name)
        return found

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` of every point of *metric*."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += [(dict(p.attributes or {}), p) for p in m.data.data_points]
        return found

    def value(self, metric: str, **attributes: Any) -> Any:
        """The one point of *metric* whose attributes include *attributes*: its value or count."""
        matching = [
            p
            for a, p in self.points(metric)
            if all(a.get(k.replace("__", ".")) == v for k, v in attributes.items())
        ]
        assert len(matching) == 1, (metric, attributes, self.points(metric))
        point = matching[0]
        return getattr(point, "value", None) if hasattr(point, "value") else point.count


def make_otel() -> Otel:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    return Otel(exporter, reader, tracer_provider, meter_provider)


def event_names(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


#: A script (``python -c``, after ``.format(module="trace" | "metrics")``) whose server
#: uses the global providers: it calls ``echo``, installs an SDK provider globally,
#: calls again, and prints what the SDK recorded.  A global provider can be installed
#: once per process only, hence a process of its own.
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
    from trio_mcp_cancel.server import McpServer, Context
    from trio_mcp_cancel.testing import open_test_client

    server = McpServer("late")  # telemetry=True: the global providers

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
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
