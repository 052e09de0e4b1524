"""MCP over WebSocket (trio-websocket): one connection is one session."""

from __future__ import annotations

from .transports.websocket import serve_mcp_websocket

__all__ = ["serve_mcp_websocket"]
