"""The benchmark server's tools on the official MCP Python SDK (``mcp`` 2.x).

Imported only when ``mcp`` is installed; see :mod:`benchmarks._servers`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

from . import _servers
from ._servers import SEEN, _count, _stats


def app(*, json_response: bool = False, stateless: bool = False) -> Any:
    """The SDK's streamable HTTP app: SSE or JSON responses, with sessions or stateless."""
    mcp: Any = MCPServer("bench", log_level="WARNING")

    @mcp.tool()
    async def noop() -> str:
        _count("noop")
        return "ok"

    @mcp.tool()
    async def slow(key: str, ctx: Context) -> str:  # type: ignore[type-arg]
        _servers.IN_FLIGHT += 1
        try:
            await ctx.report_progress(1)
            try:
                await anyio.sleep(600)
            except anyio.get_cancelled_exc_class():
                SEEN[key] = time.perf_counter()
                raise
            return "not cancelled"
        finally:
            _servers.IN_FLIGHT -= 1

    @mcp.tool()
    async def stats(action: str = "", path: str = "") -> str:
        return json.dumps(_stats(action, path))

    return mcp.streamable_http_app(
        json_response=json_response,
        stateless_http=stateless,
        max_sessions=None,
        session_idle_timeout=None,
    )
