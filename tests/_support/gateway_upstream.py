"""An upstream MCP server for the gateway tests, run over stdio as a child process.

Its ``wait`` tool writes ``started LABEL`` and, when cancelled, ``stopped
LABEL KIND`` (one line each, flushed) to the file named by ``UPSTREAM_LOG``:
what the test reads to see the cancel arrive across the gateway.
"""

from __future__ import annotations

import os

import trio

from trio_mcp_cancel import RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.server import Context, McpServer

LOG = os.environ.get("UPSTREAM_LOG", os.devnull)
server = McpServer("cli-upstream")


def write(line: str) -> None:
    with open(LOG, "a") as log:
        log.write(line + "\n")


@server.tool()
async def wait(ctx: Context, label: str = "") -> str:
    write(f"started {label}")
    try:
        while True:
            await trio.sleep(0.02)
            await checkpoint_cancelled()
    except RequestCancelled as exc:
        write(f"stopped {label} {exc.kind}")
        raise


@server.tool()
async def echo(text: str) -> str:
    return f"cli:{text}"


if __name__ == "__main__":
    server.run()
