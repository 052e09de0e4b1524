"""MCP over stdio: the process is one client's session.

A desktop host (or any MCP client) launches the server as a subprocess and
speaks newline-delimited JSON-RPC on its stdin and stdout.  The simplest
server script is::

    from trio_mcp_cancel.server import McpServer

    server = McpServer("my-server")

    @server.tool()
    async def work(n: int = 10) -> str:
        ...

    if __name__ == "__main__":
        server.run()

``server.run()`` is :func:`run_stdio` with ``trio-mcp-cancel run``'s
logging.  Inside a program that already runs Trio, use :func:`serve_mcp_stdio`.
"""

from __future__ import annotations

import trio

from ._core.registry import RegistryConfig, open_registry
from ._protocol.dispatcher import Served
from ._public import fixup_module_metadata
from .transports.limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits
from .transports.stdio import serve_mcp_stdio

__all__ = ["run_stdio", "serve_mcp_stdio"]


def run_stdio(
    server: Served,
    *,
    registry_config: RegistryConfig | None = None,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
) -> None:
    """Serve *server* on this process's stdin/stdout until the host is done.

    Runs Trio, opens a registry with *registry_config* (for instance
    ``RegistryConfig(grace_period=5)``), and serves until end of file on
    stdin, SIGTERM or Ctrl-C, each of which cancels what still runs, waits
    at most the grace period, and returns normally, so the script exits 0
    with no traceback: a host that closes stdin, or terminates the server,
    is ending the session, not reporting a failure.  Logs go to stderr;
    stdout carries only protocol messages.  ``server.run()`` is this plus
    the logging setup of ``trio-mcp-cancel run``.

    A host that keeps the pipes open but stops reading stdout ends the
    session too, once a write has waited ``limits.write_timeout`` seconds or
    ``limits.max_buffered_bytes`` of notifications wait behind it (see
    :func:`serve_mcp_stdio`): its calls are cancelled and the script exits
    rather than its tools hanging on a full pipe.
    """

    async def main() -> None:
        async with open_registry(registry_config) as registry:
            await serve_mcp_stdio(server, registry, limits=limits, handle_signals=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        # Ctrl-C before the signal handler was installed (or after it was
        # removed): still a clean stop, not a crash.
        pass


fixup_module_metadata(__name__, __all__, globals())
