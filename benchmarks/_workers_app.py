"""The ``--workers`` benchmark's target: ``trio-mcp-cancel run benchmarks._workers_app:server``.

A no-op cancellable tool, with the per-server and per-tenant call caps off
(every wrk connection comes from 127.0.0.1, one tenant), as in
:func:`benchmarks._servers._ours_app`; and ``instant``, the same no-op
callable as a task (the Redis backend's cost per task-augmented call), with
the per-tenant task caps raised so wrk's calls are never refused (the
benchmark checks every response).
"""

from __future__ import annotations

from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, ServerLimits, Tasks

tasks = TaskManager(max_tasks_per_owner=None, max_running=1024, max_running_per_owner=1024)
server = McpServer(
    "bench-workers",
    limits=ServerLimits(max_calls=None, max_calls_per_tenant=None),
    extensions=[Tasks(tasks)],
)


@server.tool()
async def noop(ctx: Context) -> str:
    return "ok"


@server.tool(task="optional")
async def instant(ctx: Context) -> str:
    return "ok"
