"""``trio-mcp-cancel run --transport websocket``: serve a target over WebSocket.

WebSocket is not a standard MCP transport (the proposal, SEP-1288, is
open); this project's rules for it are those of
:mod:`trio_mcp_cancel.transports.websocket`: subprotocol ``mcp``, one
JSON-RPC message per text frame, one connection one session, cancellation
by ``notifications/cancelled``.  The settings are stdio's (the registry's
grace period, ``MCP_MAX_REQUEST_TIME``, ``MCP_TASK_TTL``,
``MCP_STATE_SECRET``), and SIGINT/SIGTERM start the transport's graceful
shutdown, as over HTTP.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import partial

import trio

from .._core.registry import RegistryConfig, open_registry
from ..transports.http.deploy import limits_from_env, seconds_setting, server_settings_from_env
from ..transports.websocket import serve_mcp_websocket
from . import target
from .runner import StartupFailed, startup_problem

__all__ = ["serve_websocket_found"]

_log = logging.getLogger("trio_mcp_cancel.run")


def serve_websocket_found(found: object, *, host: str, port: int) -> Callable[[], int]:
    """What serves *found* (an ``McpServer``, or an ``McpHttpApp``'s server) over WebSocket.

    Checked before anything runs, as :func:`.runner.serve_found` does: a
    target it cannot serve is a :class:`~.target.TargetError`, a bad
    setting a :class:`ValueError`; serving that cannot start (the port is
    taken) raises :class:`~.runner.StartupFailed`.
    """
    server = target.stdio_server(found)
    limits = limits_from_env(os.environ)
    server_settings_from_env(server, os.environ)
    grace_period = seconds_setting(os.environ, "MCP_GRACE_PERIOD", 5.0)
    config = RegistryConfig(grace_period=grace_period)

    listening: list[int] = []

    async def serve() -> None:
        async with open_registry(config) as registry, trio.open_nursery() as nursery:
            serving = partial(
                serve_mcp_websocket, server, registry, host, port,
                limits=limits, handle_signals=True,
            )  # fmt: skip
            websocket_server = await nursery.start(serving)
            listening.append(websocket_server.port)
            _log.info("serving MCP on ws://%s:%d/mcp", host, websocket_server.port)

    def run() -> int:
        try:
            trio.run(serve)
        except KeyboardInterrupt:
            pass  # Ctrl-C before or after the signal handler: still a clean stop
        except BaseException as exc:
            problem = startup_problem(exc, host, port, "--port", listening=bool(listening))
            if problem is None:
                raise
            raise StartupFailed(problem) from exc
        return 0

    return run
