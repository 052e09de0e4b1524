"""One way to serve a server from a blocking call: ``server.run()`` and ``trio-mcp-cancel run``.

:class:`McpServer` is the public server class: the registration and
configuration of :class:`~.._protocol.mcp_server.McpServerBase` plus
:meth:`McpServer.run`.  ``run`` sits above every transport (it runs Trio and
picks one), so it lives here rather than in ``_protocol``, which the
transports import; the console script (:mod:`.cli`) calls the same
:func:`serve_found`, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from enum import Enum
from functools import partial
from typing import Final, Literal

import trio

from .._core.registry import RegistryConfig
from .._protocol.mcp_server import McpServerBase
from ..stdio import run_stdio
from ..transports.http.deploy import seconds_setting
from ..transports.http.serving import serve, server_config
from . import target

__all__ = [
    "FROM_ENVIRONMENT",
    "FromEnvironment",
    "McpServer",
    "Transport",
    "configure_logging",
    "serve_found",
]

Transport = Literal["stdio", "http"]


class FromEnvironment(Enum):
    """The type of :data:`FROM_ENVIRONMENT` (an enum, so type checkers know its one value)."""

    token = 0


#: ``grace_period=`` default: ``MCP_GRACE_PERIOD`` if set, else 5 seconds (what the CLI does).
FROM_ENVIRONMENT: Final = FromEnvironment.token

_LEVELS = ("debug", "info", "warning", "error", "critical")


def configure_logging(level: str) -> None:
    """Log lines to stderr, each with its process id (workers share the supervisor's stderr).

    INFO by default, so each cancelled request's one line (kind, reason,
    time from flag to stop) is visible without a logging setup of the user's.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(_LEVELS)}, not {level!r}")
    logging.basicConfig(
        level=level.upper(), format="[%(process)d] %(levelname)s %(name)s: %(message)s"
    )
    if level.lower() == "info":  # coredis logs each script-cache miss at INFO
        logging.getLogger("coredis").setLevel(logging.WARNING)


def serve_found(
    found: object,
    transport: Transport,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace_period: float | FromEnvironment | None = FROM_ENVIRONMENT,
) -> Callable[[], int]:
    """What serves *found* (an ``McpServer`` or an ASGI app): call it to serve until stopped.

    Checked before anything runs, so a target it cannot serve (a
    :class:`~.target.TargetError`) or a bad setting (:class:`ValueError`) is
    told apart from a failure while serving.  The returned function blocks
    and returns the exit status.  ``stdio``: until end of input, SIGTERM or
    Ctrl-C.  ``http``: with :func:`~..transports.http.serving.serve` and
    ``server_config()``'s safe settings, stopping gracefully on
    SIGINT/SIGTERM; 1 when the socket cannot be bound.  *grace_period* is the
    registry's grace period (``None``: never hard-cancel).
    """
    if grace_period is FROM_ENVIRONMENT:
        grace_period = seconds_setting(os.environ, "MCP_GRACE_PERIOD", 5.0)
    registry_config = RegistryConfig(grace_period=grace_period)
    if transport == "stdio":
        server = target.stdio_server(found)

        def serve_stdio() -> int:
            run_stdio(server, registry_config=registry_config)
            return 0

        return serve_stdio
    if transport != "http":
        raise ValueError(f"transport must be 'stdio' or 'http', not {transport!r}")
    app = target.http_app(found, registry_config)
    config = server_config(host=host, port=port, errorlog=logging.getLogger("hypercorn.error"))

    def serve_http() -> int:
        try:
            trio.run(partial(serve, app, config, handle_signals=True))
        except KeyboardInterrupt:
            pass  # Ctrl-C before or after serving: still a clean stop
        except OSError as exc:
            print(f"trio-mcp-cancel: cannot serve on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        return 0

    return serve_http


class McpServer(McpServerBase):
    """An MCP server: register tools, resources and prompts, then :meth:`run` it.

    Transport-independent: the same server is served on stdio
    (:meth:`run`, or :func:`~trio_mcp_cancel.stdio.serve_mcp_stdio` inside a
    Trio program), over HTTP (:class:`~trio_mcp_cancel.http.McpHttpApp`),
    WebSocket, or to the test client.  See :class:`McpServerBase` for the
    configuration keywords.
    """

    def run(
        self,
        transport: Transport = "stdio",
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        grace_period: float | FromEnvironment | None = FROM_ENVIRONMENT,
        log_level: str = "info",
    ) -> None:
        """Serve this server until stopped; blocks (it calls ``trio.run`` itself).

        ``run()`` serves stdio, what a desktop host launches;
        ``run("http", host=..., port=...)`` serves Streamable HTTP (both eras)
        on ``127.0.0.1:8000`` by default (``port=0``: any free port, logged).
        Both stop cleanly on SIGINT/SIGTERM (and stdio on end of input).
        *grace_period* is the seconds from a cancel to its hard cancel (default:
        ``MCP_GRACE_PERIOD``, else 5; ``None``: never hard-cancel).  Logging
        goes to stderr at *log_level*, one line per cancelled request at
        ``"info"``, as ``trio-mcp-cancel run`` does.  Raises
        :class:`SystemExit` (status 1) when the HTTP socket cannot be bound.
        """
        configure_logging(log_level)
        status = serve_found(self, transport, host=host, port=port, grace_period=grace_period)()
        if status:
            raise SystemExit(status)
