"""The server of the real-socket HTTP tests (``test_http.py``, ``test_http2.py``).

One module-level :data:`server` with ``count`` (polls the flag, reports
progress), ``stubborn`` (ignores the flag; its hard cancel is written to
:data:`tool_log`) and ``echo``; ``test_http`` adds the tools only it needs.
:func:`call` is the ``tools/call`` message, with a progress token if asked.
"""

from __future__ import annotations

from typing import Any

import trio

from trio_mcp_cancel import checkpoint_cancelled
from trio_mcp_cancel.server import Context, McpServer

__all__ = ["call", "server", "tool_log"]

server = McpServer("test-server")
tool_log: list[str] = []


@server.tool()
async def count(ctx: Context, n: int = 100, delay: float = 0.02) -> str:
    """Counts politely: polls the flag every step."""
    for i in range(1, n + 1):
        await checkpoint_cancelled()
        await trio.sleep(delay)
        await ctx.report_progress(i, total=n)
    return f"counted to {n}"


@server.tool()
async def stubborn(ctx: Context, seconds: float = 30.0) -> str:
    """Ignores the flag; only a hard cancel stops it."""
    try:
        await trio.sleep(seconds)
    except trio.Cancelled:
        tool_log.append(f"stubborn {ctx.request_id} hard-cancelled")
        raise
    return "done"


@server.tool()
async def echo(ctx: Context, text: str) -> str:
    return text


def call(
    request_id: object, name: str, arguments: dict[str, Any], token: object = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
