"""The server the command-line tests list, call, install and serve (copied into a temp project).

``wait_for_cancel`` reports progress, then polls its flag; when cancelled it
writes how (kind and reason) to the file ``CLI_MARKER`` names, so a test
sees the cancel arrive on the server, whatever the transport.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from trio_mcp_cancel import RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.lowlevel import JsonRpcError
from trio_mcp_cancel.server import Context, McpServer, ToolError

server = McpServer("cli-test")


@server.tool()
async def add(ctx: Context, a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def echo(ctx: Context, text: str, loud: bool = False, times: float = 1.0) -> str:
    """Say it back."""
    said = text.upper() if loud else text
    return f"{said} x{times:g}"


@server.tool()
async def fails(ctx: Context) -> str:
    """Always an isError result."""
    raise ToolError("it failed on purpose")


@server.tool()
async def refuses(ctx: Context) -> str:
    """A JSON-RPC error answer, not a result."""
    raise JsonRpcError(-32001, "refused on purpose")


@server.tool()
async def wait_for_cancel(ctx: Context) -> str:
    """Report progress, then run until cancelled."""
    await ctx.report_progress(1, 10, message="started")
    marker = os.environ.get("CLI_MARKER")
    while True:
        await trio.sleep(0.02)
        try:
            await checkpoint_cancelled()
        except RequestCancelled as exc:
            if marker:
                _write(marker, f"{exc.kind} {exc.reason}")
            raise


def _write(path: str, text: str) -> None:
    Path(path).write_text(text)


@server.resource("docs://readme", name="readme", mime_type="text/markdown")
async def readme(ctx: Context) -> str:
    """The readme."""
    return "# Hello"


@server.resource_template("db://users/{user_id}", name="user")
async def user(ctx: Context, user_id: str) -> str:
    return user_id


@server.prompt(description="Review a file")
async def review(ctx: Context, path: str) -> str:
    return f"Review {path}"


if __name__ == "__main__":
    server.run()
