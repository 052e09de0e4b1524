"""What an extension author writes against: :class:`Extension` and the types its hooks take.

An MCP extension adds methods, declares itself under
``capabilities.extensions`` in ``server/discover``, may wrap ``tools/call``
and narrow ``subscriptions/listen``, and may run a service for as long as
the server serves; a server takes it as ``McpServer(extensions=[...])``.
The Tasks extension (:class:`trio_mcp_cancel.server.Tasks`) is built on
exactly this API.  A method handler takes one :class:`HandlerInput` (the
request, its caller and exchange) and returns the result; it raises
:class:`~trio_mcp_cancel.lowlevel.JsonRpcError` to answer an error.

A module of its own (not :mod:`trio_mcp_cancel.lowlevel`) because it is a
separate audience: a transport author never needs these, an extension
author needs only these.
"""

from __future__ import annotations

from .._protocol.calls import ALL_ERAS, LEGACY_ONLY, MODERN_ONLY, HandlerInput, Method
from .._protocol.extension import CallNext, Extension, ExtensionHost, ToolCall
from .._protocol.subscriptions import Filter
from .._public import fixup_module_metadata

__all__ = [
    "ALL_ERAS",
    "LEGACY_ONLY",
    "MODERN_ONLY",
    "CallNext",
    "Extension",
    "ExtensionHost",
    "Filter",
    "HandlerInput",
    "Method",
    "ToolCall",
]

fixup_module_metadata(__name__, __all__, globals())
