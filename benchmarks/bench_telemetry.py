"""Benchmark 8: what OpenTelemetry costs per call.

A no-op cancellable tool, called in process through the dispatcher (the
JSON-RPC path every transport shares, with ``tracked()``), on three
servers: ``telemetry=False`` (the path a server without
``opentelemetry-api`` takes: one ``None`` check), telemetry on with the
API's no-op providers (what a library user gets until the application
installs an SDK), and telemetry on with the SDK recording every span into
its in-memory exporter and every metric into an in-memory reader.  The two
"on" variants are reported as ratios to "off".  Without
``opentelemetry-api`` / ``-sdk`` installed the rows say so.
"""

from __future__ import annotations

import importlib.util
import time
from statistics import median
from typing import Any

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.lowlevel import Caller
from trio_mcp_cancel.server import McpServer, Telemetry

from ._common import Row, Timer, fmt_ratio, fmt_time, interleave, paired_ratio

NAME = "telemetry"
SCOPE = "session:0123456789abcdef"
BENCH = "8 telemetry"


def _server(telemetry: bool | Telemetry) -> McpServer:
    server = McpServer("bench-telemetry", telemetry=telemetry)

    @server.tool()
    async def noop() -> str:
        return "ok"

    return server


def _settings() -> tuple[dict[str, bool | Telemetry], Any]:
    """The variants available here, and the SDK exporter to empty between batches."""
    variants: dict[str, bool | Telemetry] = {"off": False}
    if importlib.util.find_spec("opentelemetry") is None:
        return variants, None
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    variants["no-op provider"] = Telemetry(
        tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    )
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return variants, None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    variants["SDK, in-memory exporter"] = Telemetry(
        tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    return variants, exporter


async def run(quick: bool) -> list[Row]:
    n, repeats = (1_000, 3) if quick else (10_000, 9)
    settings, exporter = _settings()
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "noop", "arguments": {}},
    }
    async with open_registry() as registry:
        caller = Caller(SCOPE, registry)

        def through(telemetry: bool | Telemetry) -> Timer:
            dispatcher = _server(telemetry).dispatcher

            async def timer(count: int) -> float:
                if exporter is not None:
                    exporter.clear()  # keep the heap (and the GC) out of it
                start = time.perf_counter()
                for _ in range(count):
                    reply = await dispatcher.handle(message, caller)
                assert reply is not None and "result" in reply, reply
                return time.perf_counter() - start

            return timer

        variants = {name: through(telemetry) for name, telemetry in settings.items()}
        samples = await interleave(variants, n, repeats)
    label = "no-op cancellable `tools/call`, in process"
    rows = [Row(BENCH, f"{label}: telemetry off", fmt_time(median(samples["off"])))]
    for name in ("no-op provider", "SDK, in-memory exporter"):
        if name not in samples:
            rows.append(Row(BENCH, f"{label}: telemetry on, {name}", "not available"))
            continue
        rows += [
            Row(BENCH, f"{label}: telemetry on, {name}", fmt_time(median(samples[name]))),
            Row(
                BENCH,
                f"ratio telemetry on ({name}) / off",
                fmt_ratio(paired_ratio(samples[name], samples["off"])),
                "info",
            ),
        ]
    return rows
