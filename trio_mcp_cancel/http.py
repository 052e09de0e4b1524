"""MCP over Streamable HTTP (both eras) as an ASGI app, for hypercorn's Trio worker."""

from __future__ import annotations

from .transports.auth import Authenticator, bearer_auth
from .transports.http.app import McpHttpApp

__all__ = ["Authenticator", "McpHttpApp", "bearer_auth"]
