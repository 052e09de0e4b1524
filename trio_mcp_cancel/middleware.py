"""Middleware: wrap every request a server answers, see how it ended, refuse or rewrite it.

Add one with ``McpServer(middleware=[...])`` or the ``@server.middleware``
decorator; the first given is the outermost::

    @server.middleware
    async def audit(request: MiddlewareRequest, call_next: CallNext) -> Any:
        if request.principal is None and request.method == "tools/call":
            raise JsonRpcError(-32001, "Sign in first")
        try:
            return await call_next()
        finally:
            print(request.method, request.outcome)

It runs in the dispatcher's one answer path, so on every transport (stdio,
HTTP, WebSocket, in memory) and in both MCP eras, for every request (never
for a notification).  ``request.outcome`` (:class:`Outcome`) is set before
``call_next()`` returns or raises: ``"ok"``, ``"error"`` or ``"cancelled"``,
with the cancel's kind, cause and phase read from the registry.  A middleware
must let ``trio.Cancelled`` and ``RequestCancelled`` propagate.

Built-ins: :class:`RequestLog` (one log line per request), :class:`Timing`
(each request's duration), :class:`RateLimit` (a token bucket per principal,
refusing with the server's too-many-requests code, HTTP 429 with
``Retry-After``) and :class:`ResponseCache` (results of read-only tools).
"""

from __future__ import annotations

from ._middleware.cache import ResponseCache
from ._middleware.observe import RequestLog, Timing
from ._middleware.rate_limit import RateLimit
from ._protocol.middleware import CallNext, Middleware, MiddlewareRequest, Outcome
from ._public import fixup_module_metadata
from ._wire.jsonrpc import JsonRpcError

__all__ = [
    "CallNext",
    "JsonRpcError",
    "Middleware",
    "MiddlewareRequest",
    "Outcome",
    "RateLimit",
    "RequestLog",
    "ResponseCache",
    "Timing",
]

# JsonRpcError is re-exported as it is (its home is trio_mcp_cancel.lowlevel).
fixup_module_metadata(__name__, [n for n in __all__ if n != "JsonRpcError"], globals())
