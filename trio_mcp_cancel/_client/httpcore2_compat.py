"""All knowledge of httpcore2's internals, in one module, with a version check and an off switch.

**What it is for: the modern era's cancel over HTTP/2.**  A modern-era call
is cancelled by closing its request's stream.  On HTTP/1.1 httpcore2 closes
a connection whose response was closed before its end, so the server sees
the disconnect.  On HTTP/2, httpcore2 2.16 only forgets the stream (before
or after the response headers came) and sends no ``RST_STREAM``: the server
would go on running a cancelled call until it ends by itself.  With this
module, a stream closed while still open on our side is reset (``CANCEL``)
on its own connection, which lives on for the other requests.  A write on
the shared connection is also shielded, so a cancel never leaves half a
frame on it (a write is bounded by the client's write timeout).

**How.**  httpx2 has no hook for it, so :func:`install` changes the class of
*one client's* objects, never httpcore2's own classes (other users of httpx2
in the process are untouched): its connection pool makes connections whose
HTTP/2 connection resets closed streams (``_response_closed``, which
httpcore2 calls, shielded, for every stream that ends or is abandoned).
Direct connections only: through a proxy nothing changes.  Written by hand
(no maintained library does this).

**Applied on use, never at import.**  Importing this module imports no
private httpcore2 module; the subclasses are built the first time a client
that speaks HTTP/2 is opened (:func:`install`, called by the client's
transport), and an httpcore2 whose private modules moved only loses the
reset.

**The version check and the off switch.**  :func:`install` changes nothing,
and the client is plain httpx2, when ``MCP_HTTPCORE2_STREAM_RESET=off`` (or
``0``/``false``/``no``) is in the environment, when the installed httpcore2
is not a release it was checked against (:data:`CHECKED`), or when the
objects are not the shapes it expects; each reason is logged once on
``trio_mcp_cancel.client``.  Off, every call still works; what is lost is
only the reset: a modern-era call cancelled over HTTP/2 is no longer seen
by the server (it runs to its end or its own time limit), and its stream
is forgotten on our side as httpcore2 does.  ``tests/client/
test_httpcore2_compat.py`` pins the private names and signatures used here,
so an httpcore2 upgrade that moves them fails there first.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Final

import attrs

from .._compat import installed, why_off

__all__ = ["CHECKED", "ENV", "ResetStatus", "install", "reset_default"]

logger = logging.getLogger("trio_mcp_cancel.client")

#: The environment variable that turns the reset off (``off``, ``0``, ``false``, ``no``).
ENV: Final = "MCP_HTTPCORE2_STREAM_RESET"
#: The httpcore2 releases (major, minor; first and last) whose internals this
#: module was checked against; outside them the client is plain httpx2.  2.17 changed
#: only the imports of ``_async/http2.py`` and the pool's connection options.
CHECKED: Final = ((2, 16), (2, 17))

_lock = threading.Lock()
#: The reasons already logged: each is logged once per process.
_logged: set[str] = set()


@attrs.frozen
class ResetStatus:
    """Whether :func:`install` may change a client, and why not."""

    httpcore2: str | None
    """The installed httpcore2 version (``None``: not installed)."""
    applied: bool
    reason: str = ""
    """Why the reset is not applied (empty when it is)."""


def _version() -> str | None:
    return installed("httpcore2")


def reset_default() -> ResetStatus:
    """Whether the reset applies here: the off switch, the version, the private names."""
    version = _version()
    why = why_off(ENV, "httpcore2", version, CHECKED)
    if why:
        return ResetStatus(version, False, why)
    if _classes() is None:
        return ResetStatus(version, False, f"httpcore2 {version} moved the internals it needs")
    return ResetStatus(version, True)


def install(client: Any) -> bool:
    """Make *client*'s direct HTTP/2 connections reset the streams it abandons.

    Called when the client's transport is opened.  Returns whether it
    could; when not, *client* is left as httpx2 made it (the reason is
    logged once).
    """
    status = reset_default()
    classes = _classes() if status.applied else None
    if classes is None:
        _log_once(status.reason, switched_off=status.reason.startswith(ENV))
        return False
    pool_class = classes[0]
    transport = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    import httpcore2

    if type(pool) is not httpcore2.AsyncConnectionPool:
        _log_once(f"httpx2's transport is not a plain connection pool ({type(pool).__name__})")
        return False
    pool.__class__ = pool_class
    return True


def _log_once(reason: str, *, switched_off: bool = False) -> None:
    with _lock:
        if reason in _logged:
            return
        _logged.add(reason)
    if switched_off:
        logger.debug("HTTP/2 streams are not reset: %s", reason)
    else:
        logger.warning(
            "HTTP/2 streams cannot be reset (%s): a modern cancel over HTTP/2 may not"
            " reach the server",
            reason,
        )


@functools.cache
def _classes() -> tuple[type[Any], type[Any], type[Any]] | None:
    """The pool, connection and HTTP/2 connection subclasses, built on first use.

    ``None`` when httpcore2's private modules or methods are not where this
    module expects them.
    """
    try:
        import h2.errors
        import httpcore2
        import trio
        from httpcore2._async.connection import AsyncHTTPConnection
        from httpcore2._async.http2 import AsyncHTTP2Connection
    except ImportError:
        return None
    needed = (
        (AsyncHTTP2Connection, "_response_closed"),
        (AsyncHTTP2Connection, "_write_outgoing_data"),
        (httpcore2.AsyncConnectionPool, "create_connection"),
    )
    if not all(callable(getattr(owner, name, None)) for owner, name in needed):
        return None

    class ResettingHTTP2Connection(AsyncHTTP2Connection):
        async def _write_outgoing_data(self, request: Any) -> None:
            # A write cancelled halfway leaves half a frame on a connection
            # every stream shares (and breaks a TLS stream for good): a write
            # finishes, bounded by the client's write timeout, and the cancel
            # lands after it.
            with trio.CancelScope(shield=True):
                await super()._write_outgoing_data(request)

        async def _response_closed(self, stream_id: int) -> None:
            try:
                stream = self._h2_state.streams.get(stream_id)
                if stream is not None and not stream.closed and self._write_exception is None:
                    self._h2_state.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                    async with self._write_lock:
                        await self._network_stream.write(self._h2_state.data_to_send(), 5.0)
            except Exception as exc:  # a stream closed meanwhile, a broken connection
                logger.debug("RST_STREAM %d not sent: %r", stream_id, exc)
            await super()._response_closed(stream_id)

    class ResettingConnection(AsyncHTTPConnection):
        # httpcore2 assigns ``_connection`` once it knows the protocol (ALPN):
        # a property sees that assignment and swaps an HTTP/2 connection's class.
        @property
        def _connection(self) -> Any:
            return self.__dict__.get("_connection")

        @_connection.setter
        def _connection(self, connection: Any) -> None:
            if type(connection) is AsyncHTTP2Connection:
                connection.__class__ = ResettingHTTP2Connection
            self.__dict__["_connection"] = connection

    class ResettingPool(httpcore2.AsyncConnectionPool):
        def create_connection(self, origin: Any) -> Any:
            connection = super().create_connection(origin)
            if type(connection) is AsyncHTTPConnection:
                connection.__class__ = ResettingConnection
            return connection

    return ResettingPool, ResettingConnection, ResettingHTTP2Connection
