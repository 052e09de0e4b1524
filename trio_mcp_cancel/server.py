"""The transport-independent MCP server: tools, dispatch and cancellation policy.

``McpServer`` serves both MCP eras to any transport: tools (content of
every type, structured output), resources and templates, prompts and
completion, logging, ``subscriptions/listen`` and multi round-trip requests
(``InputRequired``); every handler receives a ``ToolContext``.
Transports build a ``Caller`` (who is calling) and an ``Exchange`` (how to reach
the request's stream); see
:mod:`trio_mcp_cancel._protocol.dispatcher` for the path every message takes.
"""

from __future__ import annotations

from ._protocol.admission import TOO_MANY_REQUESTS
from ._protocol.calls import Call
from ._protocol.content import (
    Audio,
    Content,
    EmbeddedResource,
    Image,
    ResourceLink,
    Text,
    ToolError,
    ToolResult,
)
from ._protocol.context import ToolContext
from ._protocol.exchange import Caller, Channel, Exchange, LegacyState
from ._protocol.jsonrpc import JsonRpcError
from ._protocol.mcp_server import McpServer, OnCancel
from ._protocol.mrtr import InputRequired, StateSigner, elicit, list_roots, sample
from ._protocol.prompts import Message
from ._protocol.resources import ResourceData
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
    "Audio",
    "Content",
    "EmbeddedResource",
    "Image",
    "InputRequired",
    "Message",
    "ResourceData",
    "ResourceLink",
    "StateSigner",
    "Text",
    "ToolError",
    "ToolResult",
    "elicit",
    "list_roots",
    "sample",
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
