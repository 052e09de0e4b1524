"""MCP over WebSocket (trio-websocket): one connection is one session.

Not a standard MCP transport: MCP defines stdio and Streamable HTTP, and a
WebSocket transport is only proposed (SEP-1288, open).  The rules served
here (subprotocol ``mcp``, one JSON-RPC message per frame, cancellation by
``notifications/cancelled``, close codes, limits) are this project's; see
docs/reference.md, "WebSocket".
"""

from __future__ import annotations

from ._public import fixup_module_metadata
from .transports.websocket import serve_mcp_websocket

__all__ = ["serve_mcp_websocket"]

fixup_module_metadata(__name__, __all__, globals())
