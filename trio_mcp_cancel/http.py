"""MCP over Streamable HTTP (both eras) as an ASGI app, for hypercorn's Trio worker.

``serve(app, ...)`` runs it with ``server_config()``'s safe hypercorn defaults
and, with ``handle_signals=True``, stops gracefully on Ctrl-C / SIGTERM.
``app = app_from_env(server)`` builds a module-level app for
``hypercorn --worker-class trio --workers N module:app``, configured from
``MCP_*`` environment variables (``MCP_REDIS_URL`` selects the Redis backend).
:class:`HttpLimits` holds what HTTP bounds beyond the
:class:`~trio_mcp_cancel.server.ConnectionLimits` every transport shares.
"""

from __future__ import annotations

from ._public import fixup_module_metadata
from .transports.auth import Authenticator, bearer_auth
from .transports.http.app import McpHttpApp
from .transports.http.deploy import app_from_env, backend_from_env
from .transports.http.serving import serve, server_config
from .transports.limits import HttpLimits

__all__ = [
    "Authenticator",
    "HttpLimits",
    "McpHttpApp",
    "app_from_env",
    "backend_from_env",
    "bearer_auth",
    "serve",
    "server_config",
]

fixup_module_metadata(__name__, __all__, globals())
