"""What a server author needs: the server, the tool context, content types and limits.

``McpServer`` serves both MCP eras to any transport: tools (content of
every type, structured output), resources and templates, prompts and
completion, logging, ``subscriptions/listen`` and multi round-trip requests
(``InputRequired``).  ``server.run()`` serves it on stdio (what a desktop
host launches), ``server.run("http", port=...)`` over HTTP.  Inside a tool,
poll the cancellation flag with ``await trio_mcp_cancel.checkpoint_cancelled()``.
Transport plumbing (``Dispatcher``, ``Caller``, ``Exchange``, call states)
is in :mod:`trio_mcp_cancel.lowlevel`.
"""

from __future__ import annotations

from ._protocol.content import (
    Audio,
    EmbeddedResource,
    Image,
    ResourceLink,
    Text,
    ToolError,
    ToolResult,
)
from ._protocol.context import ToolContext
from ._protocol.mrtr import InputRequired, elicit, list_roots, sample
from ._protocol.prompts import PromptMessage
from ._protocol.resources import ResourceData
from ._public import fixup_module_metadata
from ._run.runner import McpServer
from ._telemetry.config import Telemetry
from .transports.limits import ConnectionLimits

__all__ = [
    "Audio",
    "ConnectionLimits",
    "EmbeddedResource",
    "Image",
    "InputRequired",
    "McpServer",
    "PromptMessage",
    "ResourceData",
    "ResourceLink",
    "Telemetry",
    "Text",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "elicit",
    "list_roots",
    "sample",
]

fixup_module_metadata(__name__, __all__, globals())
