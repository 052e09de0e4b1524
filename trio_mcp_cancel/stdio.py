"""MCP over stdio: the process is one client's session.

A desktop host (or any MCP client) launches the server as a subprocess and
speaks newline-delimited JSON-RPC on its stdin and stdout.  The simplest
server script is::

    from trio_mcp_cancel.server import McpServer, ToolContext
    from trio_mcp_cancel.stdio import run_stdio

    server = McpServer("my-server")

    @server.tool()
    async def work(ctx: ToolContext, n: int = 10) -> str:
        ...

    if __name__ == "__main__":
        run_stdio(server, grace_period=5)

Inside a program that already runs Trio, use :func:`serve_mcp_stdio`.
"""

from __future__ import annotations

from typing import Any

import trio

from ._core.registry import RegistryConfig, open_registry
from ._protocol.mcp_server import McpServerBase
from .transports.stdio import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_WRITE_TIMEOUT,
    serve_mcp_stdio,
)

__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_WRITE_TIMEOUT",
    "run_stdio",
    "serve_mcp_stdio",
]


def run_stdio(
    server: McpServerBase,
    config: RegistryConfig | None = None,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    max_concurrent_requests: int = 64,
    max_request_time: float | None = None,
    write_timeout: float | None = DEFAULT_WRITE_TIMEOUT,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    **registry_config: Any,
) -> None:
    """Serve *server* on this process's stdin/stdout until the host is done.

    Runs Trio, opens a registry (*config* and/or *registry_config*
    overrides such as ``grace_period=5``), and serves until end of file on
    stdin, SIGTERM or Ctrl-C, each of which cancels what still runs, waits
    at most the grace period, and returns normally, so the script exits 0
    with no traceback: a host that closes stdin, or terminates the server,
    is ending the session, not reporting a failure.  Logs go to stderr;
    stdout carries only protocol messages.

    A host that keeps the pipes open but stops reading stdout ends the
    session too, once a write has waited *write_timeout* seconds or
    *max_buffered_bytes* of notifications wait behind it (see
    :func:`serve_mcp_stdio`): its calls are cancelled and the script exits
    rather than its tools hanging on a full pipe.
    """

    async def main() -> None:
        async with open_registry(config, **registry_config) as registry:
            await serve_mcp_stdio(
                server,
                registry,
                max_message_size=max_message_size,
                max_concurrent_requests=max_concurrent_requests,
                max_request_time=max_request_time,
                write_timeout=write_timeout,
                max_buffered_bytes=max_buffered_bytes,
                handle_signals=True,
            )

    try:
        trio.run(main)
    except KeyboardInterrupt:
        # Ctrl-C before the signal handler was installed (or after it was
        # removed): still a clean stop, not a crash.
        pass
