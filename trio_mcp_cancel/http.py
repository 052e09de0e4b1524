"""MCP over Streamable HTTP (both eras) as an ASGI app, for hypercorn's Trio worker.

``serve(app, ...)`` runs it with ``server_config()``'s safe hypercorn defaults
and, with ``handle_signals=True``, stops gracefully on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

from .transports.auth import Authenticator, bearer_auth
from .transports.http.app import McpHttpApp
from .transports.http.serving import serve, server_config

__all__ = ["Authenticator", "McpHttpApp", "bearer_auth", "serve", "server_config"]
