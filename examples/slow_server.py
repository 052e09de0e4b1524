"""An MCP server with a slow tool, cancellable by notification and by disconnect.

Run it on its own::

    python examples/slow_server.py --port 8000 --ws-port 8001

then POST JSON-RPC to http://127.0.0.1:8000/mcp (Streamable HTTP) or connect
to ws://127.0.0.1:8001/mcp.  ``examples/client_demo.py`` starts it in-process
and drives it.  Ctrl-C or SIGTERM stops it gracefully, within hypercorn's
``graceful_timeout`` (5 s): calls in flight are cancelled (kind ``server``)
and answered ``-32800`` "server shutting down"; a second Ctrl-C stops at
once.  With ``--stdio`` it is a stdio server instead, for a host
that launches it as a subprocess: JSON-RPC lines on stdin/stdout, events on
stderr.

Or deploy it like any ASGI app, with as many worker processes as you like::

    hypercorn --worker-class trio --workers 2 examples.slow_server:app

``app`` is configured from ``MCP_*`` environment variables (see
:func:`trio_mcp_cancel.http.app_from_env`; ``MCP_REDIS_URL=redis://host:port/0``
shares tasks and cancellations between workers and nodes).  ``count`` runs
as a task (Tasks extension) when the client declares the extension.

``--trace`` (or ``SLOW_SERVER_TRACE=1``) prints every request's span, and
the metrics every 10 s, to stderr with the OpenTelemetry SDK's console
exporters (``pip install opentelemetry-sdk``); with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set and ``opentelemetry-exporter-otlp``
installed it sends them there instead (the standard ``OTEL_*`` variables
apply).  Cancel a ``count`` and its span shows who cancelled, when the flag
was set and when the tool stopped.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from functools import partial

import attrs
import trio
from hypercorn.config import Config

from trio_mcp_cancel import Event, Registry, checkpoint_cancelled, open_registry, run_process
from trio_mcp_cancel.http import McpHttpApp, app_from_env, serve, server_config
from trio_mcp_cancel.server import Context, McpServer, Tasks
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.websocket import serve_mcp_websocket

server = McpServer(
    "slow-demo", instructions="Call 'count' and cancel it whenever you like.", extensions=[Tasks()]
)


@server.tool(task="optional")
async def count(ctx: Context, n: int = 10, delay: float = 0.5) -> str:
    """Count to n, one step every `delay` seconds, reporting progress."""
    for i in range(1, n + 1):
        await checkpoint_cancelled()  # stops here, cooperatively, once cancelled
        await trio.sleep(delay)
        await ctx.report_progress(i, total=n, message=f"counted {i}")
    return f"counted to {n}"


@server.tool()
async def stubborn(ctx: Context, seconds: float = 60.0) -> str:
    """Ignore the cancellation flag; only the grace period's hard cancel stops it."""
    await trio.sleep(seconds)
    return "finished anyway"


#: In every child's command line, so ``pgrep -f mcp-demo-child`` finds them.
CHILD_MARK = "mcp-demo-child"


@server.tool()
async def child(ctx: Context, seconds: float = 30.0) -> str:
    """Run a child process (a Python one-liner that sleeps); a cancel stops it.

    The flag sends it SIGTERM; had it ignored that, the hard cancel would
    SIGKILL its whole process group.  Its output lines come back as progress.
    """
    code = "import sys, time; print('child started', flush=True); time.sleep(float(sys.argv[1]))"
    result = await run_process([sys.executable, "-c", code, str(seconds), CHILD_MARK], progress=ctx)
    return f"the child exited with status {result.returncode}"


#: For ``hypercorn examples.slow_server:app``: the lifespan opens the registry
#: (and the Redis backend, with ``MCP_REDIS_URL``) in each worker.
app = app_from_env(server)


def setup_telemetry() -> None:
    """Install the OpenTelemetry SDK globally: console exporters, or OTLP when configured.

    The library only uses the OpenTelemetry API; which SDK and exporter run
    is the application's choice, made here.  stdout stays the protocol's
    (``--stdio``): the console exporters write to stderr.
    """
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )

    span_exporter: SpanExporter = ConsoleSpanExporter(out=sys.stderr)
    metric_exporter: MetricExporter = ConsoleMetricExporter(out=sys.stderr)
    otlp = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if otlp:
        # Optional, never a dependency: used when the application installed it.
        try:
            traces = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.http.trace_exporter"
            )
            meters = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.http.metric_exporter"
            )
        except ImportError:
            missing = "OTLP needs opentelemetry-exporter-otlp; printing to the console instead"
            print(missing, file=sys.stderr)
            otlp = False
        else:
            span_exporter = traces.OTLPSpanExporter()
            metric_exporter = meters.OTLPMetricExporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "slow-demo")})
    tracer_provider = TracerProvider(resource=resource)
    processor = BatchSpanProcessor if otlp else SimpleSpanProcessor
    tracer_provider.add_span_processor(processor(span_exporter))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=10_000)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))


def describe(event: Event) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in attrs.asdict(event).items())
    return f"[server] {event.name}: {fields}"


def demo_config(host: str = "127.0.0.1", port: int = 0) -> Config:
    """The example's hypercorn settings: the library's safe defaults.

    hypercorn's error log goes through :mod:`logging` (the root handler that
    ``main()`` sets up writes to stderr), so server errors are never hidden.
    """
    return server_config(host=host, port=port, errorlog=logging.getLogger("hypercorn.error"))


async def run_demo_server(
    registry: Registry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ws_port: int = 0,
    handle_signals: bool = False,
    task_status: trio.TaskStatus[tuple[str, str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP and WebSocket; report ``(http_url, ws_url)``.

    Serves until cancelled.  With *handle_signals*, the first SIGINT or
    SIGTERM also ends it: HTTP shuts down gracefully (calls in flight are
    answered ``-32800``, within ``graceful_timeout`` seconds), then the WebSocket server, which has
    no graceful shutdown of its own, is cancelled (its calls are cancelled as
    on a disconnect) and this returns.  A second signal stops at once.
    """
    config = demo_config(host, port)
    app = McpHttpApp(server, registry)
    async with trio.open_nursery() as nursery:
        ws = await nursery.start(partial(serve_mcp_websocket, server, registry, host, ws_port))

        async def serve_http(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, config, handle_signals=handle_signals, task_status=task_status)
            nursery.cancel_scope.cancel()  # HTTP is done: stop the WebSocket server too

        binds = await nursery.start(serve_http)
        task_status.started((f"{binds[0]}/mcp", f"ws://{host}:{ws.port}/mcp"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ws-port", type=int, default=8001)
    parser.add_argument("--grace-period", type=float, default=2.0, help="grace period in seconds")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead")
    parser.add_argument(
        "--trace",
        action="store_true",
        default=os.environ.get("SLOW_SERVER_TRACE", "") not in ("", "0"),
        help="print spans and metrics to stderr (OTLP with OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # stderr
    if args.trace:
        setup_telemetry()
    if args.stdio:
        # stdout carries only protocol messages; registry events are logged to stderr.
        async with open_registry(grace_period=args.grace_period) as registry:
            await serve_mcp_stdio(server, registry, handle_signals=True)
        return
    async with (
        open_registry(grace_period=args.grace_period) as registry,
        trio.open_nursery() as nursery,
    ):
        # Ctrl-C / SIGTERM: graceful HTTP shutdown, then the WebSocket server
        # stops and run_demo_server returns, so main() just finishes (status 0).
        http_url, ws_url = await nursery.start(
            partial(
                run_demo_server,
                registry,
                host=args.host,
                port=args.port,
                ws_port=args.ws_port,
                handle_signals=True,
            )
        )
        print(
            f"MCP over Streamable HTTP: {http_url}\nMCP over WebSocket:       {ws_url}", flush=True
        )


if __name__ == "__main__":
    try:
        trio.run(main)
    except* KeyboardInterrupt:
        # Only a Ctrl-C outside serving (while starting up or after the graceful
        # shutdown) gets here; during serving it is a graceful shutdown instead.
        pass
