"""The tools that cancellation tests run, shared by the server, test-client and stdio tests.

``count`` polls the flag (stops by itself), ``stubborn`` ignores it (only
the hard cancel stops it), ``helpers`` polls it in a helper task (the
cancellation comes back out of an exception group), ``whoami`` reports
the caller's namespace and era.  :func:`probe_server` is the one server
factory most tests start from: ``echo`` plus these, on a server named as the
test likes (the ``mcp_server`` fixture of ``tests/conftest.py`` is one).
"""

from __future__ import annotations

from typing import Any

import trio

from trio_mcp_cancel import checkpoint_cancelled
from trio_mcp_cancel.server import Context, McpServer


def probe_server(name: str = "probe", version: str = "1.0", **options: Any) -> McpServer:
    """A fresh :class:`McpServer` (*options* as its constructor takes them) with ``echo``
    and the cancellation tools; a test adds the tools only it needs."""
    server = McpServer(name, version, **options)

    @server.tool()
    async def echo(ctx: Context, text: str, times: int = 1) -> str:
        """Repeat text."""
        return text * times

    return add_cancellation_tools(server)


def add_cancellation_tools(server: McpServer) -> McpServer:
    """Register ``count``, ``stubborn``, ``helpers`` and ``whoami`` on *server*."""

    @server.tool()
    async def count(ctx: Context, n: int = 1000, delay: float = 1.0) -> str:
        """Poll the flag between steps: stops cooperatively."""
        for i in range(1, n + 1):
            await checkpoint_cancelled()
            await trio.sleep(delay)
            await ctx.report_progress(i, total=n, message=f"step {i}")
        return f"counted {n}"

    @server.tool()
    async def stubborn(ctx: Context) -> str:
        """Ignore the flag: only the hard cancel stops it."""
        await trio.sleep(1000)
        return "finished anyway"

    @server.tool()
    async def helpers(ctx: Context) -> str:
        """Poll the flag in a helper task, not in the tool's own task."""

        async def helper() -> None:
            while True:
                await checkpoint_cancelled()
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(helper)
            await trio.sleep_forever()
        return "unreachable"

    @server.tool()
    async def whoami(ctx: Context) -> dict[str, Any]:
        return {"namespace": ctx.namespace, "era": ctx.era}

    return server
