"""MCP over WebSocket (trio-websocket): one connection is one session."""

from __future__ import annotations

from ._public import fixup_module_metadata
from .transports.websocket import serve_mcp_websocket

__all__ = ["serve_mcp_websocket"]

fixup_module_metadata(__name__, __all__, globals())
