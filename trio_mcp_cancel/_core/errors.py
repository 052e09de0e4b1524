"""Exceptions and JSON-RPC error codes.

The exception classes live in one small module so that transports, tool code
and the registry can all import them without importing each other.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "REQUEST_CANCELLED",
    "CancellationError",
    "CancellationLimitReached",
    "InvalidRequestId",
    "RegistryClosed",
    "RequestCancelled",
]

#: JSON-RPC error code answered for a request that was cancelled.  MCP reuses
#: the Language Server Protocol's ``RequestCancelled`` code.
REQUEST_CANCELLED: Final = -32800


class CancellationError(Exception):
    """The root of every error a tool or handler author sees from this library.

    One of three roots, by audience (h11's way): this one for the server
    side (tools, handlers, kernel users), :class:`~trio_mcp_cancel.client.McpError`
    for client code, :class:`~trio_mcp_cancel.backends.BackendError` for
    backend and token-verifier authors.  The name is the kernel's: a
    cancellation was the first thing a tool could see go wrong.  It also
    roots what a tool raises or catches that is not a cancellation
    (``ToolError``, ``ClientRequestError``, ``JsonRpcError``), so that
    ``except CancellationError`` in a tool catches every error the library
    raised on purpose, and nothing else.
    """


class InvalidRequestId(CancellationError, ValueError):
    """A request id that is neither an ``int`` nor a short ``str``.

    Raised instead of letting a hostile id (a list, a float, a megabyte of
    text) reach a dict key or a log line.
    """


class CancellationLimitReached(CancellationError):
    """The namespace already holds its quota of cancellation rows.

    This is the *only* bound that rejects: the global cap evicts instead, so
    that one client filling the table cannot stop other clients' cancels.
    """

    def __init__(self, namespace: str, limit: int) -> None:
        super().__init__(f"namespace {namespace!r} already holds {limit} cancellation rows")
        self.namespace = namespace
        self.limit = limit


class RegistryClosed(CancellationError, RuntimeError):
    """The registry is not running (not yet started, or already closed)."""


class NoRegistry(CancellationError, RuntimeError):
    """No registry here: no ``open_registry()`` encloses the calling task.

    Raised by :func:`~trio_mcp_cancel.current_registry` (and so by anything
    that needs a registry and was given none).  Its own type, so a caller
    can tell "there is no registry" from any other ``RuntimeError`` (a
    ``RuntimeError`` still, as it always was).
    """


class RequestCancelled(CancellationError):
    """The current request was cancelled by the client, a disconnect or the server.

    Raised by :func:`checkpoint_cancelled` when the polled flag is set, and by
    :func:`tracked` on exit when the grace period ran out and the request's
    cancel scope was hard-cancelled.  It is an ordinary exception, not
    ``trio.Cancelled``: a cooperative abort is the tool's decision, and an
    enclosing cancel scope must not mistake it for its own cancellation.
    """

    def __init__(self, reason: str | None = None, kind: str = "client") -> None:
        super().__init__(reason or "Request cancelled")
        self.reason = reason
        self.kind = kind
