"""What a server author writes: the server, the tool context, what a tool returns or raises.

``McpServer`` serves both MCP eras to any transport: tools (content of
every type, structured output), resources and templates, prompts and
completion, logging, ``subscriptions/listen`` and questions to the client
(``await ctx.elicit(...)``, ``ctx.sample``, ``ctx.list_roots``: a request to
the client on the 2025 era, a multi round-trip request on 2026-07-28).
``server.run()`` serves it on stdio (what a desktop host launches),
``server.run("http", port=...)`` over HTTP.  Importing this module loads
no HTTP stack and patches nothing: ``run`` imports the runner when called.

A handler takes the :class:`Context` by annotating a parameter with it, and
returns a value or the content types here (:class:`Text`, :class:`Image`,
:class:`Audio`, :class:`EmbeddedResource`, :class:`ResourceLink`,
:class:`ToolResult`, :class:`ResourceData`, :class:`PromptMessage`, or
:class:`InputRequired` for a multi round-trip request written by hand).
It raises :class:`ToolError` for an ``isError`` result, and catches
:class:`CancellationError`, the root of every error the library raises to
it.  Settings: :class:`ServerLimits` (server-wide caps),
:class:`ConnectionLimits` (each transport's, per connection) and
:class:`Telemetry`.  Inside a tool, poll the cancellation flag with
``await trio_mcp_cancel.checkpoint_cancelled()``.  Transport plumbing is in
:mod:`trio_mcp_cancel.lowlevel`.
"""

from __future__ import annotations

from ._core.errors import CancellationError
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
from ._protocol.context import Context
from ._protocol.limits import ServerLimits
from ._protocol.mrtr import InputRequired
from ._protocol.prompts import PromptMessage
from ._protocol.resources import ResourceData
from ._protocol.server import McpServer
from ._public import fixup_module_metadata
from ._tasks import Tasks
from ._telemetry.config import Telemetry
from .transports.limits import ConnectionLimits

__all__ = [
    "Audio",
    "CancellationError",
    "ClientRequestError",
    "ClientRequestTimeout",
    "ConnectionLimits",
    "Context",
    "ElicitResult",
    "EmbeddedResource",
    "Image",
    "InputRequired",
    "McpServer",
    "PromptMessage",
    "ResourceData",
    "ResourceLink",
    "ServerLimits",
    "Tasks",
    "Telemetry",
    "Text",
    "ToolError",
    "ToolResult",
]

fixup_module_metadata(__name__, __all__, globals())
