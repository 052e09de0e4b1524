"""MCP over WebSocket (trio-websocket): one connection is one session.

Each connection gets a fresh ``session:ws-<random>`` namespace, so a
``notifications/cancelled`` only reaches requests sent on the same
connection.  Requests run concurrently in the connection's nursery (at most
``max_concurrent_calls``; more are answered with an error, not queued
without bound).  The framing is MCP's stdio rules on a bidirectional
stream (one JSON-RPC message per text frame; cancellation is
``notifications/cancelled``, in both eras), served by the shared
:class:`~trio_mcp_cancel.transports._connection.MessageConnection`.
When the peer closes the socket, or it breaks, every
request still running is cancelled by its private token (kind
``"disconnect"``): the flag at once, the hard cancel ``limits.disconnect_grace_period``
later.  The handler returns only when all of them have finished, so a
closed connection leaves no task and no row behind.

A client that keeps the socket open but stops reading (a zero receive
window, a paused process) is disconnected the same way: tools never wait
on the socket (their messages queue in a bounded outbox, see
:class:`~trio_mcp_cancel.transports._connection.MessageConnection`), and
once one frame has waited ``write_timeout`` seconds to be sent, or
``max_buffered_bytes`` of notifications pile up behind it, the connection's calls are
cancelled (kind ``"disconnect"``) and the TCP connection is closed without
waiting for the peer to take a close frame.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from functools import partial
from typing import Final

import trio
from trio_websocket import (
    ConnectionClosed,
    Endpoint,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from .._auth.resource import OAuthResource, Refusal
from .._auth.tokens import AccessToken
from .._core.registry import Registry, current_registry
from .._protocol import jsonrpc
from .._protocol.dispatcher import Served
from .._protocol.jsonrpc import JsonRpcError
from .._protocol.registration import Registration
from ._connection import PEER_GONE, MessageConnection, connection_caller
from ._startup import require_running
from ._tasks import tasks_served
from .auth import Authenticator, authenticate
from .http.oauth import check_scopes
from .http.rules import HttpError, request_headers
from .limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits

__all__ = ["serve_mcp_websocket"]

logger = logging.getLogger("trio_mcp_cancel.websocket")

#: Seconds a stalled peer gets to take our close frame before the TCP
#: connection is closed under it (it stopped reading, so it rarely does).
_STALLED_CLOSE_TIMEOUT: Final = 0.25


async def serve_mcp_websocket(
    server: Served,
    registry: Registry | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    path: str = "/mcp",
    auth: Authenticator | OAuthResource | None = None,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *server* over WebSocket until cancelled; for ``nursery.start``.

    ``task_status.started`` receives the :class:`trio_websocket.WebSocketServer`
    (its ``port`` is the bound port when *port* is 0).  Oversized messages
    close the connection (code 1009), as trio-websocket does.

    *limits* (:class:`~trio_mcp_cancel.server.ConnectionLimits`) apply to
    each connection.  ``write_timeout`` (seconds one frame may wait to be
    sent) and ``max_buffered_bytes`` (progress and log notifications that
    may wait behind the frame being sent) bound what a client that stops
    reading costs: tools never block on its socket, and past either bound it
    is disconnected (its calls cancelled, kind ``"disconnect"``) rather than
    pinning them forever.  Replies, large results included, are always
    accepted; while more than ``max_buffered_bytes`` wait in all, no new
    message is read.  The ping keep-alive (``keepalive_interval``) catches a
    peer that vanished; these catch one that is there but does not read.

    *auth* as on :class:`~trio_mcp_cancel.http.McpHttpApp`: an
    :class:`~trio_mcp_cancel.oauth.OAuthResource` authorizes the upgrade
    request like an HTTP request (``401``/``403``/``503`` with the same
    challenge).  The connection then lasts no longer than its token (closed,
    code 1008, at ``exp``), and a ``tools/call`` of a tool whose scopes the
    token lacks closes it (code 1008, ``insufficient_scope``): a WebSocket
    message has no status to refuse it with.
    """
    if registry is None:
        registry = current_registry()
    require_running(registry, "serve_mcp_websocket")
    handler = partial(
        _handle,
        server=server,
        registry=registry,
        path=path,
        auth=auth,
        limits=limits,
    )
    async with tasks_served(server):
        await serve_websocket(
            handler,
            host,
            port,
            None,
            max_message_size=limits.max_message_size,
            task_status=task_status,
        )


async def _handle(
    request: WebSocketRequest,
    *,
    server: Served,
    registry: Registry,
    path: str,
    auth: Authenticator | OAuthResource | None,
    limits: ConnectionLimits,
) -> None:
    # An exception escaping a handler would tear down the whole server, so
    # everything but cancellation stops here.
    try:
        if request.path.split("?", 1)[0] != path:
            await request.reject(404)
            return
        try:
            # The HTTP endpoint's head rules: a repeated Authorization or
            # Origin is refused, not read as its last copy.
            headers = request_headers(list(request.headers))
        except HttpError as refused:
            await request.reject(
                refused.status,
                extra_headers=[(b"content-type", b"application/json")],
                body=refused.body(),
            )
            return
        principal = None
        access: AccessToken | None = None
        if isinstance(auth, OAuthResource):
            try:
                remote = request.remote
                address = (
                    (str(remote.address), remote.port) if isinstance(remote, Endpoint) else None
                )
                access = await auth.authenticate(headers, address)
            except Refusal as refused:
                body = HttpError(refused.status, str(refused)).body()
                await request.reject(refused.status, extra_headers=refused.headers(), body=body)
                return
            principal = access.principal
        elif auth is not None:
            principal = await authenticate(auth, headers)
            if principal is None:
                await request.reject(401, extra_headers=[(b"www-authenticate", b"Bearer")])
                return
        subprotocol = "mcp" if "mcp" in request.proposed_subprotocols else None
        ws = await request.accept(subprotocol=subprotocol)
        remote = request.remote
        caller = connection_caller(
            "ws",
            registry,
            max_concurrent_calls=limits.max_concurrent_calls,
            principal=principal,
            client=(str(remote.address), remote.port) if isinstance(remote, Endpoint) else None,
        )
        connection = MessageConnection(
            server,
            caller,
            ws.send_message,
            limits=limits,
            gone=(ConnectionClosed, *PEER_GONE),
        )
        async with trio.open_nursery() as nursery:
            if limits.keepalive_interval is not None:
                nursery.start_soon(_keepalive, ws, limits.keepalive_interval)
            nursery.start_soon(_close_when_stalled, ws, connection)
            incoming = _messages(ws)
            if isinstance(auth, OAuthResource) and access is not None:
                if access.expires_at is not None:
                    nursery.start_soon(_close_at_expiry, ws, access.expires_at)
                incoming = _scoped(incoming, ws, auth, server.dispatcher.registration, access)
            async with contextlib.aclosing(incoming) as messages:
                await connection.serve(messages)
            nursery.cancel_scope.cancel()
    except (ConnectionClosed, trio.BrokenResourceError):
        pass
    except Exception:
        logger.exception("WebSocket connection failed")


async def _close_at_expiry(ws: WebSocketConnection, expires_at: float) -> None:
    """Close the connection when the token that opened it expires (its calls are cancelled)."""
    await trio.sleep(max(0.0, expires_at - time.time()))
    logger.info("WebSocket token expired; closing the connection")
    await _close(ws, 1008, "token expired", _STALLED_CLOSE_TIMEOUT)


async def _scoped(
    messages: AsyncGenerator[str | bytes, None],
    ws: WebSocketConnection,
    resource: OAuthResource,
    registration: Registration,
    access: AccessToken,
) -> AsyncGenerator[str | bytes, None]:
    """*messages*, until one the token may not send: then the connection is closed (1008)."""
    async with contextlib.aclosing(messages):
        async for raw in messages:
            if registration.tool_scopes or resource.method_scopes:
                try:
                    check_scopes(resource, registration, jsonrpc.decode(raw), access)
                except JsonRpcError:
                    pass  # not JSON, or too deep: the connection answers the error
                except Refusal as refused:
                    logger.info("WebSocket message refused: %s", refused)
                    reason = "insufficient_scope: " + " ".join(refused.missing)
                    await _close(ws, 1008, reason[:120], 1.0)
                    return
            yield raw


async def _keepalive(ws: WebSocketConnection, interval: float) -> None:
    """Ping the peer every *interval*; close the connection when a pong is late.

    A peer that vanished without a close (a sleeping laptop, a dead NAT
    entry) or that stopped reading would otherwise pin its requests until
    TCP gives up; closing ends the read loop, which cancels them (kind
    ``"disconnect"``).  The traffic also keeps proxies from timing out an
    idle connection.
    """
    try:
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(interval) as waited:
                await ws.ping()
            if waited.cancelled_caught:
                logger.info("WebSocket peer answered no ping within %ss; closing", interval)
                await _close(ws, 1011, "keep-alive timeout", interval)
                return
    except ConnectionClosed:
        return  # the read loop sees it too, and ends the connection gracefully


async def _close_when_stalled(ws: WebSocketConnection, connection: MessageConnection) -> None:
    """Close the connection as soon as the peer is found to have stopped reading.

    Its calls are already cancelled; closing the TCP connection now (not
    after the grace period) frees the socket and its buffers at once.
    """
    await connection.wait_stalled()
    logger.info("WebSocket peer stopped reading; closing the connection")
    await _close(ws, 1008, "client stopped reading", _STALLED_CLOSE_TIMEOUT)


async def _close(ws: WebSocketConnection, code: int, reason: str, patience: float) -> None:
    """Close *ws*, giving the peer at most *patience* seconds for the close handshake.

    Not shielded: cancelled (the handler ending, the server stopping), or
    timed out, ``aclose`` still closes the TCP connection under the
    WebSocket, so nothing waits on a peer that does not answer.
    """
    with trio.move_on_after(patience):
        await ws.aclose(code, reason)


async def _messages(ws: WebSocketConnection) -> AsyncGenerator[str | bytes, None]:
    """The connection's messages until the peer closes it."""
    try:
        while True:
            yield await ws.get_message()
    except ConnectionClosed:
        return
