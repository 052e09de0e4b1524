"""Reset an HTTP/2 stream the client stops reading: the modern era's cancel on HTTP/2.

On HTTP/1.1, httpcore closes a connection whose response was closed before
its end, so the server sees the disconnect.  On HTTP/2, httpcore2 2.16 only
forgets the stream, before or after the response headers came, and sends
no ``RST_STREAM``: the server would go on running a cancelled call.  Here
a stream closed while still open on our side is reset (``CANCEL``), on its
own connection, which lives on for the other requests.

httpx2 has no hook for it, so :func:`install` changes the class of *one
client's* objects, never httpcore2's own classes (other users of httpx2 in
the process are untouched): its connection pool makes connections whose
HTTP/2 connection resets closed streams (``_response_closed``, which
httpcore2 calls, shielded, for every stream that ends or is abandoned).
Direct connections only: through a proxy nothing changes (a proxy's own
HTTP/2 streams stay as httpcore2 makes them).  Written by hand (no
maintained library does this) and kept to this module; when httpx2's
internals change, :func:`install` logs and does nothing, and
``tests/client/test_http_pool.py`` fails.
"""

from __future__ import annotations

import logging
from typing import Any

import h2.errors
import httpcore2
import httpx2
import trio
from httpcore2._async.connection import AsyncHTTPConnection
from httpcore2._async.http2 import AsyncHTTP2Connection

__all__ = ["install"]

logger = logging.getLogger("trio_mcp_cancel.client")


class _ResettingHTTP2Connection(AsyncHTTP2Connection):
    async def _write_outgoing_data(self, request: Any) -> None:
        # A write cancelled halfway leaves half a frame on a connection every
        # stream shares (and breaks a TLS stream for good): a write finishes,
        # bounded by the client's write timeout, and the cancel lands after it.
        with trio.CancelScope(shield=True):
            await super()._write_outgoing_data(request)

    async def _response_closed(self, stream_id: int) -> None:
        stream = self._h2_state.streams.get(stream_id)
        if stream is not None and not stream.closed and self._write_exception is None:
            try:
                self._h2_state.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                async with self._write_lock:
                    await self._network_stream.write(self._h2_state.data_to_send(), 5.0)
            except Exception as exc:  # a stream closed meanwhile, a broken connection
                logger.debug("RST_STREAM %d not sent: %r", stream_id, exc)
        await super()._response_closed(stream_id)


class _ResettingConnection(AsyncHTTPConnection):
    @property
    def _connection(self) -> Any:
        return self.__dict__.get("_connection")

    @_connection.setter
    def _connection(self, connection: Any) -> None:
        if type(connection) is AsyncHTTP2Connection:
            connection.__class__ = _ResettingHTTP2Connection
        self.__dict__["_connection"] = connection


class _ResettingPool(httpcore2.AsyncConnectionPool):
    def create_connection(self, origin: Any) -> Any:
        connection = super().create_connection(origin)
        if type(connection) is AsyncHTTPConnection:
            connection.__class__ = _ResettingConnection
        return connection


def install(client: httpx2.AsyncClient) -> bool:
    """Make *client*'s direct HTTP/2 connections reset the streams it abandons.

    Returns whether it could (httpx2's internals as expected).
    """
    transport = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore2.AsyncConnectionPool:
        logger.warning(
            "HTTP/2 streams cannot be reset on this httpx2 (%s): a modern cancel over"
            " HTTP/2 may not reach the server",
            httpx2.__version__,
        )
        return False
    pool.__class__ = _ResettingPool
    return True
