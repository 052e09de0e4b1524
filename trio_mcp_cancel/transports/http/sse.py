"""Server-sent events framing for one request's response stream."""

from __future__ import annotations

from typing import Final

from ..._wire import jsonrpc
from ..._wire.jsonrpc import Message

__all__ = ["KEEPALIVE", "SSE_HEADERS", "event"]

SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    # nginx and friends buffer responses unless told not to; a buffered
    # stream delivers progress late and keep-alives never.
    (b"x-accel-buffering", b"no"),
)

#: An SSE comment: clients ignore it, proxies and read timeouts see traffic.
KEEPALIVE: Final = b": keep-alive\n\n"


def event(message: Message) -> bytes:
    """One JSON-RPC message as an SSE ``message`` event."""
    return b"event: message\ndata: " + jsonrpc.encode(message) + b"\n\n"
