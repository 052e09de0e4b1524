"""The transport-independent MCP server: tools, dispatch and cancellation policy.

``McpServer`` serves both MCP eras to any transport; tools receive a
``ToolContext``.  Transports build a ``Caller`` (who is calling) and an
``Exchange`` (how to reach the request's stream); see
:mod:`trio_mcp_cancel._protocol.dispatch` for the path every message takes.
"""

from __future__ import annotations

from ._protocol.dispatch import (
    TOO_MANY_REQUESTS,
    Call,
    Caller,
    Channel,
    Exchange,
    LegacyState,
    McpServer,
    OnCancel,
    ToolContext,
)
from ._protocol.jsonrpc import JsonRpcError
from ._protocol.tasks import TASKS_EXTENSION, TaskManager
from ._protocol.tools import TaskSupport, Tool
from ._protocol.versions import (
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    LEGACY_VERSIONS,
    MODERN_VERSIONS,
    Envelope,
    Era,
)

__all__ = [
    "LATEST_LEGACY_VERSION",
    "LATEST_VERSION",
    "LEGACY_VERSIONS",
    "MODERN_VERSIONS",
    "TASKS_EXTENSION",
    "TOO_MANY_REQUESTS",
    "Call",
    "Caller",
    "Channel",
    "Envelope",
    "Era",
    "Exchange",
    "JsonRpcError",
    "LegacyState",
    "McpServer",
    "OnCancel",
    "TaskManager",
    "TaskSupport",
    "Tool",
    "ToolContext",
]
