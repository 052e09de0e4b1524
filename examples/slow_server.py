"""An MCP server with a slow tool, cancellable by notification and by disconnect.

Run it on its own::

    python examples/slow_server.py --port 8000 --ws-port 8001

then POST JSON-RPC to http://127.0.0.1:8000/mcp (Streamable HTTP) or connect
to ws://127.0.0.1:8001/mcp.  ``examples/client_demo.py`` starts it in-process
and drives it.  With ``--stdio`` it is a stdio server instead, for a host
that launches it as a subprocess: JSON-RPC lines on stdin/stdout, events on
stderr.
"""

from __future__ import annotations

import argparse
import logging
from functools import partial

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trio_mcp_cancel import Event, Registry, checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.server import McpServer, ToolContext
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.websocket import serve_mcp_websocket

server = McpServer("slow-demo", instructions="Call 'count' and cancel it whenever you like.")


@server.tool()
async def count(ctx: ToolContext, n: int = 10, delay: float = 0.5) -> str:
    """Count to n, one step every `delay` seconds, reporting progress."""
    for i in range(1, n + 1):
        await checkpoint_cancelled()  # stops here, cooperatively, once cancelled
        await trio.sleep(delay)
        await ctx.report_progress(i, total=n, message=f"counted {i}")
    return f"counted to {n}"


@server.tool()
async def stubborn(ctx: ToolContext, seconds: float = 60.0) -> str:
    """Ignore the cancellation flag; only the grace period's hard cancel stops it."""
    await trio.sleep(seconds)
    return "finished anyway"


def describe(event: Event) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in attrs.asdict(event).items())
    return f"[server] {event.name}: {fields}"


async def run_demo_server(
    registry: Registry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ws_port: int = 0,
    task_status: trio.TaskStatus[tuple[str, str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP and WebSocket until cancelled; report ``(http_url, ws_url)``."""
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.errorlog = None
    config.graceful_timeout = 1.0
    app = McpHttpApp(server, registry)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        ws = await nursery.start(partial(serve_mcp_websocket, server, registry, host, ws_port))
        task_status.started((f"{binds[0]}/mcp", f"ws://{host}:{ws.port}/mcp"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ws-port", type=int, default=8001)
    parser.add_argument("--grace", type=float, default=2.0, help="grace period in seconds")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # stderr
    if args.stdio:
        # stdout carries only protocol messages; registry events are logged to stderr.
        async with open_registry(grace_period=args.grace) as registry:
            await serve_mcp_stdio(server, registry, handle_signals=True)
        return
    async with open_registry(grace_period=args.grace) as registry, trio.open_nursery() as nursery:
        http_url, ws_url = await nursery.start(
            partial(run_demo_server, registry, host=args.host, port=args.port, ws_port=args.ws_port)
        )
        print(
            f"MCP over Streamable HTTP: {http_url}\nMCP over WebSocket:       {ws_url}", flush=True
        )


if __name__ == "__main__":
    try:
        trio.run(main)
    except KeyboardInterrupt:
        pass
