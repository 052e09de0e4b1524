"""The ``--workers`` benchmark's target: ``trio-mcp-cancel run benchmarks._workers_app:server``.

A no-op cancellable tool, with the per-server and per-tenant call caps off
(every wrk connection comes from 127.0.0.1, one tenant), as in
:func:`benchmarks._servers._ours_app`.
"""

from __future__ import annotations

from trio_mcp_cancel.server import Context, McpServer, ServerLimits

server = McpServer("bench-workers", limits=ServerLimits(max_calls=None, max_calls_per_tenant=None))


@server.tool()
async def noop(ctx: Context) -> str:
    return "ok"
