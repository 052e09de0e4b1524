"""MCP over Streamable HTTP (both eras) as an ASGI app, for hypercorn's Trio worker.

``serve(app, ...)`` runs it with ``server_config()``'s safe hypercorn defaults
and, with ``handle_signals=True``, stops gracefully on Ctrl-C / SIGTERM.
``app = app_from_env(server)`` builds a module-level app for
``hypercorn --worker-class trio --workers N module:app``, configured from
``MCP_*`` environment variables (``MCP_REDIS_URL`` selects the Redis backend).
"""

from __future__ import annotations

from .transports.auth import Authenticator, bearer_auth
from .transports.http.app import McpHttpApp
from .transports.http.deploy import app_from_env, backend_from_env
from .transports.http.serving import serve, server_config

__all__ = [
    "Authenticator",
    "McpHttpApp",
    "app_from_env",
    "backend_from_env",
    "bearer_auth",
    "serve",
    "server_config",
]
