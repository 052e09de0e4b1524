"""Reset an HTTP/2 stream the client stops reading: the modern era's cancel on HTTP/2.

On HTTP/1.1, httpcore closes a connection whose response was closed before
its end, so the server sees the disconnect.  On HTTP/2 it only forgets the
stream (httpcore2 2.16 sends no ``RST_STREAM``): the server would go on
running a cancelled call.  :func:`reset_stream` sends ``RST_STREAM
(CANCEL)`` for that one stream, on the connection the response came on,
and the connection lives on for the other requests.

httpx2 offers no public way to reach a response's HTTP/2 connection, so
this follows the response's stream wrappers (httpx2's ``BoundAsyncStream``
and ``AsyncResponseStream``, httpcore2's ``PoolByteStream``) to httpcore2's
``HTTP2ConnectionByteStream``, and resets the stream through its
connection's ``h2`` state under its write lock, as httpcore itself writes.
Written by hand (no maintained library does it) and kept to this module;
when httpx2's internals change it logs once and does nothing, and
``tests/client/test_http_pool.py`` fails.
"""

from __future__ import annotations

import logging
from typing import Any

import h2.errors
import httpx2
import trio

__all__ = ["reset_stream"]

logger = logging.getLogger("trio_mcp_cancel.client")

_warned = False


def _h2_stream(response: httpx2.Response) -> Any:
    """httpcore2's HTTP/2 stream object behind *response*, or ``None``."""
    node: Any = response.stream
    for _ in range(6):
        connection = getattr(node, "_connection", None)
        if connection is not None and hasattr(connection, "_h2_state"):
            return node
        node = getattr(node, "_stream", None) or getattr(node, "_httpcore_stream", None)
        if node is None:
            return None
    return None


async def reset_stream(response: httpx2.Response) -> bool:
    """Send ``RST_STREAM(CANCEL)`` for *response* if it is an open HTTP/2 stream.

    Returns whether a reset was sent.  Shielded (it runs while the caller
    is being cancelled) and bounded by one write.
    """
    global _warned
    if response.extensions.get("http_version") != b"HTTP/2":
        return False
    stream = _h2_stream(response)
    stream_id = response.extensions.get("stream_id")
    if stream is None or not isinstance(stream_id, int):
        if not _warned:
            _warned = True
            logger.warning("cannot reset an HTTP/2 stream: httpx2's internals changed")
        return False
    connection = stream._connection
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        try:
            connection._h2_state.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            await connection._write_outgoing_data(stream._request)
        except Exception as exc:  # a stream already closed, a broken connection
            logger.debug("RST_STREAM %d not sent: %r", stream_id, exc)
            return False
        return True
    return False
