"""What a server author needs: the server, the tool context, content types and limits.

``McpServer`` serves both MCP eras to any transport: tools (content of
every type, structured output), resources and templates, prompts and
completion, logging, ``subscriptions/listen`` and questions to the client
(``await ctx.elicit(...)``, ``ctx.sample``, ``ctx.list_roots``: a request to
the client on the 2025 era, a multi round-trip request on 2026-07-28).
``server.run()`` serves it on stdio (what a desktop host launches),
``server.run("http", port=...)`` over HTTP.  Importing this module loads
no HTTP stack and patches nothing: ``run`` imports the runner when called.  Inside a tool, poll the
cancellation flag with ``await trio_mcp_cancel.checkpoint_cancelled()``.
Transport plumbing (``Dispatcher``, ``Caller``, ``Exchange``, call states)
and MRTR by hand (``InputRequired`` and its request builders) are in
:mod:`trio_mcp_cancel.lowlevel`.
"""

from __future__ import annotations

from ._protocol.client_requests import ElicitResult
from ._protocol.client_table import ClientRequestError, ClientRequestTimeout
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
from ._protocol.limits import ServerLimits
from ._protocol.prompts import PromptMessage
from ._protocol.resources import ResourceData
from ._protocol.server import McpServer
from ._public import fixup_module_metadata
from ._tasks import Tasks
from ._telemetry.config import Telemetry
from .transports.limits import ConnectionLimits

__all__ = [
    "Audio",
    "ClientRequestError",
    "ClientRequestTimeout",
    "ConnectionLimits",
    "ElicitResult",
    "EmbeddedResource",
    "Image",
    "McpServer",
    "PromptMessage",
    "ResourceData",
    "ResourceLink",
    "ServerLimits",
    "Tasks",
    "Telemetry",
    "Text",
    "ToolContext",
    "ToolError",
    "ToolResult",
]

fixup_module_metadata(__name__, __all__, globals())
