"""The server that ``bench_cross_process`` runs under the hypercorn CLI (two processes).

``spin`` runs as a task until cancelled, and prints the wall-clock moment
its request's polled flag is set (the registry's ``request.cancelled``
event, delivered synchronously as the flag is set) on stdout, where the
benchmark reads it.
"""

from __future__ import annotations

import time

import trio

from trio_mcp_cancel import Event, RequestCancelledEvent, checkpoint_cancelled
from trio_mcp_cancel.http import app_from_env
from trio_mcp_cancel.server import Context, McpServer, Tasks

server = McpServer("cross-process-bench", extensions=[Tasks()])


@server.tool(task="optional")
async def spin(ctx: Context) -> str:
    """Run until cancelled; report when the flag was set."""
    task_id = ctx.request.request_id

    def seen(event: Event) -> None:
        if isinstance(event, RequestCancelledEvent) and event.request_id == task_id:
            print(f"FLAG {task_id} {time.time():.6f}", flush=True)

    unsubscribe = ctx.registry.events.subscribe(seen)
    try:
        while True:
            await checkpoint_cancelled()
            await trio.sleep(0.05)
    finally:
        unsubscribe()


app = app_from_env(server)
